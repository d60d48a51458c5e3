"""A stage's progress, read from its run directory (the registry's `progress`), and the progress line the pipeline
prints while it runs: elapsed time and ETA."""

from __future__ import annotations

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
