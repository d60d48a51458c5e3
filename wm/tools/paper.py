"""The paper's DoomTakeCover temperature table (docs/paper-settings.md §9): the τ table's paper columns read it. Each
game's headline scores are in its record (`wm.envs.family`)."""

from __future__ import annotations

# §9, DoomTakeCover: τ → ((dream mean, std), (real mean, std)); C trained at τ, 100 rollouts each.
PAPER_DOOM: dict[float, tuple[tuple[float, float], tuple[float, float]]] = {
    0.10: ((2086, 140), (193, 58)),
    0.50: ((2060, 277), (196, 50)),
    1.00: ((1145, 690), (868, 511)),
    1.15: ((918, 546), (1092, 556)),
    1.30: ((732, 269), (753, 139)),
}


def paper_row(tau: float) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """The paper's (dream, real) scores at τ, or None when the paper has no row for it."""
    return next((v for k, v in PAPER_DOOM.items() if abs(k - tau) < 1e-6), None)
