"""How much round control's pick costs (issue 22): `python bench/pick_rules.py --runs RUN ...`.

For every pass of each finished run whose short check reached `iterate.target_ratio` × random, reads its check
means (`eval/final-check`, seeds 5000000…; `eval/final-check-b`, the next 100, played beforehand with
`python -m wm evaluate --run RUN/roundK --tag final-check-b --seed 5000100 --episodes 100 --gifs 0`) and its
evaluation score (`eval/real`), then scores each pick rule by the evaluation score of the C it keeps: the short
check alone (`best_pass`), the final check over the `final_passes` best or every learned pass, on 100 or 200 check
episodes (`final_candidates`, `result_index`, as the pipeline picks), and the best evaluation score (an oracle).
Prints one JSON object: per rule the mean over runs and each run's pick.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wm import config as C  # noqa: E402
from wm.evaluation import pooled_mean  # noqa: E402
from wm.export import score  # noqa: E402
from wm.iterate import PassCheck, best_pass, final_candidates, result_index  # noqa: E402
from wm.rundir import RunDir  # noqa: E402


def _mean(where: RunDir, tag: str | None) -> float | None:
    s = score(where, tag)
    return None if s is None else float(s["mean"])


def _final_check(where: RunDir) -> float | None:
    """The final check's mean over its 100 seeds: since the pipeline counts the short check's episodes as the first
    of them, a run's `eval/final-check` may hold only the seeds after the short check's."""
    f, c = score(where, "final-check"), score(where, "check")
    if f is None or c is None or f["seeds"][0] != c["seeds"][1] + 1:
        return None if f is None else float(f["mean"])
    return pooled_mean((c["episodes"], c["mean"]), (f["episodes"], f["mean"]))


def picks(run: RunDir) -> dict[str, tuple[str, float | None]]:
    doc = json.loads(run.rounds_path.read_text())
    cfg = run.load_config()
    random = float(doc["random_check"])
    history = [PassCheck(p["name"], p["path"], float(p["real"]), float(p["dream"])) for p in doc["passes"]]
    cfg = C.update(cfg, {"iterate.final_check": 100})  # runs from before the final check store 0
    learned = final_candidates(history, C.update(cfg, {"iterate.final_passes": len(history)}), random)
    top = final_candidates(history, cfg, random)
    where = {i: RunDir(Path(history[i].path)) for i in learned}
    fc100 = {i: _final_check(where[i]) for i in learned}
    fcb = {i: _mean(where[i], "final-check-b") for i in learned}
    fc200 = {i: None if fc100[i] is None or fcb[i] is None else (fc100[i] + fcb[i]) / 2 for i in learned}
    ev = {i: _mean(where[i], None) for i in learned}

    def rule(among: list[int], means: dict[int, float | None]) -> int:
        return result_index([replace(h, final=means.get(i) if i in among else None) for i, h in enumerate(history)])

    chosen = {
        "short check": best_pass(history),
        "final check 100, top passes": rule(top, fc100),
        "final check 100, every learned pass": rule(learned, fc100),
        "final check 200, top passes": rule(top, fc200),
        "final check 200, every learned pass": rule(learned, fc200),
        "oracle (best evaluation score)": rule(learned, ev),
    }
    return {k: (history[i].name, _mean(RunDir(Path(history[i].path)), None)) for k, i in chosen.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="+", required=True)
    args = ap.parse_args()
    per_run = {r: picks(RunDir(Path(r))) for r in args.runs}
    out = {}
    for k in next(iter(per_run.values())):
        scores = [p[k][1] for p in per_run.values() if p[k][1] is not None]
        out[k] = {"mean": sum(scores) / len(scores) if scores else None, "picks": {r: p[k] for r, p in per_run.items()}}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
