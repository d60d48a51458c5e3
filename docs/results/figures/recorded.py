"""Draw the results pages' figures of real runs from the figures those pages record, with the suite's own plotting
(`wm.tools.plots`, the code behind `report` and `results --plot`):

    .venv/bin/python docs/results/figures/recorded.py        # writes the PNGs beside this file

- `doom-small-s2-rounds.png`: seed 2's passes under round control (doom-small.md, version B): each pass's dream
  check beside its real check, 30 training-side episodes each, the random policy's check (206.4) as a line.
- `doom-tau-sweep.png`: one C per τ in seed 2's round-4 world, 100 episodes each in the dream and the game, the
  paper's points beside (tau-table.md).
- `doom-small-frozen-seeds.png`: the frozen recipe's seven seeds (doom-small.md, version C): each seed's mean with
  its bootstrap 95 % CI over 100 episodes and the random policy's mean on the same seeds.

The runs' own folders are not in the repository; these numbers are, in the tables the figures sit beside.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the checkout's wm, from anywhere

from wm.tools.paper import PAPER_DOOM  # noqa: E402
from wm.tools.plots import results_plot, rounds_plot, sweep_plot  # noqa: E402

# doom-small.md, version B, seed 2: (pass, dream check, real check)
ROUNDS = [
    ("first pass", 566.2, 177.3),
    ("round1", 326.0, 168.3),
    ("round2", 343.4, 168.2),
    ("round3", 503.3, 268.6),
    ("round4", 526.2, 776.3),
]
# tau-table.md: τ, (dream mean, std), (real mean, std), 100 episodes each
TAUS = [
    (0.1, (2100, 0), (162, 43)),
    (0.5, (1697, 599), (163, 43)),
    (1.0, (814, 590), (750, 490)),
    (1.15, (707, 426), (830, 475)),
    (1.3, (569, 409), (845, 524)),
]
# doom-small.md, version C: seed, mean, 95 % CI, the random policy's mean on the same evaluation seeds
FROZEN = [
    (3, 720.2, (639.0, 805.7), 213.6),
    (4, 853.1, (760.8, 949.9), 213.6),
    (5, 797.9, (697.5, 900.7), 212.1),
    (6, 678.5, (587.3, 773.4), 195.8),
    (8, 701.1, (613.8, 791.2), 208.6),
    (9, 767.5, (679.6, 860.8), 232.6),
    (10, 755.3, (644.3, 871.7), 217.5),
]


def main() -> None:
    passes = [{"name": n, "dream": d, "real": r} for n, d, r in ROUNDS]
    rounds_plot(HERE / "doom-small-s2-rounds.png", {"passes": passes, "result": {"name": "round4"}, "random_check": 206.4})
    rows = [{"temperature": t, "dream": {"mean": d[0], "std": d[1]}, "real": {"mean": r[0], "std": r[1]}} for t, d, r in TAUS]
    sweep_plot(HERE / "doom-tau-sweep.png", rows, PAPER_DOOM)
    runs = [
        {"run": f"doom-small-s{s}", "seed": s, "mean": m, "ci95": list(ci), "random": {"mean": rnd}, "frozen": True}
        for s, m, ci, rnd in FROZEN
    ]
    results_plot(HERE / "doom-small-frozen-seeds.png", {"tag": "real", "runs": runs})


if __name__ == "__main__":
    main()
