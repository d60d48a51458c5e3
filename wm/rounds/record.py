"""Round control's record, `rounds.json`: written as the rounds go (`write_rounds`), read back by everything that
asks which pass is the run's result (`round_checks`, `result_pass`)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from wm.core.atomic import atomic_write_json
from wm.core.bounded import read_json_or
from wm.core.config import Config
from wm.core.errors import WMError
from wm.core.rundir import RunDir, round_dirs
from wm.rounds.iterate import PassCheck, check_seeds, result_index
from wm.rounds.workclock import WorkLedger


def write_rounds(
    run: RunDir,
    cfg: Config,
    history: list[PassCheck],
    stopped: str | None,
    random: float = 0.0,
    minutes: float = 0.0,
    at: dict[str, float] | None = None,
    work: WorkLedger | None = None,
) -> dict:
    """`rounds.json`: every pass's check scores and the run's minutes when its check ended (`at`: what a rerun's
    time budget resumes from), which C is the run's result, why the rounds stopped, the minutes spent when written;
    with the work clock (`work`) also each pass's work minutes at its check and its units (wm.rounds.workclock)."""
    best = history[result_index(history)]
    at = at or {}
    ratio = cfg.iterate.exploit_ratio
    passes = [{**asdict(h), "exploits": h.exploits(ratio), "minutes": at.get(h.name)} for h in history]
    if work is not None:
        for p in passes:
            p |= {"work_minutes": work.marks.get(p["name"]), "work_units": work.units.get(p["name"])}
    doc = {
        "passes": passes,
        "random_check": random,
        "result": {"name": best.name, "path": best.path, "params": str(RunDir(best.path).params("best"))},
        "check_seeds": check_seeds(cfg),
        "final_check": cfg.iterate.final_check,
        "final_more": cfg.iterate.final_more,
        "stopped": stopped,
        "minutes": round(minutes, 2),
        "clock": cfg.iterate.clock,
        **({"work_minutes": round(work.total, 2)} if work is not None else {}),
    }
    atomic_write_json(run.rounds_path, doc)
    return doc


def round_checks(run: RunDir) -> dict[str, Any] | None:
    """Round control's record (`rounds.json`): each pass's real check and dream scores and the run's result."""
    doc = read_json_or(run.rounds_path)
    return doc if isinstance(doc, dict) and "passes" in doc and "result" in doc else None


def result_pass(base: RunDir, tag: str = "real") -> tuple[str, RunDir, str]:
    """(name, run dir, how it was chosen) of the pass whose C is the run's result: round control's choice
    (`rounds.json`, found by the pass's name, "first pass" or a `round<k>` folder of this run: the file is data, so a
    stored path never leads elsewhere), else the last round with an `eval/<tag>`, else the run itself."""
    checks = round_checks(base)
    if checks is not None:
        res = checks["result"]
        name = str(res.get("name", ""))
        if name == "first pass":
            where = base
        elif name[5:].isdigit() and name.startswith("round") and (base.path / name).is_dir():
            where = RunDir(base.path / name)
        else:
            raise WMError(f"{base.rounds_path} names a result pass {name!r} that is not a pass of this run")
        return name, where, f"round control ({base.rounds_path.name})"
    rounds = round_dirs(base.path)
    with_eval = [p for p in rounds if RunDir(p).eval_summary(tag).exists()]
    if with_eval:
        return with_eval[-1].name, RunDir(with_eval[-1]), f"last round with eval/{tag}"
    return ("first pass" if rounds else "single pass"), base, "the run itself"


def pass_name(base: RunDir, where: RunDir) -> str:
    """The name round control gives a pass of `base`: "first pass" for the run itself, else its round dir's name."""
    return "first pass" if where.path == base.path else where.path.name


def final_more_episodes(p: dict[str, Any], checks: dict[str, Any]) -> int | None:
    """The episodes a pass's final check is the mean of when `iterate.final_more` made them more than
    `final_check` (rounds.json's pass `p`); None otherwise."""
    n = p.get("final_episodes")
    return int(n) if n and n != checks.get("final_check") else None
