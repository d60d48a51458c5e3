"""Master/worker over MPI, and its serial twin: the only package that imports mpi4py (STYLE.md rule 9).

    pool = make_pool(initializer, initargs, timeout=600.0, retries=2, log=log)
    results = pool.map(task_fn, payloads)   # ordered like payloads; a task lost for good is a TaskFailed
    pool.close()

Under `mpirun -n N` rank 0 is the master (it calls `make_pool`, which returns an `MPIPool`) and ranks 1..N−1
serve tasks (`mpi.worker.serve`). Without a launcher (`launched_size() == 1`) `make_pool` returns a `SerialPool`
with the same interface and mpi4py is never imported. Launch forms (docs/paper-settings.md §8, peers.md §4 D):

    mpirun -n 3 python -m wm train-controller --run runs/doom   # the CLI sends ranks > 0 to the stage, which serves
    mpirun -n 3 python -m wm.mpi wm train-controller --run runs/doom      # mpi4py.futures style: ranks > 0 never parse
    mpirun -n 1 python -m wm train-controller --run runs/doom : -n 2 python -m wm.mpi.worker   # MPMD form

Rank and size are read from the launcher's environment (MPICH/Hydra and Slurm-PMI `PMI_*`, Open MPI
`OMPI_COMM_WORLD_*`, PMIx) so this module stays free of mpi4py and `wm/cli.py` can branch on the rank cheaply.

A cluster's own MPI (Open MPI, Intel MPI, Cray MPICH, ...) instead of the `mpich` wheel: build mpi4py against it
and launch with its launcher (the same MPI must build mpi4py and run the job, or every rank sees size 1,
peers.md §4 D):

    .venv/bin/python -m pip uninstall -y mpi4py mpich
    MPICC=$(which mpicc) .venv/bin/python -m pip install --no-binary=mpi4py --no-cache-dir mpi4py
    mpirun -n 2 .venv/bin/python -c "from mpi4py import MPI; c = MPI.COMM_WORLD; print(c.rank, c.size)"   # 0 2 / 1 2
    mpirun -n 65 .venv/bin/python -m wm train-controller --run runs/doom        # or: srun -n 65 ...
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from wm.mpi.pool import Pool, SerialPool, StopFlag, TaskFailed, set_stop_check, should_stop

__all__ = [
    "Pool",
    "SerialPool",
    "StopFlag",
    "TaskFailed",
    "launched_rank",
    "launched_size",
    "make_pool",
    "release_workers",
    "set_stop_check",
    "should_stop",
]

_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK")
_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def launched_rank() -> int:
    """This process's rank as the MPI launcher set it (0 when not launched by mpirun)."""
    for v in _RANK_VARS:
        if v in os.environ:
            return int(os.environ[v])
    return 0


def launched_size() -> int:
    """The number of ranks the launcher started (1 when not launched by mpirun)."""
    for v in _SIZE_VARS:
        if v in os.environ:
            return int(os.environ[v])
    if "PMIX_RANK" in os.environ:  # PMIx has no size variable: ask MPI
        from mpi4py import MPI

        return MPI.COMM_WORLD.Get_size()
    return 1


def release_workers() -> None:
    """On rank 0 under mpirun: let the workers exit when no pool was used (call on every exit path)."""
    if launched_size() > 1 and launched_rank() == 0:
        from wm.mpi.pool_mpi import release_workers as release

        release()


def make_pool(
    initializer: Callable[..., Any] | None = None,
    initargs: tuple = (),
    *,
    timeout: float = 600.0,
    retries: int = 2,
    log: Any = None,
    stop: StopFlag | None = None,
) -> Pool:
    """The task pool of this process: an `MPIPool` on rank 0 under mpirun, else a `SerialPool`.

    Args:
        initializer: called once per worker with `initargs` (load V/M there, mpi4py.futures style); picklable.
        timeout: seconds after which a running task is re-dispatched to another rank (MPI only).
        retries: how many times a task that raised is retried before it is given up as a `TaskFailed`.
        log: an object with `.info/.warning/.error` (the stage logger); faults are reported there.
        stop: the StopFlag whose signal handlers make `map` raise KeyboardInterrupt between tasks.
    """
    if launched_size() > 1:
        if launched_rank() != 0:
            raise RuntimeError("make_pool is for rank 0; worker ranks run mpi.worker.serve()")
        from wm.mpi.pool_mpi import MPIPool

        return MPIPool(initializer, initargs, timeout=timeout, retries=retries, log=log, stop=stop)
    return SerialPool(initializer, initargs, retries=retries, log=log, stop=stop)
