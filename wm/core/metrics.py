"""One metrics call, several sinks: `metrics/<stage>.jsonl` (always), a console line, and those `metrics.sinks` names:
TensorBoard under `tb/<stage>/` (default) and MLflow (`wm.core.mlflow_sink`, off by default).

    with make_logger(run, "train-vae") as log:
        log.info("training on %d episodes", n)          # → logs/vae.log and the console
        log.scalars(step, {"vae/loss": 41.2, "vae/kl": 32.0})
        log.image("vae/reconstructions", grid)          # → TensorBoard's Images tab (HWC uint8), at the last step

TensorBoard also gets the run's settings once per stage, as hparams (`Logger.hparams`): when a stage's logger closes
cleanly after logging scalars, the flattened config's scalar values with the last value of every scalar key as the
metrics, in `tb/<stage>/hparams/` (the HParams tab compares runs by them).

Keys are namespaced by stage (`vae/`, `mdnrnn/`, `es/`, `eval/`, `collect/`). The TUI and the report read
only the JSONL; nobody parses the log text.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from wm.core.bounded import json_line
from wm.core.errors import WMError
from wm.core.format import figures
from wm.core.rundir import RunDir, stage


class Logger:
    """Human log + namespaced scalar metrics for one stage of one run."""

    def __init__(self, run: RunDir, stage_key: str, console: bool = True, tensorboard: bool = True):
        st = stage(stage_key)
        self.name = st.name
        self.metrics_path = run.metrics_path(st.verb)
        self.metrics_path.parent.mkdir(parents=True, exist_ok=True)
        self._jsonl = open(self.metrics_path, "a")
        self._tb = self._mlflow = None
        self._step = 0  # the last step `scalars` got (where `image` puts a picture given no step)
        self._final: dict[str, float] = {}  # every scalar key's last finite value: the stage's final metrics
        self._hparams_done = False
        cfg = self._cfg = run.load_config()
        sinks = list(cfg.metrics.sinks) if cfg is not None else ["tensorboard"]
        if tensorboard and "tensorboard" in sinks:
            # tensorboardX (numpy + protobuf only, no TF import) is imported here, not at module level: it adds
            # ~35 ms that readers of this module (e.g. `last_record`) do not need. The pid suffix keeps two
            # processes that open the same stage in the same second from sharing one file name.
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(str(run.tb_dir / st.name), flush_secs=10, filename_suffix=f".{os.getpid()}")
        self._start = time.time()
        self._last_console = 0.0
        log_path = run.log_path(st.verb)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = logging.getLogger(f"wm.{st.name}.{id(self)}")
        self._log.setLevel(logging.INFO)
        self._log.propagate = False
        fh = logging.FileHandler(log_path)
        fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S"))
        self._log.addHandler(fh)
        self._file = fh
        if console:
            ch = logging.StreamHandler(sys.stdout)
            ch.setFormatter(logging.Formatter(f"[{st.name}] %(message)s"))
            self._log.addHandler(ch)
        if "mlflow" in sinks:
            from wm.core.mlflow_sink import MlflowSink

            self._mlflow = MlflowSink(run, cfg, st.verb, run.stage_dir(st.verb), self.warning)

    # -- human log
    def info(self, msg: str, *args: Any) -> None:
        self._log.info(msg, *args)

    def warning(self, msg: str, *args: Any) -> None:
        self._log.warning(msg, *args)

    def error(self, msg: str, *args: Any) -> None:
        self._log.error(msg, *args)

    # -- metrics
    def scalars(self, step: int, values: dict[str, float], console: bool | float = True) -> None:
        """Record `values` at `step` to JSONL and TensorBoard; print a compact line.

        Args:
            console: True prints every call, False never, a float prints at most once per that many seconds.
        """
        clean = {k: float(v) for k, v in values.items()}
        self._step = int(step)
        self._final.update({k: v for k, v in clean.items() if math.isfinite(v)})
        record = {
            "step": int(step),
            "time": round(time.time(), 3),
            **{k: (v if math.isfinite(v) else str(v)) for k, v in clean.items()},
        }
        self._jsonl.write(json.dumps(record) + "\n")
        self._jsonl.flush()
        if self._tb is not None:
            for k, v in clean.items():
                if math.isfinite(v):
                    self._tb.add_scalar(k, v, int(step))
        if self._mlflow is not None:
            self._mlflow.scalars(int(step), clean)
        now = time.time()
        if console is True or (not isinstance(console, bool) and now - self._last_console >= console):
            self._last_console = now
            body = figures({k: v for k, v in clean.items() if k.split("/", 1)[-1] != "step"})  # the step leads the line
            self._log.info("step %d  %s  (%.0fs)", step, body, now - self._start)

    def image(self, tag: str, img: Any, step: int | None = None) -> None:
        """A picture (H, W, 3) — uint8, or floats in [0, 1] — as TensorBoard image `tag` at `step` (default: the
        last step `scalars` got). Only TensorBoard takes it; MLflow gets the stage's PNG and GIF files at close."""
        import numpy as np

        from wm.core.errors import WMError
        from wm.core.media import to_uint8

        arr = np.asarray(img)
        if arr.ndim != 3 or arr.shape[2] not in (1, 3, 4) or 0 in arr.shape:
            raise WMError(f"image {tag!r}: expected an (H, W, 3) picture, got an array of shape {arr.shape}")
        if self._tb is not None:
            self._tb.add_image(tag, to_uint8(arr), self._step if step is None else int(step), dataformats="HWC")

    def hparams(self, config: dict[str, Any], metrics: dict[str, float]) -> None:
        """The run's settings as TensorBoard hparams (tensorboardX `add_hparams`, session `tb/<stage>/hparams/`):
        the flattened `config`'s scalar values (bool, int, float, str; lists and nulls are left out) and the finite
        `metrics`, at the last step. Once per logger: `close` calls it with the config and the final metrics unless
        the stage did."""
        from wm.core.config import flatten

        self._hparams_done = True
        if self._tb is None:
            return
        hp = {k: v for k, v in flatten(config).items() if isinstance(v, (bool, int, float, str))}
        mets = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(float(v))}
        self._tb.add_hparams(hp, mets, name="hparams", global_step=self._step)

    def close(self, hparams: bool = True) -> None:
        """Flush and close every sink; with `hparams` (a clean exit), first the stage's hparams unless logged already
        or there is nothing to log (no config, no scalars)."""
        if hparams and not self._hparams_done and self._tb is not None and self._cfg is not None and self._final:
            self.hparams(self._cfg.to_dict(), self._final)
        self._jsonl.close()
        if self._tb is not None:
            self._tb.close()
        if self._mlflow is not None:
            self._mlflow.close()  # the stage's pictures and GIFs, now that it wrote them
        for h in list(self._log.handlers):
            h.close()
            self._log.removeHandler(h)

    def __enter__(self) -> Logger:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if e is not None and not isinstance(e, (KeyboardInterrupt, SystemExit)):
            # into the log file only: the CLI prints the one `error:` line the user sees
            rec = self._log.makeRecord(self._log.name, logging.ERROR, "", 0, "%s: %s", (type(e).__name__, e), None)
            self._file.handle(rec)
        self.close(hparams=e is None)  # a failed or stopped stage has no final metrics to compare runs by


def make_logger(run: RunDir, stage_key: str, console: bool = True) -> Logger:
    """The logger of stage `stage_key` in `run`."""
    return Logger(run, stage_key, console=console)


def last_record(path: Path) -> dict[str, Any] | None:
    """The last complete JSON line of a metrics file (cheap: reads the tail only)."""
    if not path.exists():
        return None
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - 65536))
        lines = f.read().decode(errors="replace").splitlines()
    for line in reversed(lines):
        try:
            return json_line(line)
        except WMError:
            continue
    return None
