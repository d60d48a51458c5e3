"""Which Keras 3 backend trains V and M in this process: `run.backend` (docs/guide/backends.md).

V and M are written in `keras.ops` (`wm.models.vae`, `wm.models.mdnrnn`), so train-vae and train-mdnrnn run on
TensorFlow (the default) or JAX. Every other stage (encode, the dream, C, evaluate) runs on TensorFlow: the weight
files are Keras' own `.weights.h5`, which load under either backend. Keras fixes its backend when it is first
imported, once per process; the pipeline runs each stage as its own process, so one run can train V on JAX and
evaluate on TensorFlow.

`auto` is `$KERAS_BACKEND` when it names a supported backend, else TensorFlow. Imports neither TensorFlow nor JAX.
"""

from __future__ import annotations

import importlib.util
import os
import sys

from wm.core.errors import WMError

BACKENDS = ("tensorflow", "jax")
CHOICES = ("auto", *BACKENDS)


def resolve(setting: str = "auto") -> str:
    """`run.backend` → the backend that trains V and M: `auto` reads `$KERAS_BACKEND`, else TensorFlow."""
    setting = str(setting).lower()
    if setting not in CHOICES:
        raise WMError(f"run.backend must be one of {', '.join(CHOICES)}, got {setting!r}")
    if setting == "auto":
        env = os.environ.get("KERAS_BACKEND", "").lower()
        return env if env in BACKENDS else "tensorflow"
    return setting


def active() -> str | None:
    """The backend Keras runs on in this process, None before Keras is imported."""
    keras = sys.modules.get("keras")
    return None if keras is None else keras.backend.backend()


def activate(setting: str = "auto") -> str:
    """Make `setting` (resolved) this process's Keras backend before Keras is imported; returns its name.

    Raises WMError in one line when Keras already runs on another backend here, or when JAX is asked for and not
    installed (it is an extra: `pip install "world-models-suite[jax]"`).
    """
    name = resolve(setting)
    running = active()
    if running is not None and running != name:
        raise WMError(
            f"Keras already runs on {running} in this process; run.backend {name} must be chosen before Keras is "
            "imported (run the stage as its own command)"
        )
    if name == "jax" and importlib.util.find_spec("jax") is None:
        raise WMError(
            'run.backend jax needs JAX: pip install "jax[cpu]" (or jax[cuda12] for a GPU), see docs/guide/backends.md'
        )
    os.environ["KERAS_BACKEND"] = name
    return name


class _NoTensorFlow:
    available = False


def seed_keras(seed: int) -> None:
    """`keras.utils.set_random_seed(seed)` (Python's, NumPy's and Keras' global generators) without importing
    TensorFlow on another backend: Keras seeds TF too whenever TF is installed, which would load it (and its
    start-up) into a JAX training. On TensorFlow it is Keras' own call, unchanged."""
    import keras

    if keras.backend.backend() == "tensorflow":
        keras.utils.set_random_seed(seed)
        return
    from keras.src.utils import rng_utils  # the module whose lazy `tf` Keras consults

    saved = rng_utils.tf
    rng_utils.tf = _NoTensorFlow()
    try:
        keras.utils.set_random_seed(seed)
    finally:
        rng_utils.tf = saved
