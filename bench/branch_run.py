"""A finished run branched after its pass R, to continue under other round settings (issue 22): `python
bench/branch_run.py --run RUN --after R --out OUT`, then `python -m wm pipeline --run OUT --mpi N --set ...`.

OUT gets RUN's first pass and rounds 1..R (R = 0: the first pass alone): episodes, series and weights (`.npz`,
`.h5`) as hard links — no stage rewrites a finished file, new ones replace links by rename — and every other file
(configs, logs, metrics, evaluations, `rounds.json`, `pipeline_timings.jsonl`; not `clock.json`) as a real copy, so
appends and rewrites in OUT never reach RUN. `rounds.json` keeps only the passes copied, so round control resumes after pass R
with its recorded clock and the rounds from R + 1 on are built with OUT's settings (`iterate.learned_set`, …); the
pipeline skips every finished stage. The first new round collects exactly what RUN's round R + 1 collected (same
seeds, same C), so the two runs differ from there on by the settings alone. OUT keeps RUN's config: a setting RUN
was run with (e.g. its `iterate.learned_set`) goes on in OUT unless the continuing pipeline's `--set` undoes it
(`'iterate.learned_set=[]'`); the printed line lists RUN's round settings for that reason.

    .venv/bin/python bench/branch_run.py --run runs/s9f --after 2 --out runs/s9h
    .venv/bin/python -m wm pipeline --run runs/s9h --mpi 3 --demo \\
        --set 'iterate.learned_set=["mdnrnn.done_horizon=16", "dream.done_sampling=bernoulli"]'

`--without-evaluate` takes each kept pass's evaluate stage time off the clock `rounds.json` recorded (every pass's check
minutes, less the evaluate stages up to it; the run's minutes less all of them), so OUT's time budget resumes where a
run under `iterate.evaluate_passes: result` would have been: its passes' other stages are the same computations
(seeded), only the 100-episode evaluations, which decide nothing, are not in the clock. Continue it with
`--set iterate.evaluate_passes=result`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wm.iterate import round_dir  # noqa: E402
from wm.rundir import RunDir, atomic_write_json, round_dirs  # noqa: E402
from wm.stages.report import pass_stage_time, pipeline_timings  # noqa: E402

LINKED = (".npz", ".h5")  # large and never rewritten once their stage is DONE


def _copy_tree(src: Path, dst: Path, skip: set[Path]) -> None:
    dst.mkdir(parents=True)
    for e in sorted(src.iterdir()):
        if e in skip:
            continue
        if e.is_dir():
            _copy_tree(e, dst / e.name, skip)
        elif e.suffix in LINKED:
            os.link(e, dst / e.name)
        else:
            shutil.copy2(e, dst / e.name)


def evaluate_minutes(run: RunDir, names: list[str]) -> dict[str, float]:
    """{pass: minutes its evaluate stage took} for `run`'s passes `names` (the pipeline's timing, else the stage's metrics
    span: `wm.stages.report.pass_stage_time`); one line and exit when a pass has none."""
    timings = pipeline_timings(run)
    out = {}
    for name in names:
        k = 0 if name == "first pass" else int(name.removeprefix("round"))
        secs = pass_stage_time(RunDir(run.path / name) if k else run, "evaluate", timings, f"round {k}/" if k else "")
        if secs is None:
            raise SystemExit(f"error: {name} of {run.path} has no evaluate time (pipeline_timings.jsonl or its metrics)")
        out[name] = secs / 60
    return out


def branch(run: RunDir, after: int, out: Path, without_evaluate: bool = False) -> list[str]:
    """Branch `run` after pass `after` into `out`; returns the names of the passes kept. `without_evaluate`: their
    evaluate stages' minutes are taken off rounds.json's clock (the module's docstring)."""
    if out.exists():
        raise SystemExit(f"error: {out} exists; branch into a new directory")
    if not run.rounds_path.exists():
        raise SystemExit(f"error: {run.path} has no rounds.json (not a run under round control)")
    if after > 0 and not round_dir(run, after).path.is_dir():
        raise SystemExit(f"error: {run.path} has no round{after}")
    keep = ["first pass"] + [f"round{k}" for k in range(1, after + 1)]
    doc = json.loads(run.rounds_path.read_text())
    if not all(any(p["name"] == name for p in doc["passes"]) for name in keep):
        raise SystemExit(f"error: {run.rounds_path} has not checked every pass up to round{after}")
    spent = evaluate_minutes(run, keep) if without_evaluate else {}  # before anything is written
    # clock.json names the pass RUN was last working on: OUT reaching a pass of that name must not be credited its time
    later = {d for d in round_dirs(run.path) if int(d.name[5:]) > after} | {run.clock_path}
    tmp = out.with_name(out.name + ".tmp-branch")
    shutil.rmtree(tmp, ignore_errors=True)
    _copy_tree(run.path, tmp, later)
    doc["passes"] = [p for p in doc["passes"] if p["name"] in keep]
    doc["stopped"] = None
    if without_evaluate:
        off = 0.0
        for p in doc["passes"]:  # in the order they ran: each check ended after the evaluations before it
            off += spent[p["name"]]
            if p.get("minutes") is not None:
                p["minutes"] = float(p["minutes"]) - off
        if doc.get("minutes") is not None:
            doc["minutes"] = round(float(doc["minutes"]) - sum(spent.values()), 2)
    atomic_write_json(RunDir(tmp).rounds_path, doc)
    os.replace(tmp, out)  # whole or not at all
    return keep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="a finished run under round control")
    ap.add_argument("--after", type=int, required=True, help="the last pass kept: 0 = first pass, K = round K")
    ap.add_argument("--out", required=True, help="the new run directory (must not exist)")
    ap.add_argument(
        "--without-evaluate", action="store_true", help="take the kept passes' evaluate stage times off the recorded clock"
    )
    args = ap.parse_args()
    run = RunDir(args.run)
    kept = branch(run, args.after, Path(args.out), args.without_evaluate)
    it = run.load_config().iterate
    settings = {"iterate.set": list(it.set or []), "iterate.learned_set": list(it.learned_set or [])}
    print(json.dumps({"out": args.out, "passes": kept, "kept_settings": settings}))


if __name__ == "__main__":
    main()
