"""Seed spaces: no evaluation episode is ever a training episode.

Evaluation seeds (`evaluate.seed + i`, round control's check seeds `iterate.check_seed + i`) must lie below
`TRAINING_FLOOR`; every seed used in training (collect's env seeds, CMA-ES's episode seeds, the seeds of its
evaluations of the mean) is drawn in [TRAINING_FLOOR, SEED_HIGH). Both gymnasium and ViZDoom take any
non-negative int32.
"""

from __future__ import annotations

from wm.core.errors import WMError

SEED_HIGH = 2**31 - 1
TRAINING_FLOOR = 2**24


def training_seed(x: int) -> int:
    """Map any non-negative integer into the training seed space [TRAINING_FLOOR, SEED_HIGH)."""
    return TRAINING_FLOOR + int(x) % (SEED_HIGH - TRAINING_FLOOR)


def evaluation_seeds(first: int, n: int, what: str) -> list[int]:
    """`first + i` for i < n, refused when they leave the evaluation seed space [0, TRAINING_FLOOR)."""
    first, n = int(first), int(n)
    if first < 0 or first + n > TRAINING_FLOOR:
        raise WMError(f"{what}: seeds {first}…{first + n - 1} must lie in [0, {TRAINING_FLOOR}), below every training seed")
    return [first + i for i in range(n)]
