"""`spawn_map`: run a function over items in spawned worker processes, and never hang when a worker dies.

`multiprocessing.Pool` silently replaces a worker that dies (a segfault in the env, an OOM kill) and waits forever
for the task it held; a failing initializer makes it respawn workers in a loop. `concurrent.futures` reports both
as `BrokenProcessPool`, which this turns into one `WMError` line. Workers ignore Ctrl-C (the parent handles it).
With an initializer, each worker holds the context it returns (an env, a writer, an evaluator) and tasks are
called `fn(ctx, item)`; the context's `close()` (close ViZDoom, flush a writer) runs when the worker exits normally,
when the parent stops it early with SIGTERM, and when the parent dies; without it the ViZDoom game process (which
ignores SIGTERM) would outlive the worker. A worker that has not exited `STOP_GRACE_S` after SIGTERM is killed with
its child processes.

`ProcessPool` is the same thing behind the pool interface of `mpi.pool` (ordered `map`, retries, `on_result`),
the process twin of `SerialPool` and `MPIPool` for the evaluation engine (`wm.rollouts.engine`).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.util import Finalize
from typing import Any

from wm.core.errors import RunFailed, WMError

STOP_GRACE_S = 10.0  # after SIGTERM, how long a worker may take to run its cleanups before it is killed


def cores() -> int:
    """The cores this process may run on: its CPU affinity (what a Slurm job's cgroup or `taskset` gives it), not
    the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS has no affinity call
        return max(1, os.cpu_count() or 1)


def worker_count(setting: int) -> int:
    """`collect.workers` / `evaluate.workers`: the number given, or with 0 every core (`cores`)."""
    return int(setting) if int(setting) > 0 else cores()


class _Slot:
    """A worker process's own context: set by the initializer, handed to every task, closed once at exit.

    The one piece of per-process state: `ProcessPoolExecutor` gives an initializer nowhere else to put what it
    builds. It lives only in the spawned workers, never in the parent.
    """

    ctx: Any = None
    active = False
    refused: WMError | None = None  # the initializer's refusal, raised by every task
    errors: Any = None  # the parent's queue for an error of `close()` (one line each), which the parent reports

    @classmethod
    def close(cls) -> None:
        ctx, cls.ctx, cls.active = cls.ctx, None, False
        close = getattr(ctx, "close", None)
        if callable(close):
            try:
                close()
            except Exception as e:  # noqa: BLE001 — reported by the parent, and the worker exits anyway
                if cls.errors is None:
                    traceback.print_exc()
                else:
                    cls.errors.put(_one_line(e))


def _one_line(e: BaseException) -> str:
    """A worker's error as the parent prints it: a WMError's own message (it names the file and what to do), else
    the exception's type and message."""
    from wm.core.errors import WMError

    return str(e) if isinstance(e, WMError) else f"{type(e).__name__}: {e}"


def _cleanup() -> None:
    _Slot.close()


def _sigterm(signum, frame) -> None:
    _cleanup()
    os._exit(0)  # not SystemExit: the executor's worker loop would catch it as the running task's exception


def _exit_with_parent(parent: Any) -> None:
    parent.join()  # returns when the parent process is gone, however it died (SIGTERM, SIGKILL, OOM)
    os.kill(os.getpid(), signal.SIGTERM)


def _init(initializer: Callable[..., Any] | None, initargs: tuple, errors: Any = None) -> None:
    _Slot.errors = errors
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _sigterm)
    # An orphaned worker would wait for work forever, holding its env: it stops itself when the parent dies.
    threading.Thread(target=_exit_with_parent, args=(mp.parent_process(),), daemon=True).start()
    Finalize(None, _cleanup, exitpriority=10)  # a normal exit (the executor's shutdown) runs the cleanups too
    if initializer is not None:
        try:
            _Slot.ctx, _Slot.active = initializer(*initargs), True
        except WMError as e:
            # a refusal in a worker's set-up (an env that cannot be built): kept for its first task, which raises it
            # back to the parent as the one line it is, instead of the executor's traceback and a broken pool
            _Slot.refused, _Slot.active = e, True


def _call(fn: Callable[..., Any], item: Any) -> Any:
    if _Slot.refused is not None:
        raise _Slot.refused
    return fn(_Slot.ctx, item) if _Slot.active else fn(item)


def _children(pid: int) -> list[int]:
    """The pids of `pid`'s child processes, from /proc (Linux); [] where there is none to read."""
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # after "pid (comm) ": state, ppid, …
        if len(fields) > 1 and int(fields[1]) == pid:
            out.append(int(name))
    return out


