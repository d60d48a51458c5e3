"""Real-env C throughput in CarRacing: `python bench/carracing.py` prints one JSON object.

For each renderer (`env.renderer: official | fast`), steps/s **per core** of
* `raw`: the bare `wm.envs.make_env(cfg)` FrameEnv (physics, drawing, the `ha2018` preprocessing to 64×64)
  stepping uniform random controller-space actions, episodes of the same seeds and cap as the agent's, resets
  included;
* `agent`: `wm.rollouts.rollout.RealEvaluator` (V + M + C batched in one compiled step for `--envs` envs) with untrained
  but real models of the `carracing` preset's sizes (V z 32, M LSTM 256 without a done head, C `zh` with bias:
  867 params) evaluating a small population (C params ~ N(0, 0.1²), like CMA-ES's σ₀);
and `ratio` = agent / raw. Two settings:
* `1_worker`: in this process, one TF thread (as a pool worker): raw and agent alternate `--rounds` times on the
  same episodes so a shared machine's load falls on both alike; the agent's CPU time is split into `env` (its
  envs' `FrameEnv.step` and `reset`), `graph` (the compiled V + M + C call and its outputs) and `other` (the
  evaluate loop's own Python: ε, batching, bookkeeping), in ms per agent step; with `fast`,
  `1_worker_agent_by_envs` runs the agent again with 8 and 16 envs (`--more-envs`; as many episodes): V's
  convolutions cost less per frame in a larger batch;
* `2_workers`: `mpirun -n 3 python -m wm train-controller` on a scratch run dir holding random V and M weights
  (es.fitness real; pop × trials so that each generation is one task per worker, filling its envs), run through
  this file as `--probe`: the workers serve tasks through a comm wrapper that times each task (wall, CPU, the
  split above, its agent steps) and then, with the result sent, a raw pass over the task's seeds on a FrameEnv of
  the same config, so raw and agent alternate in both workers at once; each worker also traces its step graph
  once before any task. The generations are timed, not the evaluation of the mean.
Per-core figures: `steps_per_s` = steps / wall seconds / processes, `cpu_steps_per_s` = steps per CPU second of the
stepping process (robust to other work sharing the cores; the figure to compare on a loaded machine). `aims`
checks the targets: agent ≥ 0.85× raw with `official`; `fast` agent ≥ 4× the `official` raw rate (CPU, 1 worker,
with `--envs` envs and with each of `--more-envs`).
`--task-fill RUN` instead measures, on a finished run whose C trained in the real game, how a task's size
(`es.chunk` members × `es.trials` episodes in the worker's envs) costs a step (`task_fill`).
The episode cap (`--steps`) matters for `fast`: its first 50 steps (the camera's zoom) draw polygons at 8× then 4×
and cost ≈ 2.5–3.5× a later step, so short episodes understate it; `official` hardly depends on the cap.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from wm.core.config import load  # noqa: E402

MPIRUN = str(Path(sys.executable).with_name("mpirun"))
RENDERERS = ("official", "fast")


def car_cfg(renderer: str, steps: int, envs: int) -> Any:
    return load(["carracing"], [f"env.renderer={renderer}", f"env.max_steps={steps}", f"es.real_envs_per_worker={envs}"])


class Timed:
    """Wraps a callable, adding up its wall and CPU seconds."""

    def __init__(self, fn: Any):
        self.fn, self.wall, self.cpu = fn, 0.0, 0.0

    def __call__(self, *args: Any, **kw: Any) -> Any:
        w, c = time.perf_counter(), time.process_time()
        out = self.fn(*args, **kw)
        self.wall += time.perf_counter() - w
        self.cpu += time.process_time() - c
        return out


def rates(steps: int, wall: float, cpu: float, procs: int = 1) -> dict[str, float]:
    return {"steps_per_s": round(steps / wall / procs, 1), "cpu_steps_per_s": round(steps / cpu, 1)}


# ---------------------------------------------------------------- raw env
def raw_pass(env: Any, seeds: list[int]) -> tuple[int, float, float]:
    """Uniform random controller-space actions, one episode per seed to the env's cap: (steps, wall, cpu)."""
    n, w, c = 0, time.perf_counter(), time.process_time()
    for s in seeds:
        rng = np.random.default_rng(s)
        env.reset(seed=int(s))
        while True:
            n += 1
            _, _, term, trunc, _ = env.step(rng.uniform(-1.0, 1.0, 3).astype(np.float32))
            if term or trunc:
                break
    return n, time.perf_counter() - w, time.process_time() - c


