"""`python -m wm status --run runs/x`: each stage's state and key figures, read from the run directory only."""

from __future__ import annotations

import argparse
import json
from typing import Any

from wm.errors import WMError
from wm.metrics import last_record
from wm.rundir import STAGES, RunDir, round_dirs

# Metric keys shown as a stage's key figures (the last record of metrics/<stage>.jsonl that has them).
KEY_FIGURES: dict[str, tuple[str, ...]] = {
    "collect": ("collect/episodes", "collect/frames"),
    "vae": ("vae/epoch", "vae/loss", "vae/val_loss"),
    "encode": ("encode/episodes",),
    "mdnrnn": ("mdnrnn/step", "mdnrnn/nll", "mdnrnn/done_loss"),
    "controller": ("es/generation", "es/mean", "es/best", "es/eval_best"),
    "eval": ("eval/episodes", "eval/mean", "eval/std"),
}


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else f"{v:.4g}"
    return str(v)


def key_figures(run: RunDir, verb: str) -> dict[str, Any]:
    """Key figures of one stage: summary files first, then the last metrics record."""
    from wm.rundir import stage

    st = stage(verb)
    out: dict[str, Any] = {}
    if st.name == "collect":
        folder = run.stage_dir(verb)
        if folder.exists():
            out["collect/episodes"] = sum(1 for p in folder.iterdir() if p.name.startswith("ep_") and p.suffix == ".npz")
    if st.name == "encode":
        folder = run.stage_dir(verb)
        if folder.exists():
            out["encode/episodes"] = sum(1 for p in folder.iterdir() if p.name.startswith("ep_") and p.suffix == ".npz")
    if st.name == "eval":
        summary = run.stage_dir(verb) / "summary.json"
        if summary.exists():
            s = json.loads(summary.read_text())
            out.update({f"eval/{k}": s[k] for k in ("episodes", "mean", "std") if k in s})
    rec = last_record(run.metrics_path(verb)) or {}
    for k in KEY_FIGURES[st.name]:
        if k not in out and k in rec:
            out[k] = rec[k]
    return out


def stage_rows(run: RunDir) -> list[tuple[str, str, dict[str, Any]]]:
    """(verb, state, key figures) per stage, in pipeline order."""
    return [(s.verb, run.state(s.verb), key_figures(run, s.verb)) for s in STAGES]


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run directory")


def main(args: argparse.Namespace) -> int:
    run = RunDir(args.run)
    if not run.path.exists():
        raise WMError(f"run directory {run.path} does not exist")
    cfg = run.load_config()
    print(f"run {run.path}" + (f"  (env {cfg.env.name})" if cfg is not None else "  (no config.yaml yet)"))
    _print_rows(run, "  ")
    for child in round_dirs(run.path):
        print(f"  {child.name} (iterative training, {child})")
        _print_rows(RunDir(child), "    ")
    return 0


def _print_rows(run: RunDir, indent: str) -> None:
    for verb, state, figs in stage_rows(run):
        fig = "  ".join(f"{k.split('/', 1)[1]} {_fmt(v)}" for k, v in figs.items())
        print(f"{indent}{verb:<17} {state:<12} {fig}".rstrip())
