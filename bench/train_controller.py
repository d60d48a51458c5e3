"""CMA-ES s/generation, `mpirun -n 2` (1 worker) vs `-n 3` (2 workers): `python bench/train_controller.py [--quick|--small]`.

Prints one JSON object. For each fitness (`dream`: the batched dream evaluator on a random-weight M, done logit
biased off so every dream runs to the cap; `real`: V + M + C in real ViZDoom with random-weight V/M) the stage
runs end to end as `mpirun -n N python -m wm train-controller` on a scratch run dir, and seconds per generation
is the median of the per-generation times of `metrics/controller.jsonl` (`es/elapsed` differences), skipping
generation 1 (graph tracing) and the last (it also evaluates the mean). `speedup` = s/gen(1 worker) /
s/gen(2 workers); the aim is ≥ 1.8.

Modes:
* default / `--quick`: the paper's Doom sizes (z 64, LSTM 512), a pop of 16: start-up dominates `--quick`;
* `--small`: the `small` preset (`--configs doom_takecover small`: LSTM 256, pop 32 × 16 trials), 5 generations;
  the dream capped at `--dream-steps` (every dream runs to it) and a real-env mode (pop 32 × 1 episode, capped
  at `--real-steps`), so the timed generations are seconds each and start-up does not enter them.
`--repeat N` runs each configuration N times: other processes on the machine shift the numbers, so compare
runs whose `others_cores` is near 0. `--env K=V` sets a variable in every rank (e.g. OPENBLAS_NUM_THREADS=1).

Each rank is run through this file (`--probe`), which times without changing what runs: rank 0 runs
`wm.cli.main` with `MPIPool.map` wrapped to sample its own CPU time (`time.process_time`, all threads), the wall
clock and the machine's busy CPU time (/proc/stat) at every map's start and end; worker ranks run
`mpi.pool_mpi.serve` (as `python -m mpi` does) through a comm wrapper that stamps each task's wall and CPU
time. The timed window runs from the map of generation 2 to the map of the last generation, and per
configuration the JSON has:
* `rank0_cpu_s_per_gen`: rank 0's CPU seconds per generation (CMA-ES ask/tell, pickling, and the wait for
  results); `rank0_wait_cpu_s_per_gen` is the part spent inside `pool.map`, and `rank0_wait_main_thread_...`
  the main thread's share of it (the pool's polling; the rest is other threads, e.g. OpenBLAS's spinning on);
* `worker_core_share`: CPU time / wall time of the workers' tasks (1.0 = each worker had a whole core; in the
  real mode the ViZDoom engines are processes of their own and do part of the work); `worker_busy`: the share
  of the window the workers spent in tasks; `worker_idle_cpu_share`: CPU / wall of a worker between tasks;
* `machine_busy_cores`: the cores in use on the whole machine in the window (/proc/stat), `job_cores` the part
  of them this job used (every process under the bench: ranks, mpirun, ViZDoom engines) and `others_cores` the
  rest: other processes (the noise; a 2-core machine has no room for them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from wm.core.bounded import read_jsonl  # noqa: E402
from wm.core.rundir import RunDir  # noqa: E402

MPIRUN = str(Path(sys.executable).with_name("mpirun"))
TICK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- the probe (runs on every rank)
def machine_cpu() -> float:
    """Busy CPU seconds of the whole machine since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / TICK


def job_cpu() -> float:
    """CPU seconds used so far by the live processes of this job: the bench process named by $WM_BENCH_PID and
    everything under it (mpirun, Hydra's proxy, every rank, the ViZDoom engines the workers start)."""
    root, parent, cpu = int(os.environ.get("WM_BENCH_PID", os.getpid())), {}, {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(pid)] = int(fields[1])  # fields from the state on: state ppid ... utime (11) stime (12)
        cpu[int(pid)] = int(fields[11]) + int(fields[12])
    total = 0
    for pid in cpu:
        p = pid
        while p > 1 and p != root:
            p = parent.get(p, 0)
        if p == root:
            total += cpu[pid]
    return total / TICK


def main_thread_cpu() -> float:
    """CPU seconds of this process's main thread (the rest of `process_time` is other threads: BLAS, TF, MPI)."""
    with open(f"/proc/self/task/{os.getpid()}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def sample() -> dict[str, float]:
    return {
        "t": time.time(),
        "cpu": time.process_time(),
        "main": main_thread_cpu(),
        "machine": machine_cpu(),
        "job": job_cpu(),
    }


class TaskClock:
    """A comm wrapper for `serve`: stamps each task (wall start/end, process CPU at start/end)."""

    def __init__(self, comm: Any):
        self._comm, self.tasks, self._start = comm, [], None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._comm, name)

    def recv(self, *a: Any, **k: Any) -> Any:
        msg = self._comm.recv(*a, **k)
        if msg[0] == "task":
            self._start = (time.time(), time.process_time())
        return msg

    def _stamp(self, msg: Any) -> None:
        if msg[0] in ("ok", "err") and self._start is not None:
            t0, c0 = self._start
            self.tasks.append([t0, time.time(), c0, time.process_time()])
            self._start = None

    def send(self, msg: Any, *a: Any, **k: Any) -> Any:
        self._stamp(msg)
        return self._comm.send(msg, *a, **k)

    def isend(self, msg: Any, *a: Any, **k: Any) -> Any:
        self._stamp(msg)
        return self._comm.isend(msg, *a, **k)


