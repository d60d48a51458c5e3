"""`spawn_map`: run a function over items in spawned worker processes, and never hang when a worker dies.

`multiprocessing.Pool` silently replaces a worker that dies (a segfault in the env, an OOM kill) and waits forever
for the task it held; a failing initializer makes it respawn workers in a loop. `concurrent.futures` reports both
as `BrokenProcessPool`, which this turns into one `WMError` line. Workers ignore Ctrl-C (the parent handles it).
A worker's cleanups (`at_worker_exit`: close ViZDoom, flush a writer) run when it exits normally, when the parent
stops it early with SIGTERM, and when the parent dies; without them the ViZDoom game process (which ignores
SIGTERM) would outlive the worker.
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

from wm.errors import WMError

STOP_GRACE_S = 10.0  # after SIGTERM, how long a worker may take to run its cleanups before it is killed
_CLEANUPS: list[Callable[[], Any]] = []


def at_worker_exit(fn: Callable[[], Any]) -> None:
    """Run `fn` when this worker process exits, normally or stopped by SIGTERM; the last registered runs first."""
    _CLEANUPS.append(fn)


def _cleanup() -> None:
    while _CLEANUPS:
        fn = _CLEANUPS.pop()
        try:
            fn()
        except Exception:  # noqa: BLE001 — a failing cleanup must not skip the others
            traceback.print_exc()


def _sigterm(signum, frame) -> None:
    _cleanup()
    os._exit(0)  # not SystemExit: the executor's worker loop would catch it as the running task's exception


def _exit_with_parent(parent: Any) -> None:
    parent.join()  # returns when the parent process is gone, however it died (SIGTERM, SIGKILL, OOM)
    os.kill(os.getpid(), signal.SIGTERM)


def _init(initializer: Callable[..., Any] | None, initargs: tuple) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _sigterm)
    # An orphaned worker would wait for work forever, holding its env: it stops itself when the parent dies.
    threading.Thread(target=_exit_with_parent, args=(mp.parent_process(),), daemon=True).start()
    Finalize(None, _cleanup, exitpriority=10)  # a normal exit (the executor's shutdown) runs the cleanups too
    if initializer is not None:
        initializer(*initargs)


def _stop(ex: ProcessPoolExecutor) -> None:
    """Cancel what has not started, SIGTERM the workers, kill the ones that do not exit."""
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
            p.kill()
            p.join()
    ex.shutdown(wait=True)


def spawn_map(fn: Callable[[Any], Any], items: Iterable[Any], workers: int, what: str,
              initializer: Callable[..., Any] | None = None, initargs: tuple = ()) -> Iterator[Any]:
    """Yield `fn(item)` for every item, in completion order, from `workers` spawned processes.

    An exception in `fn` is re-raised here; a worker that dies or an initializer that fails raises `WMError` naming
    `what`. On any exception (Ctrl-C included), or when the caller stops iterating, pending items are cancelled and
    the workers stopped before this returns.
    """
    ctx = mp.get_context("spawn")  # not fork: the parent may hold TensorFlow or a ViZDoom game
    ex = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init, initargs=(initializer, initargs))
    finished = False
    try:
        for fut in as_completed([ex.submit(fn, item) for item in items]):
            yield fut.result()
        finished = True
    except BrokenProcessPool as e:
        raise WMError(f"{what}: a worker process died ({e}); what is on disk is kept, rerun to resume") from None
    finally:
        if finished:
            ex.shutdown(wait=True)
        else:
            _stop(ex)
