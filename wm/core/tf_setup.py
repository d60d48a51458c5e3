"""The one place TensorFlow is configured: backend, threads, GPU visibility, distribution strategy.

Each process decides its TF devices **once, first**, before anything starts TensorFlow's runtime (an op, a model):

    tf = tf_setup.setup()                           # this process's role decides (below)
    tf = tf_setup.setup(threads=1, gpu=False)       # a worker process: one thread, no GPU

`setup` records what it set. A later call that asks for the same thing, or leaves an argument to `AUTO`, is a
no-op that returns `tf`; one that asks for something else before the runtime has started changes the decision
(TF still can); one that asks for another GPU set after it started raises `WMError` (TF's own error would be
"Visible devices cannot be modified after being initialized"; on a CPU-only machine the same order is refused,
so the CPU test suite catches what would crash on a GPU box). Thread counts cannot change after the start either;
a later call asking for other counts keeps the running ones (thread pools change speed, not results).

Role defaults (`AUTO`): MPI worker ranks (`launched_rank() > 0`) get one thread and no GPU; any other process
TF's thread pools (all cores) and the GPU when there is one. Who decides: the CLI on MPI worker ranks (before TF is
imported, so they never probe CUDA), each stage's `run` (first thing), the evaluation engine's worker processes
(`wm.rollouts.engine.WorkerContext`), the collect workers (`wm.rollouts.agent`), the benches, and
`tests/conftest.py` for the test process. `decide()` records a decision without importing TF (the CLI, the tests'
conftest); stage modules call `setup()` inside `run`, never at import time, so the CLI and the TUI stay free of
TensorFlow.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import os
import sys
from dataclasses import dataclass

from wm.core.imports import hidden, long_lived

AUTO = "auto"  # an argument left to the process's decision (or, before any, to its role)


@contextlib.contextmanager
def _stderr_muted():
    """File descriptor 2 pointed at /dev/null, then restored (Python's own errors propagate after the restore)."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


# What TF's and Keras's imports skip in a TensorFlow process (`wm.core.imports.hidden`), each an optional import for
# code this suite never calls: TF 2.21's TFLite helpers try `from jax import jit` and Keras 3 `import jax` (its Orbax
# checkpoint callback), which with the `[jax]` extra installed would load JAX and its XLA runtime into every TF process
# (≈ 0.5 s of CPU and ≈ 108 MB, measured); TF's legacy tf.keras imports `scipy.sparse` (≈ 0.4 s) and Keras 3
# `matplotlib.pyplot` for its image galleries (≈ 0.4 s). A later import of any of them, by code that uses it, works.
_SKIPPED = ("jax", "matplotlib", "scipy")


def quiet_import():
    """Import TensorFlow with file descriptor 2 muted, and return it.

    TF 2.21 prints absl/oneDNN/CUDA start-up lines from C++ before `TF_CPP_MIN_LOG_LEVEL` can take effect
    (e.g. "All log messages before absl::InitializeLog() ..."), on every stage and every MPI rank. Python
    errors raised by the import are unaffected (they propagate after stderr is restored).
    """
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    keras_on_tensorflow()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with _stderr_muted(), hidden(*_SKIPPED), long_lived():
        import tensorflow as tf

        tf.config.list_physical_devices("GPU")  # the CUDA probe prints here
    return tf


class _QuietLoader(importlib.abc.Loader):
    """TensorFlow's own loader, run with stderr muted, then the CUDA probe (`quiet_import`'s two noisy steps) and
    this process's device decision applied, as `setup` would: threads, GPU visibility, memory growth."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = module.__spec__.loader = self._inner  # the module keeps TF's loader
        with _stderr_muted(), hidden(*_SKIPPED), long_lived():
            self._inner.exec_module(module)
            module.config.list_physical_devices("GPU")
            if _Process.decided is not None:
                _apply(module, _Process.decided)


class _SkippingLoader(importlib.abc.Loader):
    """Keras's own loader (on TensorFlow), run while `_SKIPPED` are hidden."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = module.__spec__.loader = self._inner
        with hidden(*_SKIPPED), long_lived():
            self._inner.exec_module(module)


class _QuietFinder(importlib.abc.MetaPathFinder):
    """Finds `tensorflow` and `keras` (on TensorFlow), once each, through the other finders, and hands their imports
    to `_QuietLoader` and `_SkippingLoader`."""

    def __init__(self) -> None:
        self._looking: set[str] = set()  # the nested lookup below must not find this finder again

    def find_spec(self, name, path=None, target=None):
        if name not in ("tensorflow", "keras") or name in self._looking:
            return None
        if name == "keras" and os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow":
            return None  # a JAX process (wm.core.backend): Keras may import JAX
        self._looking.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._looking.discard(name)
        if {"tensorflow", "keras"} - {name} <= set(sys.modules):
            quiet_on_first_import(False)  # both seen: nothing left to find
        if spec is not None and spec.loader is not None:
            spec.loader = (_QuietLoader if name == "tensorflow" else _SkippingLoader)(spec.loader)
        return spec


_FINDER = _QuietFinder()


def quiet_on_first_import(on: bool = True) -> None:
    """Mute TensorFlow's C++ start-up lines whenever this process first imports it (a stage's `setup`, a model
    module, Keras or TFP importing it) and apply the device decision then, instead of importing it up front: a
    process whose work needs no TF (the random policy's collect and evaluation, an MPI master that only
    dispatches) never pays its start-up, ≈ 4–5 s of CPU per process. `decide` turns it on. While the import runs
    stderr is muted for the whole process, other threads included, and JAX and matplotlib are hidden from TF's and
    Keras's imports (`_SKIPPED`). It stays on until both `tensorflow` and `keras` have been imported."""
    if on:
        if "tensorflow" not in sys.modules and _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)
    elif _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)