def probe(out: Path, argv: list[str]) -> int:
    """One rank of `mpirun -n N python bench/train_controller.py --probe OUT -- <wm argv>`."""
    from wm.mpi import launched_rank

    rank = launched_rank()
    if rank > 0:
        from wm.mpi.worker import ONE_THREAD

        os.environ.update(ONE_THREAD)
        from mpi4py import MPI
        from wm.mpi.pool_mpi import serve

        comm = TaskClock(MPI.COMM_WORLD)
        code = serve(comm)
        (out / f"rank{rank}.json").write_text(json.dumps({"tasks": comm.tasks, "cpu": time.process_time()}))
        return code
    import wm.mpi.pool_mpi as pool_mpi

    maps: list[dict[str, Any]] = []
    timed = pool_mpi.MPIPool.map

    def map_(self: Any, fn: Any, payloads: Any, *a: Any, **k: Any) -> Any:
        maps.append({"start": sample(), "tasks": len(payloads)})
        try:
            return timed(self, fn, payloads, *a, **k)
        finally:
            maps[-1]["end"] = sample()

    pool_mpi.MPIPool.map = map_
    from wm.cli import main

    try:
        return main(argv)
    finally:
        (out / "rank0.json").write_text(json.dumps({"maps": maps, "cpu": time.process_time()}))


# ---------------------------------------------------------------- the bench
def make_upstream(path: Path, hidden: int = 512) -> None:
    """A run dir holding random-weight V and M of the Doom sizes (LSTM `hidden`), initial_z and DONE sentinels."""
    from wm.core import tf_setup

    tf_setup.setup(threads=1, gpu=False)
    from wm.models.mdnrnn import MDNRNN
    from wm.models.vae import ConvVAE

    run = RunDir(path)
    m = MDNRNN(64, 1, hidden, 5, True)
    m.step(np.zeros((1, 64), np.float32), np.zeros((1, 1), np.float32), m.initial_state(1), np.ones(1, np.float32))
    bias = m.out_bias.numpy()
    bias[0] = -20.0  # done logit off: every dream runs to dream.max_steps (uniform, comparable work)
    m.out_bias.assign(bias)
    for verb in ("train-vae", "encode", "train-mdnrnn"):
        run.stage_dir(verb).mkdir(parents=True, exist_ok=True)
    m.save_weights(str(run.mdnrnn_weights))
    ConvVAE(64).save_weights(str(run.vae_weights))
    rng = np.random.default_rng(0)
    np.savez(run.initial_z, mu=rng.normal(size=(16, 64)).astype(np.float32), logvar=np.full((16, 64), -2.0, np.float32))
    for verb in ("train-vae", "encode", "train-mdnrnn"):
        run.mark_done(verb, {})


def window_stats(out: Path, ranks: int, gens: int) -> dict[str, Any]:
    """Rank 0's CPU per generation, the workers' core share and the machine's load between the map of
    generation 2 and the map of generation G (every task of generations 2..G−1 lies inside)."""
    maps = json.loads((out / "rank0.json").read_text())["maps"]  # generations 1..G, then the evaluation of the mean
    a, b, n = maps[1]["start"], maps[gens - 1]["start"], gens - 2
    inside = maps[1 : gens - 1]
    wall = b["t"] - a["t"]
    rank0 = b["cpu"] - a["cpu"]
    task_cpu = task_wall = idle_cpu = idle_wall = 0.0
    for r in range(1, ranks):
        tasks = [t for t in json.loads((out / f"rank{r}.json").read_text())["tasks"] if a["t"] <= t[0] < b["t"]]
        task_cpu += sum(t[3] - t[2] for t in tasks)
        task_wall += sum(t[1] - t[0] for t in tasks)
        for prev, nxt in zip(tasks, tasks[1:], strict=False):
            idle_cpu += nxt[2] - prev[3]
            idle_wall += nxt[0] - prev[1]
    machine, job = (b["machine"] - a["machine"]) / wall, (b["job"] - a["job"]) / wall
    return {
        "s_per_gen_window": round(wall / n, 3),
        "rank0_cpu_s_per_gen": round(rank0 / n, 3),
        "rank0_wait_cpu_s_per_gen": round(sum(m["end"]["cpu"] - m["start"]["cpu"] for m in inside) / n, 3),
        "rank0_wait_main_thread_cpu_s_per_gen": round(sum(m["end"]["main"] - m["start"]["main"] for m in inside) / n, 3),
        "worker_core_share": round(task_cpu / max(task_wall, 1e-9), 3),
        "worker_busy": round(task_wall / ((ranks - 1) * wall), 3),
        "worker_idle_cpu_share": round(idle_cpu / idle_wall, 3) if idle_wall > 0.05 else None,
        "machine_busy_cores": round(machine, 2),
        "job_cores": round(job, 2),
        "others_cores": round(machine - job, 2),
    }


