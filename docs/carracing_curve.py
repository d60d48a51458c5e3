"""Redraws a CarRacing run's learning curve beside the paper's, by episodes played (docs/results/carracing-small.md).

    python docs/carracing_curve.py --run runs/car_s0 --out docs/results/figures/carracing-small-s0-extended.png

The run's checks of the CMA mean (`es/eval_mean`: es.eval_episodes training-side tracks every es.eval_every
generations) and its population mean, against the paper's CMA mean over 1024 rollouts (docs/paper-settings.md §7:
822.9 at generation 25, 867.5 at 50, 880.4 at 200, 890.6 at 500, 896.4 at 1500, 900.46 at 1800, of 64 members × 16
tracks). The x axis is real episodes played by C's training (generations × population × tracks per member), the
budget both spent; log scale, as the paper's run is 300 times longer. Prints the points as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wm.core.bounded import read_jsonl  # noqa: E402
from wm.core.rundir import RunDir  # noqa: E402

PAPER = {25: 822.9, 50: 867.5, 200: 880.4, 500: 890.6, 1500: 896.4, 1800: 900.46}  # §7, 64 × 16 a generation
PAPER_EPISODES = 64 * 16


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--label", default="this run")
    args = p.parse_args()
    run = RunDir(args.run)
    cfg = run.load_config()
    per_gen = int(cfg.es.popsize) * int(cfg.es.trials)
    recs = read_jsonl(run.metrics_path("train-controller"))
    checks = sorted({int(r["step"]): float(r["es/eval_mean"]) for r in recs if "es/eval_mean" in r}.items())
    means = sorted({int(r["step"]): float(r["es/mean"]) for r in recs if "es/mean" in r}.items())
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    ax.plot([g * PAPER_EPISODES for g in PAPER], list(PAPER.values()), "o-", color="k", label="paper: CMA mean, 1024 rollouts")
    ax.plot(
        [g * per_gen for g, _ in means],
        [v for _, v in means],
        color="tab:blue",
        alpha=0.35,
        label=f"{args.label}: population mean",
    )
    ax.plot(
        [g * per_gen for g, _ in checks],
        [v for _, v in checks],
        "s-",
        color="tab:blue",
        label=f"{args.label}: CMA mean, {cfg.es.eval_episodes} tracks",
    )
    ax.axhline(900, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("real episodes played in C's training")
    ax.set_ylabel("score")
    ax.set_ylim(-100, 1000)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    doc = {
        "episodes_per_generation": per_gen,
        "checks": {str(g): v for g, v in checks},
        "paper": {str(g * PAPER_EPISODES): v for g, v in PAPER.items()},
    }
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
