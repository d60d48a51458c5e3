"""The evaluation engine: "controller parameters × seeds → returns and lengths", for every kind and every pool.

`evaluate` (the stage, the τ sweep) and `train-controller` (CMA-ES fitness) both go through here:

    spec = EvalSpec.of("dream", cfg, str(run.path))
    with make_pool(init_worker, (spec,), ...) as pool:            # SerialPool, ProcessPool or MPIPool (mpi.pool)
        returns, lengths, lost = run_tasks(pool, params, seeds, chunk)

Kinds (`EvalSpec.kind`), each an evaluator `evaluate(params (P, n), seeds (P, K)) -> (returns, lengths)`:

- `real`: `wm.rollouts.rollout.RealEvaluator`, V + M + C in several real envs stepped together, V/M batched;
- `dream`: `wm.rollouts.dream.load_dream`, the whole chunk as one batch in one compiled TF graph (§5, §7);
- `random`: uniform random controller-space actions in the real env (the paper's baseline, §9), params ignored;
- `random-dream`: the same random policy inside M's dream;
- `toy`: a noisy quadratic with fault-injection hooks, so ES/MPI machinery is tested without trained models
  (files in `$WM_TOY_FAULTS`: `raise-<member>` makes the task holding that member raise once; `hang-<member>`
  (text: seconds) makes it sleep that long once).

A pool's initializer (`init_worker`) builds one `WorkerContext` per worker process: TensorFlow set up (one thread,
no GPU on CPU workers; all threads and the GPU where allowed in train-controller's one-process batched dream pool)
and the evaluator built once (V/M loaded once, envs opened once). The pool hands that context to every task
(`evaluate_task(ctx, task)`) and closes it when the worker stops; nothing is cached in module globals.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from wm.core.errors import WMError
from wm.rollouts.episodes import dream_episode, random_episode

if TYPE_CHECKING:  # annotations only
    from wm.core.config import Config
    from wm.envs.setup import Setup

KINDS = ("real", "dream", "random", "random-dream", "toy")
# (members (k,), params (k, n), seeds (k, K)), optionally + the evaluator's keyword arguments (a training-time
# episode budget of real fitness, wm.es.budget)
Task = tuple[np.ndarray, np.ndarray, np.ndarray] | tuple[np.ndarray, np.ndarray, np.ndarray, dict]


@dataclass(frozen=True)
class EvalSpec:
    """What a worker needs to build its evaluator, resolved once on the master (`EvalSpec.of`): the kind, the setup
    (`wm.envs.setup`; it pickles as its config and is resolved again once in the worker), the run directory and the
    few values of the `es` and `evaluate` sections the engine reads. The worker side reads no config.
    """

    kind: str
    facts: Setup
    run: str
    real_envs: int = 4  # es.real_envs_per_worker: real envs stepped together by one worker
    seed: int = 0  # es.seed: the toy's target
    gif_stride: int = 1  # evaluate.gif_stride: frames kept in a recorded GIF
    task_timeout: float = 0.0  # es.task_timeout: a task slower than this goes to another MPI rank too
    threads: int | None = 1  # TF threads in the worker: 1 where processes or ranks are the parallelism
    gpu: bool = False  # the GPU visible in the worker: only the one-process batched dream pool (es.device)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise WMError(f"unknown evaluation kind {self.kind!r} (expected one of {KINDS})")

    @classmethod
    def of(
        cls, kind: str, cfg: Config, run: str, temperature: float | None = None, facts: Setup | None = None, **kw: Any
    ) -> EvalSpec:
        """The spec of `kind` for the run at `run`: `cfg` gives the `es` and `evaluate` values (a whole config, or a
        stage's blocks), `facts` the setup it plays under (a stage's, resolved once; by default `setup(cfg)`);
        `temperature` overrides `dream.temperature` for the dream kinds (the τ sweep, `evaluate --temperature`)."""
        from wm.envs.setup import setup

        facts = setup(cfg) if facts is None else facts
        if temperature is not None:
            facts = facts.at_temperature(temperature)
        es = cfg.es
        return cls(
            kind,
            facts,
            run,
            real_envs=es.real_envs_per_worker,
            seed=es.seed,
            gif_stride=cfg.evaluate.gif_stride,
            task_timeout=es.task_timeout,
            **kw,
        )


def kind_of(dream: bool, random: bool) -> str:
    """The evaluation kind of the evaluate stage's `--dream` / `--random` flags."""
    return ("random" if random else "") + ("-dream" if dream and random else "dream" if dream else "") or "real"


# ---------------------------------------------------------------- evaluators


