"""`mpirun -n N python -m wm.mpi <module> [args...]`: rank 0 runs `python -m <module> args`, ranks 1..N−1 serve.

The mpi4py.futures launch idiom (`python -m mpi4py.futures -m module`, anchors_style.md §1.6) for our pool:
    mpirun -n 3 python -m wm.mpi wm train-controller --run runs/doom
Without mpirun it simply runs the module (the stage then uses the serial pool).
"""

from __future__ import annotations

import runpy
import sys

from wm.mpi import launched_rank, release_workers


def main() -> int:
    if len(sys.argv) < 2:
        print("usage: mpirun -n N python -m wm.mpi <module> [args...]", file=sys.stderr)
        return 2
    if launched_rank() > 0:
        from wm.mpi.worker import main as worker_main

        return worker_main()
    module, sys.argv = sys.argv[1], sys.argv[1:]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        release_workers()  # the module may have stopped before (or without) making a pool
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
