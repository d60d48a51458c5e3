"""The one place TensorFlow is configured: backend, threads, GPU visibility, distribution strategy.

Call `setup()` before building any model. Stage modules call it inside `run`, never at import time, so the
CLI and the TUI stay free of TensorFlow.
"""

from __future__ import annotations

import os


def quiet_import():
    """Import TensorFlow with file descriptor 2 muted, and return it.

    TF 2.21 prints absl/oneDNN/CUDA start-up lines from C++ before `TF_CPP_MIN_LOG_LEVEL` can take effect
    (e.g. "All log messages before absl::InitializeLog() ..."), on every stage and every MPI rank. Python
    errors raised by the import are unaffected (they propagate after stderr is restored).
    """
    import sys

    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow as tf

        tf.config.list_physical_devices("GPU")  # the CUDA probe prints here
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    return tf


def setup(threads: int | None = None, gpu: bool = True, mixed_precision: bool = False):
    """Import and configure TensorFlow; returns the `tf` module.

    Args:
        threads: intra/inter-op threads (1 for MPI workers); None keeps TF's default (all cores).
        gpu: False hides every GPU (CPU workers must not grab GPU memory, peers.md §4 C).
        mixed_precision: use the `mixed_float16` policy when a GPU is present (losses stay float32).
    """
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if not gpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = "-1"
    tf = quiet_import()

    if threads is not None:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        except RuntimeError:  # already initialised in this process
            pass
    gpus = tf.config.list_physical_devices("GPU")
    if not gpu and gpus:
        try:
            tf.config.set_visible_devices([], "GPU")
        except RuntimeError:  # TF already initialised its devices in this process: it keeps them
            pass
        gpus = []
    for g in gpus:
        try:
            tf.config.experimental.set_memory_growth(g, True)
        except RuntimeError:
            pass
    if mixed_precision and gpus:
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")
    return tf


def strategy():
    """MirroredStrategy over all GPUs when there are several, else the default (one GPU or the CPU)."""
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    if len(gpus) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()