def seconds_per_generation(
    template: Path, work: Path, ranks: int, sets: list[str], configs: list[str], gens: int, tag: str, extra_env: dict[str, str]
) -> dict[str, Any]:
    run = work / f"{tag}-{ranks}"
    shutil.copytree(template, run)
    out = work / f"{tag}-{ranks}.probe"
    out.mkdir()
    argv = ["train-controller", "--configs", *configs, "--run", str(run), "--set", *sets]
    cmd = [MPIRUN, "-n", str(ranks), sys.executable, __file__, "--probe", str(out), "--", *argv]
    t0 = time.time()
    env = {
        "WM_MPI_INIT_TIMEOUT": "120",
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "WM_BENCH_PID": str(os.getpid()),
        **extra_env,
    }
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    wall = time.time() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    el = [r["es/elapsed"] for r in read_jsonl(RunDir(run).metrics_path("train-controller"))]
    dts = np.diff([0.0, *el])[1:-1]
    res: dict[str, Any] = {
        "s_per_gen": round(float(np.median(dts)), 3),
        "s_per_gen_each": [round(float(d), 2) for d in dts],
        "wall_s": round(wall, 1),
        "gens_timed": len(dts),
    }
    res.update(window_stats(out, ranks, gens))
    shutil.rmtree(run)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer generations and a shorter real episode cap (< 1 min)")
    ap.add_argument("--small", action="store_true", help="the `small` preset, pop 32 × 16 trials, 5 generations")
    ap.add_argument("--dream-steps", type=int, default=1000, help="--small: dream.max_steps (every dream runs to it)")
    ap.add_argument("--real-steps", type=int, default=150, help="--small: env.max_steps of the real-env mode")
    ap.add_argument("--only", choices=("dream", "real"), help="run one fitness only")
    ap.add_argument("--repeat", type=int, default=1, help="run each configuration this many times")
    ap.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="K=V",
        help="set in every rank's environment, e.g. OPENBLAS_NUM_THREADS=1 (rank 0's CMA-ES)",
    )
    ap.add_argument("--probe", type=Path, help=argparse.SUPPRESS)
    args, rest = ap.parse_known_args()
    if args.probe is not None:
        raise SystemExit(probe(args.probe, rest[1:] if rest[:1] == ["--"] else rest))
    if args.small:
        gens, configs, hidden = 5, ["doom_takecover", "small"], 256
        common = ["es.eval_every=1000", "es.eval_episodes=16", "es.task_timeout=600", f"es.generations={gens}"]
        setups = {
            # the small preset's pop 32 × 16 trials; auto chunk: each worker's whole slice in one batched graph
            "dream": [
                "es.fitness=dream",
                "es.popsize=32",
                "es.trials=16",
                "es.chunk=0",
                f"dream.max_steps={args.dream_steps}",
                *common,
            ],
            # pop 32 × 1 real episode (≤ cap steps); auto chunk (a quarter of a worker's slice), 4 envs per worker
            "real": [
                "es.fitness=real",
                "es.popsize=32",
                "es.trials=1",
                "es.chunk=0",
                "es.real_envs_per_worker=4",
                f"env.max_steps={args.real_steps}",
                *common,
            ],
        }
    else:
        gens, configs, hidden = (3 if args.quick else 6), ["doom_takecover"], 512
        common = ["es.eval_every=1000", "es.eval_episodes=4", "es.task_timeout=600", f"es.generations={gens}"]
        setups = {
            # 4 tasks of 4 members × 4 dreams of 200 steps each per generation
            "dream": ["es.fitness=dream", "es.popsize=16", "es.trials=4", "es.chunk=4", "dream.max_steps=200", *common],
            # 8 tasks of 2 members × 1 real episode (≤ cap steps), 2 envs per worker stepped together
            "real": [
                "es.fitness=real",
                "es.popsize=16",
                "es.trials=1",
                "es.chunk=2",
                "es.real_envs_per_worker=2",
                f"env.max_steps={40 if args.quick else 150}",
                *common,
            ],
        }
    if args.only:
        setups = {args.only: setups[args.only]}
    extra_env = dict(kv.split("=", 1) for kv in args.env)
    out: dict[str, object] = {"machine_cores": os.cpu_count(), "generations": gens, "configs": configs, "env": extra_env}
    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp) / "template"
        make_upstream(template, hidden)
        for name, sets in setups.items():
            runs = []
            for i in range(args.repeat):
                one = seconds_per_generation(template, Path(tmp), 2, sets, configs, gens, f"{name}{i}", extra_env)
                two = seconds_per_generation(template, Path(tmp), 3, sets, configs, gens, f"{name}{i}", extra_env)
                runs.append({"1_worker": one, "2_workers": two, "speedup": round(one["s_per_gen"] / two["s_per_gen"], 2)})
            out[name] = (
                {"runs": runs, "settings": sets[: -len(common)]}
                if args.repeat > 1
                else {**runs[0], "settings": sets[: -len(common)]}
            )
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