def keras_on_tensorflow() -> None:
    """Keras on TensorFlow in a process that sets TF up (every stage but a JAX run's train-vae and train-mdnrnn,
    `wm.core.backend`): a `KERAS_BACKEND=jax` left in the shell must not send encode or the dream to JAX."""
    if "keras" not in sys.modules:
        os.environ["KERAS_BACKEND"] = "tensorflow"


@dataclass(frozen=True)
class Devices:
    """A process's TF device decision: `threads` intra/inter-op threads (None: TF's default, all cores) and whether
    the GPUs are visible (`gpu`; moot on a machine without one)."""

    threads: int | None
    gpu: bool

    def __str__(self) -> str:
        return f"{'all' if self.threads is None else self.threads} thread(s), GPU {'visible' if self.gpu else 'hidden'}"


class _Process:
    """What this process decided (None until the first `decide`/`setup`), and the CUDA_VISIBLE_DEVICES it replaced."""

    decided: Devices | None = None
    saved_cuda: str | None = None
    set_cuda = False


def role_default() -> Devices:
    """MPI worker ranks: one thread, no GPU (paper settings §8; peers.md §4 C); any other process: TF's defaults."""
    from wm.mpi import launched_rank  # reads the launcher's environment only

    return Devices(1, False) if launched_rank() > 0 else Devices(None, True)


def decided() -> Devices | None:
    """This process's decision, None before the first `decide`/`setup`."""
    return _Process.decided


def initialised() -> bool:
    """True once TensorFlow's runtime has started in this process (its devices and thread pools are then fixed)."""
    if "tensorflow" not in sys.modules:
        return False
    try:
        from tensorflow.python.eager import context

        return context.context()._context_handle is not None  # noqa: SLF001 — TF's own test of the same rule
    except (ImportError, AttributeError):  # a TF without the attribute: probe with a setting that must not change
        import tensorflow as tf

        n = tf.config.threading.get_inter_op_parallelism_threads()
        try:
            tf.config.threading.set_inter_op_parallelism_threads(n + 1)
        except RuntimeError:
            return True
        tf.config.threading.set_inter_op_parallelism_threads(n)
        return False


def _running() -> Devices:
    """What TF runs with when it started before any decision: its defaults unless the GPUs were hidden."""
    import tensorflow as tf

    n = tf.config.threading.get_intra_op_parallelism_threads()
    physical = tf.config.list_physical_devices("GPU")
    masked = os.environ.get("CUDA_VISIBLE_DEVICES") == "-1" or len(tf.config.get_visible_devices("GPU")) < len(physical)
    return Devices(n or None, not masked)