# ---------------------------------------------------------------- 1 worker, in process
def one_worker(run: Path, renderer: str, a: argparse.Namespace, envs: int = 0, raw_too: bool = True) -> dict[str, Any]:
    """In this process: raw and agent passes over the same episodes (`envs` envs, as many episodes; default the
    command line's), alternating `--rounds` times; `raw_too=False`: the agent only."""
    from wm.envs import make_env
    from wm.rollouts.engine import EvalSpec, init_worker

    envs, episodes = (envs, envs) if envs else (a.envs, a.episodes)
    cfg = car_cfg(renderer, a.steps, envs)
    ctx = init_worker(EvalSpec.of("real", cfg, str(run)))  # one TF thread, V/M loaded, envs opened
    ev = ctx.evaluator
    seeds = list(range(episodes))
    params = np.random.default_rng(1).normal(0.0, 0.1, (episodes, ev.c.n_params))
    ev.evaluate(params[:1], np.array([[1000]]), max_steps=2)  # trace the step graph
    env = make_env(cfg)
    env.reset(seed=1000)
    graph, env_timers = timers(ev)
    raw = [0, 0.0, 0.0]
    agent = [0, 0.0, 0.0]
    for _ in range(a.rounds):
        if raw_too:
            for i, v in enumerate(raw_pass(env, seeds)):
                raw[i] += v
        w, c = time.perf_counter(), time.process_time()
        _, lengths = ev.evaluate(params, np.array(seeds)[:, None])
        agent[0] += int(lengths.sum())
        agent[1] += time.perf_counter() - w
        agent[2] += time.process_time() - c
    env.close()
    env_cpu = sum(t.cpu for t in env_timers)
    ctx.close()
    g = rates(*agent)
    per_step = {"env": env_cpu, "graph": graph.cpu, "other": agent[2] - env_cpu - graph.cpu}
    out: dict[str, Any] = {
        "agent": {"steps": agent[0], **g, "cpu_ms_per_step": {k: round(v / agent[0] * 1e3, 3) for k, v in per_step.items()}}
    }
    if raw_too:
        r = rates(*raw)
        out["raw"] = {"steps": raw[0], **r}
        out["ratio"] = round(g["steps_per_s"] / r["steps_per_s"], 3)
        out["cpu_ratio"] = round(g["cpu_steps_per_s"] / r["cpu_steps_per_s"], 3)
    return out


# ---------------------------------------------------------------- 2 workers under mpirun
def make_run(path: Path) -> None:
    """A run dir holding random-weight V (z 32) and M (LSTM 256, no done head) where `load_world` expects them."""
    from wm.core import tf_setup

    tf_setup.setup(threads=1, gpu=False)
    from wm.core.rundir import RunDir
    from wm.models.mdnrnn import MDNRNN
    from wm.models.vae import ConvVAE

    run = RunDir(path)
    m = MDNRNN(32, 3, 256, 5, False)
    m.step(np.zeros((1, 32), np.float32), np.zeros((1, 3), np.float32), m.initial_state(1))
    for verb in ("train-vae", "train-mdnrnn"):
        run.stage_dir(verb).mkdir(parents=True, exist_ok=True)
    m.save_weights(str(run.mdnrnn_weights))
    ConvVAE(32).save_weights(str(run.vae_weights))
    for verb in ("train-vae", "train-mdnrnn"):
        run.mark_done(verb, {})


