"""The work clock against the wall clock on a finished round-control run (`iterate.clock`, wm.workclock): prints one
JSON object.

    .venv/bin/python bench/work_clock.py --run runs/s4e                 # the preset's prices (doom_takecover small)
    .venv/bin/python bench/work_clock.py --run runs/s4e --fit           # prices fitted from this run's stage times

For every pass: the wall-clock minutes `rounds.json` recorded at its check, the work minutes at the same point with
the prices of `--configs`/`--set` (or, with `--fit`, prices fitted by least squares from the run's own stage timings,
`pipeline_timings.jsonl`, so they describe the machine the run ran on), and their ratio. Then round control's stop
decision replayed after every pass with each clock (the same checks; `wm.iterate.stop_reason`): a work clock that
matches the machine's minutes stops the run where the wall clock stopped it. `--fit` prints the fitted prices as
`--set` arguments: fit them on the reference machine, never per machine (the point is that they are the same
everywhere). `--slower 1.25` replays the wall clock as a machine 1.25x slower would have run it (every pass's
minutes scaled; the same checks): where its stop differs from the work clock's, the wall clock would have given that
machine another result.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wm import config as C  # noqa: E402
from wm.iterate import PassCheck, stop_reason  # noqa: E402
from wm.rundir import RunDir  # noqa: E402
from wm.stages.report import pass_stage_time, pipeline_timings  # noqa: E402
from wm.status import round_checks  # noqa: E402
from wm.workclock import UNITS, seconds, stage_units  # noqa: E402


def passes(run: RunDir) -> tuple[dict, list[tuple[str, RunDir, RunDir | None, str]]]:
    """rounds.json and, per pass it checked: (name, its directory, the pass it extended, its timings prefix)."""
    doc = round_checks(run)
    if doc is None:
        raise SystemExit(f"error: {run.rounds_path} is missing or not round control's record")
    out, prev = [], None
    for p in doc["passes"]:
        name = p["name"]
        where = run if name == "first pass" else RunDir(run.path / name)
        out.append((name, where, prev, "" if name == "first pass" else f"round {name.removeprefix('round')}/"))
        prev = where
    return doc, out


def fit(rows: list[tuple[dict[str, float], float]]) -> dict[str, float]:
    """Non-negative least squares (seconds = Σ price × units) by dropping the most negative price until none is."""
    keys = [k for k in UNITS if any(u[k] > 0 for u, _ in rows)]
    while True:
        a = np.array([[u[k] for k in keys] for u, _ in rows])
        scale = a.max(axis=0)
        coef, *_ = np.linalg.lstsq(a / scale, np.array([s for _, s in rows]), rcond=None)
        coef = coef / scale
        if (coef >= 0).all():
            return {k: float(coef[keys.index(k)]) if k in keys else 0.0 for k in UNITS}
        keys.pop(int(np.argmin(coef)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True)
    ap.add_argument("--configs", nargs="+", default=["doom_takecover", "small"], help="where the prices come from")
    ap.add_argument("--set", nargs="*", default=[])
    ap.add_argument("--fit", action="store_true", help="fit the prices from the run's own stage timings")
    ap.add_argument(
        "--slower",
        type=float,
        default=1.0,
        help="replay the wall clock as on a machine this many times slower (every pass's minutes scaled)",
    )
    args = ap.parse_args()
    run = RunDir(args.run)
    doc, plist = passes(run)
    cfg = C.load(args.configs, args.set)
    timings = pipeline_timings(run)
    units, rows = {}, []
    wall_at = {p["name"]: p.get("minutes") for p in doc["passes"]}
    before = 0.0
    for name, where, prev, prefix in plist:
        stages = stage_units(where, prev, where.load_config() or cfg)
        units[name] = stages
        span = (wall_at[name] - before) * 60 if wall_at.get(name) is not None else None
        before = wall_at.get(name) or before
        timed = 0.0
        for stage, u in stages.items():
            if stage == "checks":
                continue
            t = pass_stage_time(where, stage, timings, prefix)
            if t is not None:
                rows.append((u, t))
                timed += t
        if span is not None and "checks" in stages:
            rows.append((stages["checks"], span - timed))  # the checks and the pipeline's own time between stages
    prices = fit(rows) if args.fit else {k: float(cfg.iterate.work[k]) for k in UNITS}
    work_total, out = 0.0, []
    for name, *_ in plist:
        mins = sum(seconds(u, prices) for u in units[name].values()) / 60
        work_total += mins
        wall = wall_at.get(name)
        ratio = wall and round(work_total / wall, 3)
        out.append({"pass": name, "wall_min": wall, "work_min": round(work_total, 2), "ratio": ratio})
    history = [PassCheck(p["name"], p["path"], float(p["real"]), float(p["dream"])) for p in doc["passes"]]
    random = float(doc.get("random_check", 0.0))
    run_cfg = C.update(run.load_config() or cfg, C.parse_set(args.set), source="--set")  # round control as replayed
    stops = {}
    k = float(args.slower)
    for clock, key in (("wall", "wall_min"), ("work", "work_min")):
        c = C.update(run_cfg, {"iterate.clock": clock})
        at = [float(p[key] or 0.0) * (k if clock == "wall" else 1.0) for p in out]
        for i in range(len(history)):
            last = at[i] - at[i - 1] if i else 0.0
            why = stop_reason(history[: i + 1], c, at[i], random, last)
            if why is not None:
                stops[clock] = {"after": history[i].name, "why": why}
                break
        else:
            stops[clock] = {"after": None, "why": "the recorded passes end before either clock stops"}
    print(
        json.dumps(
            {
                "run": str(run.path),
                "prices": {k: float(f"{v:.4g}") for k, v in prices.items()},
                "fitted": args.fit,
                "wall_slower": k,
                "passes": out,
                "stops": stops,
                "same_stop": stops["wall"]["after"] == stops["work"]["after"],
                **({"set": [f"iterate.work.{k}={v:.3g}" for k, v in prices.items()]} if args.fit else {}),
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
