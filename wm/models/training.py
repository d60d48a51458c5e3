"""Generic training helpers shared by V and M: checkpoint/resume, keep-best weights, early stopping, NaN guard.

A checkpoint is ONE uncompressed `.npz` holding the model weights, the optimizer variables (Adam moments and
iteration count) and a JSON-able state dict (epoch, step, data position, best validation loss, RNG...). It is
written to a temporary name and renamed, so a kill at any moment leaves either the previous checkpoint or the new
one, never a half file. Typical loop:

    ckpt = Checkpoint(run.stage_dir("train-vae") / "checkpoint.npz", model, optimizer)
    state = ckpt.restore() or {"epoch": 0, "step": 0, "batch": 0}
    ...
    check_finite(loss, step, ckpt)          # raises WMError before anything is saved
    if step % every == 0: ckpt.save(state)

TensorFlow is not imported here: models and optimizers are used through their Keras methods only.
"""

from __future__ import annotations

import json
import math
import queue
import threading
import time
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from wm.core.atomic import atomic_save, atomic_savez
from wm.core.errors import WMError

T = TypeVar("T")


def _opt_variables(optimizer) -> list:
    return list(optimizer.variables)


class Checkpoint:
    """Model + optimizer + JSON state in one file, saved atomically and restored with shape checks."""

    def __init__(self, path: str | Path, model, optimizer):
        self.path = Path(path)
        self.model = model
        self.optimizer = optimizer
        self.lr_change: tuple[float, float] | None = None  # (checkpoint's, configured) learning rate after a restore
        if not getattr(optimizer, "built", False):
            optimizer.build(model.trainable_variables)  # the moments must exist before a restore can fill them

    def exists(self) -> bool:
        return self.path.exists()

    def save(self, state: dict[str, Any]) -> None:
        """Write weights, optimizer variables and `state` (must be JSON-able) to `path` atomically."""
        arrays: dict[str, np.ndarray] = {"state": np.array(json.dumps(state))}
        for i, w in enumerate(self.model.weights):
            arrays[f"m{i:04d}"] = np.asarray(w.numpy())
        for i, v in enumerate(_opt_variables(self.optimizer)):
            arrays[f"o{i:04d}"] = np.asarray(v.numpy())
        bad = [k for k, a in arrays.items() if a.dtype.kind == "f" and not np.isfinite(a).all()]
        if bad:  # never replace a good checkpoint with a poisoned one
            kept = f"last good checkpoint kept at {self.path}" if self.path.exists() else "no checkpoint yet"
            raise WMError(f"non-finite weights at step {state.get('step', '?')}; {kept}")
        atomic_savez(self.path, compressed=False, **arrays)

    def read_state(self) -> dict[str, Any] | None:
        """The state dict alone (None when there is no checkpoint); WMError when the file is corrupt."""
        if not self.path.exists():
            return None
        try:
            with np.load(self.path, allow_pickle=False) as f:
                return json.loads(str(f["state"]))
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as e:
            raise WMError(f"checkpoint {self.path} is unreadable ({type(e).__name__}); delete it to restart") from None

    def restore(self) -> dict[str, Any] | None:
        """Load the checkpoint into the model and optimizer and return its state; None when there is none.

        Raises WMError naming the file when it is corrupt or its shapes do not fit the model (e.g. another z size).
        """
        if not self.path.exists():
            return None
        weights, opt_vars = self.model.weights, _opt_variables(self.optimizer)
        try:
            with np.load(self.path, allow_pickle=False) as f:
                state = json.loads(str(f["state"]))
                m = [f[k] for k in sorted(k for k in f.files if k.startswith("m"))]
                o = [f[k] for k in sorted(k for k in f.files if k.startswith("o"))]
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as e:
            raise WMError(f"checkpoint {self.path} is unreadable ({type(e).__name__}); delete it to restart") from None
        got, want = [a.shape for a in m], [tuple(w.shape) for w in weights]
        if got != want or [a.shape for a in o] != [tuple(v.shape) for v in opt_vars]:
            diff = next(
                ((i, g, w) for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w), (None, len(got), len(want))
            )
            raise WMError(
                f"checkpoint {self.path} does not fit the model (first mismatch: array {diff[0]} "
                f"{diff[1]} vs {diff[2]}); the config changed since it was written — delete it or use --force"
            )
        for w, a in zip(weights, m, strict=False):
            w.assign(a)
        for v, a in zip(opt_vars, o, strict=False):
            if _is_learning_rate(v):
                # A constant learning rate is an optimizer variable, so restoring it would silently keep the old
                # `<stage>.lr` while config.yaml says the new one: the configured value wins, and the
                # change is left in `lr_change` for the stage to say. (A schedule is no variable: it follows the config.)
                configured, saved = float(np.asarray(v.numpy())), float(a)
                if configured != saved:
                    self.lr_change = (saved, configured)
                continue
            v.assign(a)
        return state

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)