class TaskClock:
    """A comm wrapper for `mpi.pool_mpi.serve` that times each task and, after it, a raw pass over the task's seeds.

    `tasks`: per task [map seq, steps, wall, cpu, env cpu, graph cpu]; `raw`: per task [map seq, steps, wall, cpu]
    of the raw env (a FrameEnv of the same config, uniform random actions) on the same seeds right after the task
    (its result already sent), so agent and raw alternate in each worker under the same load."""

    def __init__(self, comm: Any):
        self._comm, self.tasks, self.raw, self._start = comm, [], [], None
        self.graph: Timed | None = None
        self.env: list[Timed] = []
        self.raw_env: Any = None

    def cpu_split(self) -> tuple[float, float]:
        return sum(t.cpu for t in self.env), self.graph.cpu if self.graph else 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._comm, name)

    def recv(self, *a: Any, **k: Any) -> Any:
        msg = self._comm.recv(*a, **k)
        if msg[0] == "task":
            seeds = np.asarray(msg[3][2]).ravel().tolist()
            self._start = (msg[1][0], seeds, time.perf_counter(), time.process_time(), *self.cpu_split())
        elif msg[0] == "init":
            return ("init", traced(msg[1], self), msg[2])
        return msg

    def isend(self, msg: Any, *a: Any, **k: Any) -> Any:
        start, self._start = self._start, None
        if msg[0] not in ("ok", "err") or start is None:
            return self._comm.isend(msg, *a, **k)
        seq, seeds, w0, c0, env0, graph0 = start
        w, c = time.perf_counter() - w0, time.process_time() - c0
        env, graph = self.cpu_split()
        steps = int(np.sum(msg[2][2])) if msg[0] == "ok" else 0
        self.tasks.append([seq, steps, w, c, env - env0, graph - graph0])
        req = self._comm.isend(msg, *a, **k)
        self.raw.append([seq, *raw_pass(self.raw_env, seeds)])
        return req


def timers(ev: Any) -> tuple[Timed, list[Timed]]:
    """Wrap an evaluator's step graph and its envs' `step`/`reset` in `Timed`: (graph, env timers)."""
    for e in ev.envs:
        e.step, e.reset = Timed(e.step), Timed(e.reset)
    ev._step = Timed(ev._step)
    return ev._step, [t for e in ev.envs for t in (e.step, e.reset)]


def traced(init: Any, clock: TaskClock) -> Any:
    """The pool's worker initializer, then a 2-step episode (the step graph is traced before any task), then timers."""

    def init_and_trace(*args: Any) -> Any:
        ctx = init(*args)
        ev = ctx.evaluator
        ev.evaluate(np.zeros((1, ev.c.n_params)), np.array([[1000]]), max_steps=2)
        clock.graph, clock.env = timers(ev)
        clock.raw_env = ctx.spec.facts.open()
        clock.raw_env.reset(seed=1000)
        return ctx

    return init_and_trace


def probe(out: Path, argv: list[str]) -> int:
    """One rank of `mpirun -n 3 python bench/carracing.py --probe OUT -- train-controller ...`."""
    from wm.mpi import launched_rank

    rank = launched_rank()
    if rank == 0:
        from wm.cli import main

        return main(argv)
    from wm.mpi.worker import ONE_THREAD

    os.environ.update(ONE_THREAD)
    from mpi4py import MPI
    from wm.mpi.pool_mpi import serve

    comm = TaskClock(MPI.COMM_WORLD)
    code = serve(comm)
    (out / f"rank{rank}.json").write_text(json.dumps({"tasks": comm.tasks, "raw": comm.raw}))
    return code