class ToyEvaluator:
    """A noisy quadratic: return = 100 − 100·mean((θ − θ*)²) + 0.1·N(0, 1) seeded; length = 10 + seed mod 50.

    Deterministic given (params, seed), like the real evaluators, so resume equivalence can be tested.
    """

    def __init__(self, n: int, seed: int = 0):
        self.target = np.random.default_rng([seed, 99]).uniform(-0.5, 0.5, n)

    def evaluate(self, params: np.ndarray, seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        params, seeds = np.asarray(params, np.float64), np.asarray(seeds, np.int64)
        base = 100.0 - 100.0 * np.mean((params - self.target) ** 2, axis=1)
        noise = 0.1 * np.array([[np.random.default_rng(int(s)).normal() for s in row] for row in seeds])
        return base[:, None] + noise, (10 + seeds % 50).astype(np.int64)

    def close(self) -> None:
        pass


class EpisodeEvaluator:
    """The evaluator interface over a per-episode function `episode(seed) -> (return, length)` (the random kinds);
    `figures()`, when given, is read after each episode (the real env's `episode_figures`)."""

    def __init__(self, episode: Any, close: Any = None, figures: Any = None):
        self.episode, self._close, self._figures = episode, close, figures
        self.figures: list[list[dict[str, float]]] = []

    def evaluate(self, params: np.ndarray, seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        seeds = np.atleast_2d(np.asarray(seeds, np.int64))
        out, self.figures = [], []
        for row in seeds:
            out.append([])
            self.figures.append([])
            for s in row:
                out[-1].append(self.episode(int(s)))
                self.figures[-1].append(self._figures() if self._figures is not None else {})
        return np.array([[r for r, _ in row] for row in out], float), np.array([[n for _, n in row] for row in out], np.int64)

    def close(self) -> None:
        if self._close is not None:
            self._close()


def make_evaluator(spec: EvalSpec) -> Any:
    """Build the evaluator of `spec` in this process (loads V/M, opens envs)."""
    from wm.core.rundir import RunDir

    facts, run = spec.facts, RunDir(spec.run)
    if spec.kind == "toy":
        return ToyEvaluator(facts.n_params, spec.seed)
    if spec.kind == "dream":
        from wm.rollouts.dream import load_dream

        return load_dream(facts, run)
    if spec.kind == "real":
        from wm.rollouts.rollout import RealEvaluator

        return RealEvaluator.from_run(facts, run, n_envs=spec.real_envs)
    if spec.kind == "random":
        env, cap = facts.open(), facts.env.max_steps
        return EpisodeEvaluator(lambda s: random_episode(env, s, cap)[:2], env.close, env.episode_figures)
    from wm.rollouts.dream import dream_env  # random-dream

    denv, cap = dream_env(facts, run), facts.dream.max_steps
    return EpisodeEvaluator(lambda s: dream_episode(denv, s, cap, random=True)[:2])


# ---------------------------------------------------------------- the worker side


class WorkerContext:
    """Everything one worker process holds: the evaluator of one spec, built once. The pool passes it to tasks."""

    def __init__(self, spec: EvalSpec):
        if spec.kind != "toy":
            for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
                os.environ.setdefault(k, "1")
            from wm.core import tf_setup

            if spec.kind == "random":  # no model: the decision only (TF, never imported, costs no start-up)
                tf_setup.decide(threads=spec.threads, gpu=spec.gpu)
            else:
                tf_setup.setup(threads=spec.threads, gpu=spec.gpu)
        self.spec = spec
        self.evaluator = make_evaluator(spec)

    def close(self) -> None:
        """Close the evaluator (real envs: ViZDoom's child processes go with them)."""
        ev, self.evaluator = self.evaluator, None
        close = getattr(ev, "close", None)
        if callable(close):
            close()


def init_worker(spec: EvalSpec) -> WorkerContext:
    """Pool initializer: the spec's threads and GPU (one thread, no GPU on pool workers), the evaluator built once."""
    return WorkerContext(spec)


def _toy_faults(members: np.ndarray) -> None:
    folder = os.environ.get("WM_TOY_FAULTS")
    if not folder:
        return
    from wm.mpi import should_stop

    for m in members:
        for kind in ("raise", "hang"):
            path = os.path.join(folder, f"{kind}-{int(m)}")
            try:
                text = open(path).read().strip()
                os.unlink(path)  # whoever unlinks first triggers the fault; it happens once
            except FileNotFoundError:
                continue
            if kind == "raise":
                raise RuntimeError(f"injected fault for member {int(m)}")
            end = time.monotonic() + float(text or 5.0)
            while time.monotonic() < end:
                if should_stop():
                    raise KeyboardInterrupt
                time.sleep(0.05)


def evaluate_task(ctx: WorkerContext, task: Task) -> Task:
    """Evaluate one chunk `(members, params (k, n), seeds (k, K))` → `(members, returns (k, K), lengths (k, K))`, plus
    each episode's figures beside its return ((k, K) nested lists of dicts) when the evaluator measures them (the real
    env's `FrameEnv.episode_figures`: CarRacing's tiles, lap, speed, gas and brake)."""
    members, params, seeds, *rest = task
    if ctx.spec.kind == "toy":
        _toy_faults(members)
    kw = rest[0] if rest else {}
    returns, lengths = ctx.evaluator.evaluate(np.asarray(params, np.float64), np.asarray(seeds, np.int64), **kw)
    out = (members, np.asarray(returns, np.float64), np.asarray(lengths, np.int64))
    figures = getattr(ctx.evaluator, "figures", None)
    return (*out, figures) if figures and any(any(row) for row in figures) else out


@dataclass(frozen=True)
class GifTask:
    """One episode of the evaluation to record as a GIF at `path` (`play_or_record`)."""

    params: np.ndarray | None
    seed: int
    path: str


def play_or_record(ctx: WorkerContext, task: Task | GifTask) -> Task | tuple[str, int]:
    """An evaluation's task on a worker: a chunk of episodes (`evaluate_task`), or a `GifTask` → `(path, steps)`.

    The evaluate stage's GIFs are recorded where the episodes were played, in the same map (a process pool's workers
    live for one map): a worker rank or process already runs TF with the spec's world, so rank 0 (or the parent of
    the worker processes) never loads them (≈ 3–4 s of CPU each). The worker writes the file (atomically): a long
    episode's frames are too large to send back."""
    if not isinstance(task, GifTask):
        return evaluate_task(ctx, task)
    from wm.core.rundir import RunDir
    from wm.rollouts.recording import write_episode_gif

    spec = ctx.spec
    steps = write_episode_gif(
        spec.facts, RunDir(spec.run), spec.kind, task.params, int(task.seed), Path(task.path), spec.gif_stride
    )
    return task.path, steps


# ---------------------------------------------------------------- the master side


def make_tasks(params: np.ndarray, seeds: np.ndarray, chunk: int, budget: dict | None = None) -> list[Task]:
    """Split a population (P, n) with seeds (P, K) into tasks of `chunk` members (the last may be smaller).

    `budget`: keyword arguments for the evaluator (real fitness: `max_steps`, `no_progress`; wm.es.budget)."""
    P = len(params)
    tasks = [(np.arange(i, min(i + chunk, P)), params[i : i + chunk], seeds[i : i + chunk]) for i in range(0, P, chunk)]
    return [(*t, dict(budget)) for t in tasks] if budget else tasks


def seed_tasks(params: np.ndarray, seeds: list[int], workers: int) -> list[Task]:
    """One parameter vector over a list of seeds, as tasks of about a quarter of a worker's share: the progress line
    moves and uneven episode lengths stay balanced. Each task is one "member" (row) holding a run of seeds."""
    size = max(1, -(-len(seeds) // (max(1, workers) * 4)))
    chunks = [seeds[i : i + size] for i in range(0, len(seeds), size)]
    return [
        (np.array([j]), np.asarray(params, np.float64).reshape(1, -1), np.asarray(c, np.int64)[None])
        for j, c in enumerate(chunks)
    ]


def gather(results: list[Any], P: int, K: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Reassemble task results into returns (P, K) and lengths (P, K); failed tasks' members are NaN / 0.

    Returns also the number of members lost (their tasks were given up after the retries, `mpi.pool`).
    """
    from wm.mpi import TaskFailed

    returns, lengths = np.full((P, K), np.nan), np.zeros((P, K), np.int64)
    for res in results:
        if isinstance(res, TaskFailed):
            continue
        members, r, ln = res[:3]
        returns[members], lengths[members] = r, ln
    return returns, lengths, int(np.isnan(returns).any(axis=1).sum())


def run_seeds(
    pool: Any,
    params: np.ndarray | None,
    seeds: list[int],
    n_params: int,
    progress: Any = None,
    gifs: Sequence[tuple[int, Path]] = (),
    log: Any = None,
) -> tuple[np.ndarray, np.ndarray, list[dict[str, float]]]:
    """Returns, lengths and figures (`evaluate_task`; {} for an env that measures none) in seed order of one episode
    per seed for one parameter vector, on `pool`; the episodes of `gifs` (seed, path) are recorded as GIFs by the
    pool's workers in the same map (`play_or_record`), each logged.

    `progress(returns of a finished task)` is called as tasks finish. A task given up by the pool is an error here:
    an evaluation never summarises missing episodes.
    """
    from wm.mpi import TaskFailed

    p = np.zeros(n_params) if params is None else np.asarray(params, np.float64)
    tasks = seed_tasks(p, seeds, getattr(pool, "size", 1))
    n = len(tasks)
    jobs = [*tasks, *(GifTask(params, int(s), str(path)) for s, path in gifs)]  # the GIFs last, in the same map

    def on_result(i: int, res: Any) -> None:
        if progress is not None and i < n and not isinstance(res, TaskFailed):
            progress(list(res[1][0]))

    results = pool.map(play_or_record, jobs, on_result=on_result)
    played, recorded = results[:n], results[n:]
    failed = [r for r in played if isinstance(r, TaskFailed)]
    if failed:
        raise WMError(f"evaluation: {len(failed)} of {n} tasks failed (first: {failed[0].error})")
    for res in recorded:
        if isinstance(res, TaskFailed):
            raise WMError(f"evaluation: recording a GIF failed ({res.error})")
        if log is not None:
            log.info("wrote %s (%d steps)", *res)
    returns = np.concatenate([r[1][0] for r in played]).astype(float)
    lengths = np.concatenate([r[2][0] for r in played]).astype(int)
    figures = [f for r in played for f in (r[3][0] if len(r) > 3 else [{}] * len(r[1][0]))]
    return returns, lengths, figures


def evaluate_seeds(
    spec: EvalSpec,
    params: np.ndarray | None,
    seeds: list[int],
    n_params: int,
    workers: int = 1,
    progress: Any = None,
    log: Any = None,
    pool: Any = None,
    gifs: Sequence[tuple[int, Path]] = (),
) -> tuple[np.ndarray, np.ndarray, list[dict[str, float]]]:
    """One parameter vector on a list of seeds (the evaluate stage, the τ sweep): over the MPI ranks when launched
    under mpirun/srun (rank 0 dispatches; real-env kinds only: the dream batches every episode in one graph on rank
    0, whose CLI then releases the ranks), in this process (`workers <= 1`, all TF threads), or over `workers` spawned
    processes. Every episode depends only on its seed, so each way gives the same returns.

    `pool`: an open pool of the caller's (`job_pool`: one MPI pool for a job's several evaluations, as the τ sweep's
    rows), given this spec's context (`reinit`) and left open. `gifs`: episodes (seed, path) the same workers then
    record as GIFs (`run_seeds`)."""
    from dataclasses import replace

    from wm.core.procpool import ProcessPool
    from wm.mpi import launched_size, make_pool
    from wm.mpi.pool import PROCESS, SerialPool

    if pool is not None:
        pool.reinit(init_worker, (spec,))
        return run_seeds(pool, params, seeds, n_params, progress, gifs, log)
    workers = max(1, min(int(workers), len(seeds)))
    # one MPI pool per job: its close stops the ranks, so a later call (the τ sweep's next τ) uses local processes
    if launched_size() > 1 and spec.kind not in ("dream", "random-dream") and not PROCESS.workers_released:
        with make_pool(init_worker, (spec,), timeout=spec.task_timeout, retries=0, log=log) as pool:
            return run_seeds(pool, params, seeds, n_params, progress, gifs, log)
    if workers == 1:
        pool: Any = SerialPool(init_worker, (replace(spec, threads=None),), retries=0, log=log)
    else:
        pool = ProcessPool(init_worker, (spec,), workers=workers, retries=0, log=log)
    with pool:
        return run_seeds(pool, params, seeds, n_params, progress, gifs, log)


@contextlib.contextmanager
def job_pool(timeout: float, log: Any = None) -> Iterator[Any]:
    """Under mpirun/srun, rank 0's MPI pool for several real-env evaluations of one job (`evaluate_seeds(pool=…)`
    gives it each one's spec; `timeout`: `es.task_timeout`): closing a pool stops the worker ranks, so without it only
    a job's first evaluation runs over them. None (each evaluation picks its own pool) when not launched with ranks."""
    from wm.mpi import launched_size, make_pool
    from wm.mpi.pool import PROCESS

    if launched_size() <= 1 or PROCESS.workers_released:
        yield None
        return
    with make_pool(None, (), timeout=float(timeout), retries=0, log=log) as pool:
        yield pool
