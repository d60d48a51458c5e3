"""A stage's progress, read from its run directory (the registry's `progress`), and the progress line printed while
it runs: elapsed time and ETA (by the pipeline for its stages, by `Ticker` for a stage run on its own)."""

from __future__ import annotations

import threading
import time

from wm.core.config import Config
from wm.core.format import duration
from wm.core.metrics import last_record
from wm.core.registry import stage
from wm.core.rundir import RunDir


def stage_progress(run: RunDir, cfg: Config, verb: str) -> float | None:
    """Fraction of a stage done, from its files and metrics (the registry's `progress`; None when unknown)."""
    st = stage(verb)
    return st.progress(run, cfg, last_record(run.metrics_path(verb)) or {}) if st.progress is not None else None


def progress_line(tag: str, p: float | None, p0: float | None, elapsed: float) -> str:
    """ "<tag>: 42%  elapsed 1m05s  ETA 1m30s": the ETA extrapolates the progress made since this command started
    the stage (from `p0`), so a resumed stage, or a round's collect that starts with the previous round's episodes
    linked in, is not credited with work done before."""
    pct = f"{100 * p:.0f}%" if p is not None else "…"
    made = p - (p0 or 0.0) if p is not None else 0.0
    eta = f"ETA {duration(elapsed * (1 - p) / made)}" if p is not None and made > 0 and p < 1 else "ETA ?"
    return f"{tag}: {pct}  elapsed {duration(elapsed)}  {eta}"


class Ticker:
    """While a stage runs in this process on its own (not under the pipeline, which prints these lines itself from
    outside), its progress line every `every` seconds from a daemon thread, read from the run dir as the pipeline
    reads it. `every <= 0`, or a stage without a progress measure, prints nothing."""

    def __init__(self, run: RunDir, cfg: Config, verb: str, every: float) -> None:
        self.run, self.cfg, self.verb, self.every = run, cfg, verb, float(every)
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def __enter__(self) -> Ticker:
        if self.every > 0 and stage(self.verb).progress is not None:
            self.p0 = self._progress()
            self.start = time.time()
            self.thread = threading.Thread(target=self._loop, name=f"{self.verb}-progress", daemon=True)
            self.thread.start()
        return self

    def _progress(self) -> float | None:
        try:
            return stage_progress(self.run, self.cfg, self.verb)
        except (OSError, ValueError, KeyError, TypeError):  # a file being written: the next tick reads it whole
            return None

    def _loop(self) -> None:
        while not self.stop.wait(self.every):
            print(progress_line(self.verb, self._progress(), self.p0, time.time() - self.start), flush=True)

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