def two_workers(template: Path, work: Path, renderer: str, a: argparse.Namespace) -> dict[str, Any]:
    import shutil

    run, out = work / f"run-{renderer}", work / f"probe-{renderer}"
    shutil.copytree(template, run)
    out.mkdir()
    chunk = max(1, a.envs // a.trials)  # members per task: a task's episodes fill the worker's envs
    sets = [
        "es.fitness=real",
        f"es.popsize={2 * chunk}",  # one task per worker and generation
        f"es.trials={a.trials}",
        f"es.chunk={chunk}",
        f"es.generations={a.gens}",
        "es.eval_every=1000",
        f"es.eval_episodes={a.trials}",
        "es.task_timeout=600",
        f"es.real_envs_per_worker={a.envs}",
        f"env.renderer={renderer}",
        f"env.max_steps={a.steps}",
    ]
    argv = ["train-controller", "--configs", "carracing", "--run", str(run), "--set", *sets]
    env = {**os.environ, "WM_MPI_INIT_TIMEOUT": "120", "TF_CPP_MIN_LOG_LEVEL": "3"}
    cmd = [MPIRUN, "-n", "3", sys.executable, __file__, "--probe", str(out), "--", *argv]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (1, 2)]
    last = max(t[0] for r in ranks for t in r["tasks"])  # the evaluation of the mean: not timed

    def per_core(rows: list[list[Any]]) -> dict[str, Any]:
        """Steps/s per worker from [seq, steps, wall, cpu, ...] rows of both ranks: the mean of the two ranks'."""
        per_rank = [[t for t in rank if t[0] < last] for rank in rows]
        steps = sum(t[1] for rank in per_rank for t in rank)
        return {
            "steps": steps,
            "steps_per_s": round(float(np.mean([sum(t[1] for t in r) / sum(t[2] for t in r) for r in per_rank])), 1),
            "cpu_steps_per_s": round(float(np.mean([sum(t[1] for t in r) / sum(t[3] for t in r) for r in per_rank])), 1),
        }

    agent, raw = per_core([r["tasks"] for r in ranks]), per_core([r["raw"] for r in ranks])
    timed = [t for r in ranks for t in r["tasks"] if t[0] < last]
    cpu = sum(t[3] for t in timed)
    split = {"env": sum(t[4] for t in timed), "graph": sum(t[5] for t in timed)}
    split["other"] = cpu - split["env"] - split["graph"]
    agent["cpu_ms_per_step"] = {k: round(v / agent["steps"] * 1e3, 3) for k, v in split.items()}
    shutil.rmtree(run)
    return {
        "raw": raw,
        "agent": agent,
        "ratio": round(agent["steps_per_s"] / raw["steps_per_s"], 3),
        "cpu_ratio": round(agent["cpu_steps_per_s"] / raw["cpu_steps_per_s"], 3),
        "settings": sets[1:4],
    }


# ---------------------------------------------------------------- a task's size, on a finished run
def task_fill(run_path: Path, a: argparse.Namespace) -> dict[str, Any]:
    """How a real-env task's size costs C's training (`--task-fill RUN`). A worker steps `es.real_envs_per_worker`
    envs together, one compiled V + M + C call for all of them each step whether an env is busy or idle: a task of
    `members × es.trials` episodes smaller than that leaves slots idle for the whole task. Plays tasks of each of
    `--members` sizes with one evaluator in this process (one TF thread, as a pool worker), alternating the sizes
    `--rounds` times, and gives each size's CPU milliseconds a step and its speed against the first (> 1: faster).
    Members are the run's C (`--task-params`) plus N(0, `--task-sigma`²), as a CMA-ES generation around its mean, on
    training-side seeds (and CarRacing's no-progress cut-off) of the run's config, as training plays them."""
    from wm.core.rundir import RunDir
    from wm.rollouts.world import read_params

    run = RunDir(run_path)
    cfg = run.load_config() if run.config_path.is_file() else None
    if cfg is None or cfg.es.fitness != "real" or not run.is_done("train-controller"):
        return {"skipped": f"{run_path}: no C trained in the real game"}
    from wm.envs.setup import setup
    from wm.rollouts.engine import EvalSpec, init_worker

    ctx = init_worker(EvalSpec.of("real", cfg, str(run.path)))  # one TF thread, V and M loaded, envs opened
    ev = ctx.evaluator
    path = run.params(a.task_params) if a.task_params in ("best", "mean") else Path(a.task_params)
    centre = read_params(path, ev.c.n_params).astype(np.float32)
    trials, envs = cfg.es.trials, ev.n_envs
    cut = cfg.es.no_progress_steps if setup(cfg).family.track_tiles else 0
    rng = np.random.default_rng(7)
    ev.evaluate(centre[None], np.array([[10_000]]), max_steps=2)  # trace the step graph
    total = {m: [0, 0.0] for m in a.members}
    rows = []
    for rnd in range(a.rounds):
        for m in a.members:
            params = centre + a.task_sigma * rng.standard_normal((m, centre.size)).astype(np.float32)
            seeds = rng.integers(10_000, 2**31 - 1, (m, trials))
            c = time.process_time()
            _, lengths = ev.evaluate(params, seeds, no_progress=cut)
            cpu, steps = time.process_time() - c, int(lengths.sum())
            total[m][0] += steps
            total[m][1] += cpu
            rows.append({"round": rnd, "members": m, "episodes": m * trials, "steps": steps, "cpu_s": round(cpu, 2)})
    ctx.close()
    ms = {m: 1e3 * cpu / steps for m, (steps, cpu) in total.items()}
    first = ms[a.members[0]]
    sizes = {
        f"{m}x{trials}": {"episodes": m * trials, "envs": envs, "cpu_ms_per_step": round(v, 3), "speed": round(first / v, 3)}
        for m, v in ms.items()
    }
    return {"run": str(run_path), "passes": rows, "sizes": sizes}


