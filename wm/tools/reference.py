"""Is my run on track? A run's curves against the recorded runs of its preset (`wm/references/*.json`).

    wm reference --run runs/car                       # where the run stands against its preset's recorded runs
    wm reference record --runs runs/a runs/b --name "carracing small" --blocks carracing small --version 2 \\
        --out wm/references/carracing-small.json      # a preset version's curves, from its runs

A reference file holds, per recorded run of one preset version, a few curves by step (CMA-ES's population mean and
its check of the CMA mean per generation, V's validation loss, M's NLL) and the final score. A run matches the
reference whose blocks resolve to the run's settings of data, V, M and C (`SHAPING`, the seed aside). `status` and
the report print its standing; each curve reads "within the recorded runs' a–b", "below every recorded run's …" or
"above …" at the run's latest step that the references reach.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from wm.core.atomic import atomic_write_json
from wm.core.bounded import read_json_or, read_jsonl
from wm.core.config import Config, flatten
from wm.core.errors import WMError
from wm.core.format import count
from wm.core.rundir import RunDir

REFERENCE_DIR = Path(__file__).resolve().parent.parent / "references"
# the curves a reference records: (metrics file's stage, key, what it is)
CURVES = (
    ("train-controller", "es/mean", "population mean"),
    ("train-controller", "es/eval_mean", "check of the CMA mean"),
    ("train-vae", "vae/val_loss", "V's validation loss"),
    ("train-mdnrnn", "mdnrnn/nll", "M's NLL"),
)
# the settings a run shares with its preset's recorded runs (the seed, the budgets of C's training length and the
# free sections aside): data, V, M and C's population
SHAPING = ("env.name", "collect.episodes", "vae.", "mdnrnn.", "es.popsize", "es.trials", "es.fitness", "controller.")


SMOOTH = 5  # generations of C's population mean averaged before it is compared


def references() -> list[dict[str, Any]]:
    """Every shipped reference (`wm/references/*.json`), each with its `path`."""
    out = []
    for p in sorted(REFERENCE_DIR.glob("*.json")) if REFERENCE_DIR.is_dir() else []:
        doc = read_json_or(p)
        if isinstance(doc, dict) and isinstance(doc.get("runs"), list):
            out.append({**doc, "path": p})
    return out


def _shaping(cfg: Config) -> dict[str, Any]:
    return {k: v for k, v in flatten(cfg.to_dict()).items() if k.startswith(SHAPING) and k != "mdnrnn.init_from"}


def match(cfg: Config) -> dict[str, Any] | None:
    """The reference of `cfg`'s preset: the first whose blocks resolve to the same `SHAPING` settings."""
    from wm.core.config import load

    mine = _shaping(cfg)
    for ref in references():
        try:
            theirs = _shaping(load(list(ref.get("blocks", []))))
        except WMError:
            continue
        if theirs == mine:
            return ref
    return None


def _at(curve: dict[str, float], step: float) -> float | None:
    """A recorded curve at `step`: interpolated between its recorded steps, its last value past them, None before its
    first (the references of the docs' tables hold every 10th generation)."""
    pts = sorted((float(s), float(v)) for s, v in curve.items())
    if not pts or step < pts[0][0]:
        return None
    for (s0, v0), (s1, v1) in zip(pts, pts[1:], strict=False):
        if s0 <= step <= s1:
            return v0 + (v1 - v0) * (step - s0) / (s1 - s0)
    return pts[-1][1]


def _verdict(value: float, refs: list[float], lower_is_better: bool) -> str:
    lo, hi = min(refs), max(refs)
    tol = 1e-3 * max(1.0, abs(lo), abs(hi))  # the references are rounded to a tenth
    span = f"{lo:.4g}–{hi:.4g}" if len(refs) > 1 else f"{lo:.4g}"
    whose = "the recorded runs'" if len(refs) > 1 else "the recorded run's"
    if lo - tol <= value <= hi + tol:
        return f"within {whose} {span}"
    worse = (value > hi) if lower_is_better else (value < lo)
    side = "above" if value > hi else "below"
    tail = " (worse)" if worse else " (better)"
    return f"{side} every recorded run's {span}{tail}" if len(refs) > 1 else f"{side} {whose} {span}{tail}"


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


# standing() by the run's files as last read: the TUI asks every second, and the answer changes only when a metrics
# file, the evaluation or the config does
_STANDING: dict[tuple, tuple[dict[str, Any] | None, list[str]]] = {}


def standing(run: RunDir, cfg: Config | None = None) -> tuple[dict[str, Any] | None, list[str]]:
    """(the reference, one line per curve the run has reached and the final score): where `run` stands."""
    files = [run.config_path, run.eval_summary(), *(run.metrics_path(verb) for verb, _, _ in CURVES)]
    key = (str(run.path.resolve()), cfg.hash() if cfg is not None else None, *(_stamp(p) for p in files))
    if key not in _STANDING:
        if len(_STANDING) > 256:
            _STANDING.clear()
        _STANDING[key] = _standing(run, cfg)
    return _STANDING[key]


