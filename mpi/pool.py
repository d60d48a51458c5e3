"""The pool interface, the serial pool, the stop flag (no mpi4py here: see `mpi.pool_mpi`).

Fault policy, shared by both pools (peers.md §4 D: the authors' workers died silently and hung the job):
a task that raises is retried up to `retries` times (on any rank); after that it is given up and its slot in the
result list holds a `TaskFailed` carrying the rank and error, which is also logged. The controller stage then
ranks the task's members with the worst fitness of the generation (`CMAES.tell` treats NaN so), so a generation
always completes. A task running longer than `timeout` (MPI only) is re-dispatched to another rank; whichever
copy finishes first wins and the late one is discarded.
"""

from __future__ import annotations

import signal
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


def _never() -> bool:
    return False


class ProcessState:
    """What is process-wide by nature in a pool's life, in one object: `PROCESS`, the only instance.

    - `stop_check`: what `should_stop()` asks. Task code deep in a rollout polls it between env steps without
      being handed anything; the worker loop (`mpi.pool_mpi.serve`) and `StopFlag` install their check here and
      `StopFlag` puts the previous one back on exit.
    - `workers_released`: rank 0 has sent STOP to every worker rank (`MPIPool.close` or `release_workers`), so
      every later exit path leaves them alone (STOP is sent once per job).
    """

    def __init__(self) -> None:
        self.stop_check: Callable[[], bool] = _never
        self.workers_released = False


PROCESS = ProcessState()


def should_stop() -> bool:
    """True once this rank has been asked to stop (a signal, or the master's STOP message on a worker).

    Long-running task functions (real-env rollouts) poll this between steps and raise `KeyboardInterrupt`.
    """
    return PROCESS.stop_check()


def set_stop_check(fn: Callable[[], bool]) -> None:
    """Install the check that `should_stop()` consults (the worker loop and `StopFlag` do this)."""
    PROCESS.stop_check = fn


@dataclass
class TaskFailed:
    """The result slot of a task given up after its retries: where and why it failed."""

    index: int
    rank: int
    error: str
    attempts: int


class StopFlag:
    """SIGINT/SIGTERM → a flag that pools and rollouts poll; a second signal raises KeyboardInterrupt at once.

    Use as a context manager around the training loop; the previous handlers come back on exit. Only the main
    thread can install handlers; elsewhere the flag is inert (tests that drive the stage in a thread).
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._old: dict[int, Any] = {}
        self.signum: int | None = None

    def is_set(self) -> bool:
        return self._event.is_set()

    def set(self, signum: int = signal.SIGTERM) -> None:
        self.signum = signum
        self._event.set()

    def _handler(self, signum: int, frame: Any) -> None:
        if self._event.is_set():
            raise KeyboardInterrupt
        self.set(signum)

    def __enter__(self) -> StopFlag:
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                self._old[s] = signal.signal(s, self._handler)
        self._prev_check = PROCESS.stop_check
        set_stop_check(self.is_set)
        return self

    def __exit__(self, *exc: Any) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old.clear()
        set_stop_check(self._prev_check)


class Pool:
    """Maps a picklable module-level function over payloads on the workers, in order, with retries.

    The initializer runs once per worker and returns that worker's context (the loaded models, the open envs:
    `wm.rollouts.engine.WorkerContext`); every task is called `fn(ctx, payload)`, and `ctx.close()`, if it has one, runs when
    the worker stops. Implementations: `SerialPool` (this process), `MPIPool` (ranks), `wm.core.procpool.ProcessPool`.
    """

    size = 1  # number of evaluating processes

    def map(
        self, fn: Callable[[Any, Any], Any], payloads: Sequence[Any], on_result: Callable[[int, Any], Any] | None = None
    ) -> list[Any]:
        """`[fn(ctx, p) for p in payloads]` on the workers; a task given up is a `TaskFailed` in its slot.

        `on_result(index, result)` is called as each task finishes (for progress lines). Raises KeyboardInterrupt
        (after no further tasks are started) when the StopFlag is set.
        """
        raise NotImplementedError

    def close(self) -> None:
        """Stop the workers (they close their envs) and wait for them."""

    def reinit(self, initializer: Callable[..., Any] | None, initargs: tuple = ()) -> None:
        """Close every worker's context and build a new one with `initializer(*initargs)` (the same workers)."""
        raise NotImplementedError

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def close_context(ctx: Any) -> None:
    """Close a worker's context (its `close()`, when it has one): envs and their game processes go with it."""
    close = getattr(ctx, "close", None)
    if callable(close):
        close()


