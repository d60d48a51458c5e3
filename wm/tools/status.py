"""`python -m wm status --run runs/x`: each stage's state and key figures, read from the run directory only."""

from __future__ import annotations

import argparse
import re
from typing import Any

from wm.core.commands import missing_run
from wm.core.format import figures
from wm.core.metrics import last_record
from wm.core.registry import STAGES, stage
from wm.core.rundir import RunDir, round_dirs
from wm.rounds.iterate import evaluates_result_only
from wm.rounds.record import final_more_episodes, round_checks


def key_figures(run: RunDir, verb: str) -> dict[str, Any]:
    """Key figures of one stage (wm.core.registry): figures read from its files first, then the last metrics record."""
    st = stage(verb)
    out: dict[str, Any] = st.figures(run) if st.figures is not None else {}
    rec = last_record(run.metrics_path(verb)) or {}
    for k in st.key_figures:
        if k not in out and k in rec:
            out[k] = rec[k]
    return out


RESULT_ONLY = "result only"  # the state of a pass's evaluate that `iterate.evaluate_passes: result` leaves to the result


def result_only(run: RunDir) -> bool:
    """Whether `run`'s evaluate is left to the run's result (`iterate.evaluate_passes: result`): a pass of a run under
    round control (the run itself with rounds, or one of its rounds) whose C is trained and whose evaluate is neither
    done nor running. Its folder has started all the same: round control's checks are evaluations under it."""
    if run.state("evaluate") in ("done", "running") or not run.is_done("train-controller"):
        return False
    cfg = run.load_config()
    if cfg is None or not evaluates_result_only(cfg):
        return False
    return cfg.iterate.rounds > 0 or re.fullmatch(r"round\d+", run.path.name) is not None


def stage_rows(run: RunDir) -> list[tuple[str, str, dict[str, Any]]]:
    """(verb, state, key figures) per stage, in pipeline order; a pass's evaluate left to the run's result reads
    `RESULT_ONLY` instead of "not started"."""
    skipped = result_only(run)
    return [
        (s.verb, RESULT_ONLY if skipped and s.verb == "evaluate" else run.state(s.verb), key_figures(run, s.verb))
        for s in STAGES
    ]


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run directory")


def main(args: argparse.Namespace) -> int:
    run = RunDir(args.run)
    if not run.path.exists():
        raise missing_run(run.path)
    cfg = run.load_config()
    print(f"run {run.path}" + (f"  (env {cfg.env.name})" if cfg is not None else "  (no config.yaml yet)"))
    agent = _exported(run)
    if agent:
        print(f"  an exported agent ({agent}): V, M, C and the dream's starts, no episodes of its own")
    _print_rows(run, "  ")
    _print_standing(run, cfg)
    checks = round_checks(run)
    for child in round_dirs(run.path):
        print(f"  {child.name} (iterative training, {child})")
        _print_rows(RunDir(child), "    ")
    if checks:
        print(
            "  round control (iterate.check_episodes): real check / dream on the same seeds"
            + (f" / final check ({checks['final_check']} episodes)" if checks.get("final_check") else "")
        )
        if checks.get("random_check"):
            print(f"    {'random':<12} real {checks['random_check']:8.1f}")
        for p in checks["passes"]:
            mark = "  ← result" if p["name"] == checks["result"]["name"] else ""
            flag = "  exploits the dream" if p.get("exploits") else ""
            final = "" if p.get("final") is None else f"  final {p['final']:8.1f}"
            if n := final_more_episodes(p, checks):
                final += f" ({n} episodes)"
            print(f"    {p['name']:<12} real {p['real']:8.1f}  dream {p['dream']:8.1f}{final}{flag}{mark}")
        if checks.get("stopped"):
            print(f"    stopped: {checks['stopped']}")
        if checks.get("clock") == "work" and checks.get("work_minutes") is not None:
            wall = f" (wall clock: {checks['minutes']:.1f} min)" if checks.get("minutes") is not None else ""
            print(f"    budget clock: work, {checks['work_minutes']:.1f} work min at the last check{wall}")
    return 0


def _exported(run: RunDir) -> str:
    """Where an exported agent came from (`wm export`'s agent.json), or "" for a run. Its score is its own evaluation's,
    in the `evaluate` row: the one score of an agent (agent.json's, of the float32 weights it was trained with, stays
    in its AGENT.md)."""
    from wm.core.bounded import read_json_or

    info = read_json_or(run.path / "agent.json")
    if not isinstance(info, dict):
        return ""
    return f"{info.get('source', '?')}, {info.get('pass', '?')}"


def _print_standing(run: RunDir, cfg: Any) -> None:
    """Is the run on track? Its curves against its preset's recorded runs (`wm reference`), when there are some."""
    from wm.tools.reference import describe, standing

    ref, lines = standing(run, cfg)
    if ref is not None and lines:
        print(f"  against {describe(ref)} (wm reference):")
        for line in lines:
            print(f"    {line}")


def _print_rows(run: RunDir, indent: str) -> None:
    for verb, state, figs in stage_rows(run):
        fig = figures(figs)
        print(f"{indent}{verb:<17} {state:<12} {fig}".rstrip())
