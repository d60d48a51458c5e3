"""Picklable task functions for the controller's CMA-ES, and the worker-side evaluator cache.

A worker (an MPI rank, or the master itself in serial runs) is initialised once with a `FitnessSpec`
(`init_worker`, the pool's initializer: this is where V and M are loaded, mpi4py.futures style) and then
evaluates tasks `(members, params (k, n), seeds (k, K))` → `(members, returns (k, K), lengths (k, K))`
(`evaluate_task`). The evaluator is `evaluate(params, seeds) -> (returns, lengths)` for every kind:

- `dream`: `wm.dream.load_dream(cfg, run)`, the whole chunk as one batch in one TF graph (§5, §7);
- `real`: `wm.rollout.RealEvaluator`, V + M + C in `es.real_envs_per_worker` real envs stepped together;
- `toy`: a quadratic with seed noise and fault-injection hooks, so the ES/MPI machinery is tested without
  trained models. Faults: files in the directory named by `$WM_TOY_FAULTS`: `raise-<member>` makes the task
  holding that member raise once; `hang-<member>` (text: seconds) makes it sleep that long once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

# Worker-side cache {spec key: evaluator}: V/M are loaded once per process, not once per task.
_CACHE: dict[str, Any] = {}


@dataclass(frozen=True)
class FitnessSpec:
    """What a worker needs to build its evaluator: the fitness kind, the resolved config and the run dir."""

    kind: str  # dream | real | toy
    cfg: dict
    run: str
    n_params: int

    @property
    def key(self) -> str:
        import json

        return json.dumps([self.kind, self.cfg, self.run, self.n_params], sort_keys=True)


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


def make_evaluator(spec: FitnessSpec) -> Any:
    """Build the evaluator of `spec` in this process (loads V/M for dream and real)."""
    from wm.config import Config
    from wm.rundir import RunDir

    cfg = Config(spec.cfg)
    if spec.kind == "toy":
        return ToyEvaluator(spec.n_params, int(cfg.es.seed))
    if spec.kind == "dream":
        from wm.dream import load_dream

        return load_dream(cfg, RunDir(spec.run))
    if spec.kind == "real":
        from wm.rollout import RealEvaluator

        return RealEvaluator.from_run(cfg, RunDir(spec.run), n_envs=int(cfg.es.real_envs_per_worker))
    raise ValueError(f"unknown fitness kind {spec.kind!r} (dream | real | toy)")


def init_worker(spec: FitnessSpec) -> Callable[[], None]:
    """Pool initializer: one thread, no GPU, build and cache the evaluator; returns the cleanup (close envs)."""
    if spec.kind != "toy":
        for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ.setdefault(k, "1")
        from wm import tf_setup

        tf_setup.setup(threads=1, gpu=False)
    if spec.key not in _CACHE:
        close_worker()
        _CACHE[spec.key] = make_evaluator(spec)
    return close_worker


def close_worker() -> None:
    """Close every cached evaluator (real envs: ViZDoom's child processes go with them)."""
    while _CACHE:
        _, ev = _CACHE.popitem()
        close = getattr(ev, "close", None)
        if callable(close):
            close()


def _evaluator() -> Any:
    if not _CACHE:
        raise RuntimeError("worker not initialised (init_worker was not run)")
    return next(iter(_CACHE.values()))


def _toy_faults(members: np.ndarray) -> None:
    folder = os.environ.get("WM_TOY_FAULTS")
    if not folder:
        return
    from mpi import should_stop

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


def evaluate_task(task: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Evaluate one chunk `(members, params (k, n), seeds (k, K))` → `(members, returns (k, K), lengths (k, K))`."""
    members, params, seeds = task
    ev = _evaluator()
    if isinstance(ev, ToyEvaluator):
        _toy_faults(members)
    returns, lengths = ev.evaluate(np.asarray(params, np.float64), np.asarray(seeds, np.int64))
    return members, np.asarray(returns, np.float64), np.asarray(lengths, np.int64)


def make_tasks(params: np.ndarray, seeds: np.ndarray, chunk: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Split a population (P, n) with seeds (P, K) into tasks of `chunk` members (the last may be smaller)."""
    P = len(params)
    return [(np.arange(i, min(i + chunk, P)), params[i:i + chunk], seeds[i:i + chunk]) for i in range(0, P, chunk)]


def gather(results: list[Any], P: int, K: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Reassemble task results into returns (P, K) and lengths (P, K); failed tasks' members are NaN / 0.

    Returns also the number of members lost (their tasks were given up after the retries, `mpi.pool`).
    """
    from mpi import TaskFailed

    returns, lengths, lost = np.full((P, K), np.nan), np.zeros((P, K), np.int64), 0
    for res in results:
        if isinstance(res, TaskFailed):
            continue
        members, r, ln = res
        returns[members], lengths[members] = r, ln
    lost = int(np.isnan(returns).any(axis=1).sum())
    return returns, lengths, lost