def _kill_with_children(p: Any) -> None:
    """SIGKILL a worker and its child processes. A worker killed while it starts its env (its SIGTERM handler waits
    for the C call it is in: ViZDoom's init, under load) never closes it; the game process it started ignores SIGTERM,
    outlived it and, holding the stage's stdout, kept a caller that reads it waiting forever."""
    kids = _children(p.pid)
    p.kill()
    p.join()
    for kid in kids:
        try:
            os.kill(kid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _stop(ex: ProcessPoolExecutor) -> None:
    """Cancel what has not started, SIGTERM the workers, kill the ones that do not exit (and their children)."""
    # No public way to stop running workers before Python 3.14 (`terminate_workers`); `_processes` is the
    # executor's {pid: Process} map, present since 3.2.
    procs = list((getattr(ex, "_processes", None) or {}).values())
    ex.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(STOP_GRACE_S)
        if p.is_alive():
            _kill_with_children(p)
    ex.shutdown(wait=True)


def spawn_map(
    fn: Callable[[Any], Any],
    items: Iterable[Any],
    workers: int,
    what: str,
    initializer: Callable[..., Any] | None = None,
    initargs: tuple = (),
    strict_close: bool = False,
) -> Iterator[Any]:
    """Yield `fn(item)` (`fn(ctx, item)` with an initializer returning ctx) for every item, in completion order, from
    `workers` spawned processes.

    An exception in `fn` is re-raised here; a worker that dies or an initializer that fails raises `WMError` naming
    `what`. On any exception (Ctrl-C included), or when the caller stops iterating, pending items are cancelled and
    the workers stopped before this returns. An error of a context's `close()` at the workers' normal exit comes
    back to this process: with `strict_close` (a close that finishes the work, e.g. collect's last episode write)
    it is raised as one `RunFailed` line once every item is in, else each is printed as one line.
    """
    ctx = mp.get_context("spawn")  # not fork: the parent may hold TensorFlow or a ViZDoom game
    errors = ctx.SimpleQueue()  # synchronous: a worker's put at exit is in the pipe before the worker is joined
    ex = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init, initargs=(initializer, initargs, errors))
    finished = False
    try:
        for fut in as_completed([ex.submit(_call, fn, item) for item in items]):
            yield fut.result()
        finished = True
    except BrokenProcessPool as e:
        raise RunFailed(f"{what}: a worker process died ({e}); what is on disk is kept, rerun to resume") from None
    finally:
        if finished:
            ex.shutdown(wait=True)  # joins the workers: their close() has run
        else:
            _stop(ex)
    _close_errors(errors, what, strict_close)


def _close_errors(errors: Any, what: str, strict: bool) -> None:
    """The workers' `close()` errors (`_Slot.close`): raised as one line (`strict`) or printed one line each."""
    import sys

    lines = []
    while not errors.empty():
        lines.append(errors.get())
    errors.close()
    if lines and strict:
        more = f" (and {len(lines) - 1} more worker errors like it)" if len(lines) > 1 else ""
        raise RunFailed(f"{what}: {lines[0]}{more}")
    for line in lines:
        print(f"{what} worker: {line}", file=sys.stderr, flush=True)


def _indexed(fn: Callable[..., Any], ctx: Any, job: tuple[int, Any]) -> tuple[int, Any, str | None]:
    """(index, result, None) or (index, None, error line): a task's exception is reported, not raised, so the pool
    can retry it."""
    from wm.mpi.pool import format_error

    try:
        return job[0], fn(ctx, job[1]), None
    except Exception as e:  # noqa: BLE001 — retried, then given up by the pool
        return job[0], None, format_error(e)


class ProcessPool:
    """The pool interface of `mpi.pool` over `workers` spawned processes (evaluate's `evaluate.workers`).

    `map(fn, payloads, on_result)` calls `fn(ctx, payload)` and returns results in payload order; a task that raises
    is retried `retries` times and then given up as a `mpi.pool.TaskFailed` in its slot, like the serial and MPI
    pools. The workers are started per `map` (evaluation makes one call), each with the context of
    `initializer(*initargs)`.
    """

    def __init__(
        self,
        initializer: Callable[..., Any] | None = None,
        initargs: tuple = (),
        *,
        workers: int = 2,
        retries: int = 2,
        log: Any = None,
        what: str = "evaluate",
    ):
        self.initializer, self.initargs, self.size = initializer, initargs, max(1, int(workers))
        self.retries, self.log, self.what = int(retries), log, what

    def map(self, fn: Callable[..., Any], payloads: Any, on_result: Callable[[int, Any], Any] | None = None) -> list[Any]:
        from functools import partial

        from wm.mpi.pool import TaskFailed

        payloads = list(payloads)
        results: list[Any] = [None] * len(payloads)
        attempts = [0] * len(payloads)
        todo = list(range(len(payloads)))
        while todo:
            again = []
            workers = min(self.size, len(todo))
            for i, res, err in spawn_map(
                partial(_indexed, fn),
                [(i, payloads[i]) for i in todo],
                workers,
                self.what,
                _indexed_init,
                (self.initializer, self.initargs),
            ):
                attempts[i] += 1
                if err is None:
                    results[i] = res
                elif attempts[i] <= self.retries:
                    self.log and self.log.warning(
                        "task %d raised (attempt %d/%d): %s; retrying", i, attempts[i], self.retries + 1, err
                    )
                    again.append(i)
                    continue
                else:
                    self.log and self.log.error("task %d failed after %d attempts: %s", i, attempts[i], err)
                    results[i] = TaskFailed(i, 0, err, attempts[i])
                if on_result is not None:
                    on_result(i, results[i])
            todo = again
        return results

    def close(self) -> None:
        """Nothing stays running between maps."""

    def __enter__(self) -> ProcessPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _indexed_init(initializer: Callable[..., Any] | None, initargs: tuple) -> Any:
    return initializer(*initargs) if initializer is not None else None