def _resolve(threads, gpu, base: Devices) -> Devices:
    if threads is not AUTO and threads is not None and int(threads) < 1:
        raise ValueError(f"threads must be >= 1 or None, got {threads}")
    return Devices(
        base.threads if threads is AUTO else (None if threads is None else int(threads)),
        base.gpu if gpu is AUTO else bool(gpu),
    )


def decide(threads: int | None | str = AUTO, gpu: bool | str = AUTO) -> Devices:
    """Record (and, where TF is loaded, apply) this process's device decision; returns it. Imports no TensorFlow:
    where TF is not loaded yet, its first import applies the decision (`quiet_on_first_import`), so a process
    that decides first and then may or may not need TF pays its start-up only when it does.

    Before TF is imported, hiding the GPU sets `CUDA_VISIBLE_DEVICES=-1` (CUDA is then never probed). See the
    module docstring for what a later call may change. Raises WMError for another GPU set once TF has started.
    """
    started = initialised()
    current = _Process.decided
    if current is None and started:
        current = _running()  # TF started before any decision: that is what this process has
    want = _resolve(threads, gpu, current or role_default())
    if current is not None and started:
        if want.gpu != current.gpu:
            from wm.core.errors import WMError

            raise WMError(
                f"TensorFlow already runs in this process with {current}; a later setup asks for the GPU "
                f"{'visible' if want.gpu else 'hidden'}, which TF cannot change once started: call "
                "wm.core.tf_setup.setup(...) first, at the process's entry point, with the devices it needs"
            )
        _Process.decided = current  # the running thread pools stay (want.threads is not applied)
        return current
    _Process.decided = want
    if "tensorflow" in sys.modules:
        _apply(sys.modules["tensorflow"], want)
    else:
        _cuda_env(want.gpu)
        quiet_on_first_import()  # applied when TF first loads, wherever that is
    return want


def _cuda_env(gpu: bool) -> None:
    if not gpu and not _Process.set_cuda:
        _Process.saved_cuda, _Process.set_cuda = os.environ.get("CUDA_VISIBLE_DEVICES"), True
        os.environ["CUDA_VISIBLE_DEVICES"] = "-1"
    elif gpu and _Process.set_cuda:  # a changed decision before TF loaded gives the GPUs back
        if _Process.saved_cuda is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = _Process.saved_cuda
        _Process.set_cuda = False


def _apply(tf, want: Devices) -> None:
    """Set threads and GPU visibility in a TF whose runtime has not started (both calls are then allowed)."""
    n = 0 if want.threads is None else want.threads
    tf.config.threading.set_intra_op_parallelism_threads(n)
    tf.config.threading.set_inter_op_parallelism_threads(n)
    gpus = tf.config.list_physical_devices("GPU")
    tf.config.set_visible_devices(gpus if want.gpu else [], "GPU")
    if want.gpu:
        for g in gpus:
            tf.config.experimental.set_memory_growth(g, True)


def setup(threads: int | None | str = AUTO, gpu: bool | str = AUTO, mixed_precision: bool = False):
    """Import TensorFlow (quietly), apply this process's device decision (`decide`) and return the `tf` module.

    Args:
        threads: intra/inter-op threads (1 for worker processes); None: TF's default (all cores); AUTO: as decided.
        gpu: False hides every GPU (CPU workers must not grab GPU memory, peers.md §4 C); AUTO: as decided.
        mixed_precision: use the `mixed_float16` policy when a GPU is visible (losses stay float32).
    Raises:
        WMError: the call asks for another GPU set after TF started in this process (see the module docstring).
    """
    keras_on_tensorflow()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    want = decide(threads, gpu)  # before the import: a hidden GPU is never probed
    tf = quiet_import()
    if not initialised():
        _apply(tf, want)
    if mixed_precision and want.gpu and tf.config.get_visible_devices("GPU"):
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")
    return tf


def strategy(multi: bool = False):
    """With `multi` (`vae.multi_gpu`), a MirroredStrategy over all GPUs when there are several; else the default
    strategy (one GPU or the CPU). Off by default: the paper's batch of 100 split over 8 GPUs is 12 frames each,
    slower than one GPU; a user who turns it on scales `vae.batch_size` with the GPU count."""
    import tensorflow as tf

    gpus = tf.config.list_logical_devices("GPU")
    if multi and len(gpus) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()