# ---------------------------------------------------------------- main
def main() -> None:
    from bench.train_controller import machine_cpu  # busy CPU seconds of the whole machine (/proc/stat)

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200, help="episode cap (env.max_steps) of raw and agent episodes")
    ap.add_argument("--episodes", type=int, default=4, help="1 worker: episodes per pass")
    ap.add_argument("--envs", type=int, default=4, help="es.real_envs_per_worker: envs one agent worker steps together")
    ap.add_argument("--trials", type=int, default=2, help="2 workers: es.trials (pop × trials = 2 × --envs)")
    ap.add_argument("--rounds", type=int, default=1, help="1 worker: raw/agent alternations")
    ap.add_argument("--gens", type=int, default=1, help="2 workers: generations (one task per worker each)")
    ap.add_argument("--renderers", nargs="+", default=list(RENDERERS), choices=RENDERERS)
    ap.add_argument("--only", choices=("1_worker", "2_workers"), help="one setting only")
    ap.add_argument(
        "--more-envs",
        type=int,
        nargs="*",
        default=[8, 16],
        metavar="E",
        help="1 worker, fast: the agent again with E envs (E episodes): V's batch grows",
    )
    ap.add_argument("--task-fill", type=Path, metavar="RUN", help="only: a task's size on a finished real-fitness run")
    ap.add_argument("--members", type=int, nargs="+", default=[3, 4], help="--task-fill: members per task, in turn")
    ap.add_argument("--task-params", default="mean", help="--task-fill: best | mean | .npz, the C members scatter round")
    ap.add_argument("--task-sigma", type=float, default=0.1, help="--task-fill: the members' spread around that C")
    ap.add_argument("--probe", type=Path, help=argparse.SUPPRESS)
    a, rest = ap.parse_known_args()
    if a.task_fill is not None:
        print(json.dumps(task_fill(a.task_fill, a), indent=1))
        return
    if a.probe is not None:
        raise SystemExit(probe(a.probe, rest[1:] if rest[:1] == ["--"] else rest))
    t0, busy0, load0 = time.time(), machine_cpu(), os.getloadavg()[0]
    result: dict[str, Any] = {
        "machine_cores": os.cpu_count(),
        "episode_steps": a.steps,
        "episodes": a.episodes,
        "envs_per_worker": a.envs,
        "models": "V z 32, M LSTM 256 (no done head), C zh + bias (867 params); random weights",
    }
    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp) / "template"
        make_run(template)
        for r in a.renderers:
            res: dict[str, Any] = {}
            if a.only in (None, "1_worker"):
                res["1_worker"] = one_worker(template, r, a)
                if r == "fast" and a.more_envs:
                    res["1_worker_agent_by_envs"] = {e: one_worker(template, r, a, e, False)["agent"] for e in a.more_envs}
            if a.only in (None, "2_workers"):
                res["2_workers"] = two_workers(template, Path(tmp), r, a)
            result[r] = res
    if "1_worker" in result.get("official", {}) and "1_worker" in result.get("fast", {}):
        off, fast = result["official"]["1_worker"], result["fast"]["1_worker"]
        result["aims"] = {
            "official_agent_over_raw_cpu": off["cpu_ratio"],
            "official_ok (>= 0.85)": off["cpu_ratio"] >= 0.85,
            "fast_agent_over_official_raw_cpu": round(fast["agent"]["cpu_steps_per_s"] / off["raw"]["cpu_steps_per_s"], 2),
            "fast_ok (>= 4)": fast["agent"]["cpu_steps_per_s"] >= 4 * off["raw"]["cpu_steps_per_s"],
        }
        for e, g in result["fast"].get("1_worker_agent_by_envs", {}).items():
            result["aims"][f"fast_agent_{e}_envs_over_official_raw_cpu"] = round(
                g["cpu_steps_per_s"] / off["raw"]["cpu_steps_per_s"], 2
            )
    wall = time.time() - t0
    result["wall_s"] = round(wall, 1)
    result["machine_busy_cores"] = round((machine_cpu() - busy0) / wall, 2)
    result["loadavg_1min"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
