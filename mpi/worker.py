"""`python -m wm.mpi.worker`: a worker rank (1..N−1) that serves the master's tasks until it is told to stop.

Used by the MPMD launch form (`mpirun -n 1 python -m wm train-controller ... : -n 2 python -m wm.mpi.worker`), by
`python -m wm.mpi` on ranks > 0, and by `wm/cli.py` when it finds itself on a worker rank. Each worker runs one
thread (MKL/OMP/OpenBLAS, and TF through `wm.core.tf_setup.setup(threads=1, gpu=False)` in the initializer) and
stays off the GPU (docs/paper-settings.md §8: `MKL_NUM_THREADS=1`, `OMP_NUM_THREADS=1`; peers.md §4 C: every
worker's TF grabbing the GPU ran out of memory).
"""

from __future__ import annotations

import os

ONE_THREAD = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "TF_NUM_INTRAOP_THREADS": "1",
    "TF_NUM_INTEROP_THREADS": "1",
    "CUDA_VISIBLE_DEVICES": "-1",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}


def main() -> int:
    """Serve tasks on this rank; returns the exit code."""
    for k, v in ONE_THREAD.items():
        os.environ[k] = v  # before NumPy/TF start their thread pools (where they have not yet)
    from wm.mpi.pool_mpi import serve

    return serve()


if __name__ == "__main__":
    raise SystemExit(main())