def _is_learning_rate(variable) -> bool:
    return str(getattr(variable, "path", getattr(variable, "name", ""))).rsplit("/", 1)[-1].split(":")[0] == "learning_rate"


def save_weights(model, path: str | Path) -> None:
    """`model.save_weights` to a temporary `.weights.h5`, then rename (readers never see a partial file)."""
    atomic_save(path, lambda tmp: model.save_weights(str(tmp)))


@dataclass
class EarlyStopping:
    """Track the best validation value; `update` says whether it improved and whether to stop (patience 0 = never)."""

    patience: int = 0
    best: float = math.inf
    bad_epochs: int = 0

    def update(self, value: float) -> tuple[bool, bool]:
        """Record one epoch's value; returns (improved, stop)."""
        if value < self.best:
            self.best, self.bad_epochs = float(value), 0
            return True, False
        self.bad_epochs += 1
        return False, self.patience > 0 and self.bad_epochs >= self.patience

    def state_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["best"] = d["best"] if math.isfinite(d["best"]) else None  # JSON has no inf
        return d

    @classmethod
    def from_state(cls, d: dict[str, Any] | None, patience: int) -> EarlyStopping:
        if not d:
            return cls(patience)
        best = d.get("best")
        return cls(patience, math.inf if best is None else float(best), int(d.get("bad_epochs", 0)))


def check_finite(loss: float, step: int, checkpoint: Checkpoint | str | Path | None) -> None:
    """Raise WMError("non-finite loss at step N; last good checkpoint kept at ...") when `loss` is NaN or inf.

    Call it before any save: the last good checkpoint is left untouched.
    """
    if math.isfinite(float(loss)):
        return
    where = checkpoint.path if isinstance(checkpoint, Checkpoint) else checkpoint
    kept = f"last good checkpoint kept at {where}" if where is not None and Path(where).exists() else "no checkpoint yet"
    raise WMError(f"non-finite loss ({float(loss)}) at step {step}; {kept}")


class Rate:
    """Items per second over the interval since the last `read` (e.g. frames/s between metric records)."""

    def __init__(self) -> None:
        self._t, self._n = time.perf_counter(), 0

    def add(self, n: int) -> None:
        self._n += n

    def read(self) -> float:
        now = time.perf_counter()
        rate = self._n / max(now - self._t, 1e-9)
        self._t, self._n = now, 0
        return rate


class Deferred:
    """Per-step values kept as device tensors and read back `every` steps at a time (one sync, not one per step).

    `add(step, *tensors)` queues a step's values; every `every` items, and on `flush()` (call it before any save),
    they are converted to floats and handed to `handle([(step, v1, v2, ...), ...])` in order, which checks and
    logs them. Python ints pass through unchanged, so an item may carry bookkeeping (an epoch) beside its tensors.
    """

    def __init__(self, every: int, handle) -> None:
        self.every, self.handle, self.items = max(1, int(every)), handle, []

    def add(self, *item) -> None:
        self.items.append(item)
        if len(self.items) >= self.every:
            self.flush()

    def flush(self) -> None:
        if not self.items:
            return
        values = [tuple(x if isinstance(x, int) else float(x) for x in item) for item in self.items]
        self.items = []
        self.handle(values)


def prefetch(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """Yield `items` in order while a background thread produces up to `depth` of them ahead.

    For a training loop whose batches are assembled in NumPy: the next batch is built while the compiled step runs
    (TF releases the GIL), not between steps. An exception raised while producing an item is raised here, where
    that item would have come; closing the generator (the loop breaks or raises) stops the producer.
    """
    q: queue.Queue = queue.Queue(maxsize=max(1, int(depth)))
    stop = threading.Event()
    end = object()

    def put(x) -> bool:
        while not stop.is_set():
            try:
                q.put(x, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
        except BaseException as e:  # noqa: BLE001 — handed to the consumer, raised there
            put((end, e))
            return
        put((end, None))

    thread = threading.Thread(target=produce, name="prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item, err = q.get()
            if item is end:
                if err is not None:
                    raise err
                return
            yield item
    finally:
        stop.set()
        thread.join(timeout=10.0)
