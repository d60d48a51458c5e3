"""Optional imports a library makes at its own import time, skipped where this suite never uses what they give; and the
garbage collector kept off the objects of the imports that last as long as the process (`long_lived`).

Keras 3 imports `matplotlib.pyplot` for its image-gallery helpers, TF 2.21's legacy tf.keras `scipy.sparse` and its
TFLite helpers JAX, and pycma `scipy.stats` (a surrogate model's rank test) and `matplotlib.pyplot` (its plots);
each inside a `try: … except ImportError`. A stage, an MPI rank or a worker pays them at every start (the CPU each
costs: docs/results/timings.md). `hidden` makes those imports fail as if the package were not installed, for the
duration of one import only.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def hidden(*names: str) -> Iterator[None]:
    """While the block runs, `import name` (and of any `name.sub`) raises ModuleNotFoundError, for each `name`
    (a package or a subpackage) this process has not imported yet; afterwards it imports as usual (the first import
    that needs it then pays for it)."""
    absent = [n for n in names if n not in sys.modules]
    for n in absent:
        sys.modules[n] = None  # type: ignore[assignment]  # an import of it raises ModuleNotFoundError
    try:
        yield
    finally:
        for n in absent:
            if n in sys.modules and sys.modules[n] is None:
                del sys.modules[n]


@contextlib.contextmanager
def long_lived() -> Iterator[None]:
    """For an import whose objects live as long as the process (TensorFlow, Keras, TFP): Python's cyclic garbage
    collector is off while it runs, and afterwards everything the process holds is moved to the collector's
    permanent generation (`gc.freeze`), which no later collection walks.

    `import tensorflow, keras` leaves ≈ 620 k objects that the collector tracks. Left to it, they are walked by
    every collection of the old generations while the import runs and again whenever enough new objects survive
    later (a full walk takes ≈ 0.35 s on a 2-core EPYC), as tracing a graph makes them; frozen, they are not:
    V built and its step traced and run takes ≈ 1 s of CPU less (bench/startup.py, `long_lived_saves_s`), a tiny
    Doom `wm evaluate` ≈ 1.5 s (docs/results/timings.md, "The test suite"). Freezing skips the one collection
    that would free the few cycles the import leaves behind (≈ 3,400 objects measured after TF, Keras and TFP):
    they stay allocated for the process's life. Objects frozen are still freed when their last reference goes."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was:
            gc.enable()
