import os

# Under mpirun every rank is one process on one core: OpenBLAS's spare threads spin after each CMA-ES ask/tell on
# rank 0 (most of its remaining CPU per generation, bench/train_controller.py). Must be set before NumPy loads.
if any(v in os.environ for v in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK")):
    for _k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_k, "1")

from wm.cli import main  # noqa: E402

raise SystemExit(main())
