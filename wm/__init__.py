"""World Models (Ha & Schmidhuber 2018) reproduction suite: V (ConvVAE), M (MDN-RNN), C (CMA-ES controller).

One import package. Installed from the wheel, the Textual app and the MPI master/worker are its subpackages
`wm.tui` and `wm.mpi`, and the YAML configs are `wm.configs`. In a source checkout the same folders sit beside
`wm/` (tui/, mpi/, configs/): the package's search path then also covers the checkout's root, so `wm.tui` and
`wm.mpi` name those folders and every import reads the same in both layouts.
"""

import os
from pathlib import Path

__version__ = "0.2.0"

_root = Path(__file__).resolve().parent.parent
if not (Path(__file__).parent / "mpi").is_dir() and (_root / "mpi" / "__init__.py").exists():
    __path__.append(str(_root))  # noqa: F821 (a package's __path__)

# Under mpirun every rank is one process on one core: OpenBLAS's spare threads spin after each CMA-ES ask/tell on
# rank 0 (most of its remaining CPU per generation, bench/train_controller.py). Must be set before NumPy loads.
if any(v in os.environ for v in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK")):
    for _k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_k, "1")