def _standing(run: RunDir, cfg: Config | None) -> tuple[dict[str, Any] | None, list[str]]:
    cfg = cfg or run.load_config()
    ref = match(cfg) if cfg is not None else None
    if ref is None:
        return None, []
    lines = []
    for verb, key, what in CURVES:
        recs = [r for r in read_jsonl(run.metrics_path(verb)) if key in r and "step" in r]
        if not recs:
            continue
        # C's population mean moves by ±50 from one generation to the next: its last 5 generations' mean is compared
        last = recs[-SMOOTH:] if key == "es/mean" else recs[-1:]
        step = sum(float(r["step"]) for r in last) / len(last)
        value = sum(float(r[key]) for r in last) / len(last)
        refs = [v for v in (_at(r.get("curves", {}).get(key, {}), step) for r in ref["runs"]) if v is not None]
        if not refs:
            continue
        unit = "generation" if verb == "train-controller" else "step"
        lower = key.endswith(("loss", "nll"))
        lines.append(f"{what} {value:.4g} at {unit} {step:.0f}: {_verdict(value, refs, lower)}")
    s = read_json_or(run.eval_summary())
    scores = [float(r["score"]) for r in ref["runs"] if r.get("score") is not None]
    if isinstance(s, dict) and "mean" in s and scores:
        mean = float(s["mean"])
        lines.append(f"score {mean:.1f} over {count(s.get('episodes', '?'), 'episode')}: {_verdict(mean, scores, False)}")
    return ref, lines


def band(ref: dict[str, Any], key: str) -> tuple[list[float], list[float], list[float]] | None:
    """The recorded runs' span of one curve, (steps, lowest, highest) at every step any of them recorded (each run
    interpolated there, as `standing` reads it), over the steps at least one run reaches; None without the curve."""
    curves = [c for c in (r.get("curves", {}).get(key) for r in ref.get("runs", [])) if c]
    steps = sorted({float(s) for c in curves for s in c})
    xs, lo, hi = [], [], []
    for step in steps:
        vals = [v for v in (_at(c, step) for c in curves) if v is not None]
        if vals:
            xs.append(step)
            lo.append(min(vals))
            hi.append(max(vals))
    return (xs, lo, hi) if xs else None


def describe(ref: dict[str, Any]) -> str:
    return f"{ref.get('name', '?')} version {ref.get('version', '?')}, {len(ref['runs'])} recorded runs"


def record(runs: list[str], name: str, blocks: list[str], version: str) -> dict[str, Any]:
    """A reference from finished runs of one preset: each run's `CURVES` by step and its evaluation's mean."""
    from wm.core.config import load

    want = _shaping(load(blocks))
    out = []
    for path in runs:
        run = RunDir(path)
        cfg = run.load_config()
        if cfg is None:
            raise WMError(f"{path}: not a run directory (no config.yaml)")
        if _shaping(cfg) != want:
            diff = sorted(k for k in want if _shaping(cfg).get(k) != want[k])
            raise WMError(f"{path} is not a run of --blocks {' '.join(blocks)}: it differs in {', '.join(diff[:4])}")
        curves: dict[str, dict[str, float]] = {}
        for verb, key, _ in CURVES:
            pts = {str(int(r["step"])): round(float(r[key]), 4) for r in read_jsonl(run.metrics_path(verb)) if key in r}
            if pts:
                curves[key] = pts
        s = read_json_or(run.eval_summary())
        score = float(s["mean"]) if isinstance(s, dict) and "mean" in s else None
        out.append({"label": f"seed {cfg.run.seed} ({run.path.name})", "curves": curves, "score": score})
    return {"name": name, "blocks": blocks, "version": version, "runs": out}


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", help="the run to place against its preset's recorded runs")
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    r = sub.add_parser("record", help="write a reference from finished runs of one preset version")
    r.add_argument("--runs", nargs="+", required=True, metavar="RUN")
    r.add_argument("--name", required=True, help='e.g. "carracing small"')
    r.add_argument("--blocks", nargs="+", required=True, help="the preset's --configs blocks, e.g. carracing small")
    r.add_argument("--version", required=True, help="the preset version the runs are of (docs/results/)")
    r.add_argument("--out", required=True, help="the reference file, e.g. wm/references/carracing-small.json")


def main(args: argparse.Namespace) -> int:
    if getattr(args, "action", None) == "record":
        doc = record(args.runs, args.name, args.blocks, args.version)
        atomic_write_json(args.out, doc)
        print(f"wrote {args.out}: {describe(doc)}")
        return 0
    if not args.run:
        raise WMError("name a run (--run RUN), or `record` a reference")
    run = RunDir(args.run)
    ref, lines = standing(run)
    if ref is None:
        names = ", ".join(r.get("name", "?") for r in references()) or "none"
        print(f"{run.path}: no recorded runs of its preset to compare with (references: {names})")
        return 0
    print(f"{run.path} against {describe(ref)}:")
    for line in lines or ["nothing to compare yet (no curve has reached a recorded step)"]:
        print(f"  {line}")
    return 0