def format_error(e: BaseException) -> str:
    """`Type: message (file:line)` of the innermost frame: one log line that says where."""
    tb = traceback.extract_tb(e.__traceback__)
    where = f" ({tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
    return f"{type(e).__name__}: {e}{where}"


class SerialPool(Pool):
    """The same interface in this process: `mpirun`-free runs, laptops and tests (timeouts are not enforced)."""

    def __init__(
        self,
        initializer: Callable[..., Any] | None = None,
        initargs: tuple = (),
        *,
        retries: int = 2,
        log: Any = None,
        stop: StopFlag | None = None,
    ):
        self.retries, self.log, self.stop = int(retries), log, stop
        self._ctx = initializer(*initargs) if initializer is not None else None

    def close(self) -> None:
        close_context(self._ctx)
        self._ctx = None

    def reinit(self, initializer: Callable[..., Any] | None, initargs: tuple = ()) -> None:
        self.close()
        self._ctx = initializer(*initargs) if initializer is not None else None

    def map(
        self, fn: Callable[[Any, Any], Any], payloads: Sequence[Any], on_result: Callable[[int, Any], Any] | None = None
    ) -> list[Any]:
        """`[fn(ctx, p) for p in payloads]` here, with the retries of the MPI pool."""
        out: list[Any] = []
        for i, p in enumerate(payloads):
            for attempt in range(1, self.retries + 2):
                if self.stop is not None and self.stop.is_set():
                    raise KeyboardInterrupt
                try:
                    out.append(fn(self._ctx, p))
                    break
                except KeyboardInterrupt:
                    raise
                except Exception as e:  # noqa: BLE001 — any task error is retried, then reported
                    err = format_error(e)
                    if attempt <= self.retries:
                        _warn(
                            self.log,
                            "task %d raised on rank 0 (attempt %d/%d): %s; retrying",
                            i,
                            attempt,
                            self.retries + 1,
                            err,
                        )
                        continue
                    _error(
                        self.log,
                        "task %d failed on rank 0 after %d attempts: %s; its members get the worst fitness",
                        i,
                        attempt,
                        err,
                    )
                    out.append(TaskFailed(i, 0, err, attempt))
            if on_result is not None:
                on_result(i, out[-1])
        return out


def _warn(log: Any, msg: str, *args: Any) -> None:
    if log is not None:
        log.warning(msg, *args)


def _error(log: Any, msg: str, *args: Any) -> None:
    if log is not None:
        log.error(msg, *args)


class Backoff:
    """The sleep between two polls of a rank waiting for a message: a tenth of the time waited so far, clamped to
    [`least`, `most`] seconds; `reset()` when a message came (or work was sent) starts the wait afresh.

    Why sleep at all: MPICH's blocking calls (Recv, Probe, Wait) spin the progress engine at 100 % of a core, and
    on a machine with a core per rank that core is a worker's. Why not a fixed 1 ms: each poll costs ~70 µs of
    CPU (Python + `Iprobe`), so 1 kHz polling took ~7 % of a core on rank 0 and on every idle worker for the
    whole run (bench/train_controller.py --small). This way a message waits at most ~10 % of the time already
    waited (or `least`) longer than it would with a busy wait, and a long wait polls `1/most` times a second.
    """

    def __init__(self, least: float = 0.001, most: float = 0.02, share: float = 0.1):
        self.least, self.most, self.share = float(least), float(most), float(share)
        self.reset()

    def reset(self) -> None:
        self.since = time.monotonic()

    def sleep(self) -> None:
        time.sleep(min(self.most, max(self.least, self.share * (time.monotonic() - self.since))))
