"""What the UI knows about a run, read from the run directory only (no Textual here, no TensorFlow anywhere).

Runs are found by shape, states and key figures come from `wm.status`, metrics are read incrementally from
`metrics/<stage>.jsonl`, and the launch form's config is resolved exactly as the CLI will resolve it.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from wm.rundir import GLOBAL_SECTIONS, STAGES, RunDir, round_dirs, stage

# Per stage short name: (main plot series, throughput series). Keys from the stages' KEY_FIGURES contract.
PLOTS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "collect": (("collect/episodes",), "collect/steps_per_s"),
    "vae": (("vae/loss", "vae/val_loss"), "vae/frames_per_s"),
    "encode": (("encode/episodes",), None),
    "mdnrnn": (("mdnrnn/nll",), "mdnrnn/steps_per_s"),
    "controller": (("es/best", "es/mean", "es/min"), "es/evals_per_s"),
    "eval": (("eval/mean",), None),
}


def fmt(v: Any) -> str:
    """A number as a short readable string (ints without a dot, floats to 4 significant digits)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if float(v).is_integer() and abs(v) < 1e9:
        return str(int(v))
    return f"{v:.4g}"


def is_run(path: Path) -> bool:
    """A directory is a run if it has a config.yaml or any stage folder, log or metrics folder."""
    if not path.is_dir():
        return False
    names = {"config.yaml", "logs", "metrics", *(s.dir for s in STAGES)}
    return any((path / n).exists() for n in names)


def find_runs(root: Path) -> list[Path]:
    """The runs directly under `root`, sorted by name, each followed by its iterative-training rounds."""
    if not root.is_dir():
        return []
    runs = sorted(p for p in root.iterdir() if not p.name.startswith(".") and is_run(p))
    # rounds of iterative training (`<run>/round<k>`, see wm/iterate.py) are runs of their own, listed after theirs
    return [q for p in runs for q in (p, *(r for r in round_dirs(p) if is_run(r)))]


def run_summary(path: Path) -> str:
    """One line for the run picker: env and how many stages are done / running."""
    from wm.status import stage_rows

    run = RunDir(path)
    try:
        cfg = run.load_config()
        env = cfg.env.name if cfg is not None else "no config yet"
    except (yaml.YAMLError, AttributeError, OSError):
        env = "unreadable config.yaml"
    states = [state for _, state, _ in stage_rows(run)]
    running = states.count("running")
    return f"{env}, {states.count('done')}/{len(states)} done" + (f", {running} running" if running else "")


def figures_text(figs: dict[str, Any]) -> str:
    """Key figures as `episodes 12  loss 41.2`."""
    return "  ".join(f"{k.split('/', 1)[-1]} {fmt(v)}" for k, v in figs.items())


class MetricsTail:
    """Reads the records appended to a metrics JSONL since the last call (a torn last line waits)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.offset = 0
        self._buf = b""

    def read(self) -> list[dict[str, Any]]:
        """New complete records; starts over if the file was replaced by a shorter one."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size < self.offset:
            self.offset, self._buf = 0, b""
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        self.offset += len(chunk)
        *lines, self._buf = (self._buf + chunk).split(b"\n")
        out = []
        for line in lines:
            try:
                rec = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out


class Series:
    """The metric history of one stage, as {key: [(step, value), ...]} plus the latest value of each key."""

    def __init__(self, max_points: int = 5000):
        self.max_points = max_points
        self.points: dict[str, list[tuple[float, float]]] = {}
        self.latest: dict[str, Any] = {}
        self.records = 0

    def add(self, records: Sequence[dict[str, Any]]) -> None:
        for rec in records:
            step = rec.get("step", self.records)
            self.records += 1
            for k, v in rec.items():
                if k in ("step", "time"):
                    continue
                self.latest[k] = v
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    pts = self.points.setdefault(k, [])
                    pts.append((float(step), float(v)))
                    if len(pts) > self.max_points:  # bounded memory: keep every other old point
                        pts[:] = pts[: len(pts) // 2 : 2] + pts[len(pts) // 2 :]
            if "step" in rec:
                self.latest["step"] = rec["step"]


def resolve(run: Path, blocks: Sequence[str], sets: Sequence[str]):
    """The config `python -m wm <verb> --run RUN --configs BLOCKS --set SETS` will use (raises WMError).

    Calls the CLI's own `resolve_config`, so the form shows exactly what the stage gets: the blocks over the
    defaults, or the run's stored config.yaml when no block is chosen, then the overrides.
    """
    from wm.cli import resolve_config

    return resolve_config(argparse.Namespace(run=str(run), configs=list(blocks), set=list(sets)))


def config_excerpt(cfg: Any, verb: str) -> str:
    """The sections of the resolved config that matter for `verb` (the stage's own, then the global ones), as YAML."""
    d = cfg.to_dict()
    keep = [*stage(verb).sections, *GLOBAL_SECTIONS]
    return yaml.safe_dump({k: d[k] for k in keep if k in d}, sort_keys=False).rstrip()
