"""Optional imports a library makes at its own import time, skipped where this suite never uses what they give.

Keras 3 imports `matplotlib.pyplot` for its image-gallery helpers, TF 2.21's legacy tf.keras `scipy.sparse` and its
TFLite helpers JAX, and pycma `scipy.stats` (a surrogate model's rank test) and `matplotlib.pyplot` (its plots);
each inside a `try: … except ImportError`. A stage, an MPI rank or a worker pays them at every start (the CPU each
costs: docs/results/timings.md). `hidden` makes those imports fail as if the package were not installed, for the
duration of one import only.
"""

from __future__ import annotations

import contextlib
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
