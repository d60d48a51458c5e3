"""One record per env family (DoomTakeCover, CarRacing, any gymnasium pixel env): what the rest of the suite needs to
know about a game, computed once from `env.name` and passed down. Outside `wm.envs` nothing compares env names.

Import-cheap (NumPy only): the report, the pipeline's table, `play` and the config checks read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from wm.core.errors import WMError

if TYPE_CHECKING:
    from wm.core.config import Config


@dataclass(frozen=True)
class EnvFamily:
    """What a game is to the suite (docs/paper-settings.md §9 for the paper's scores)."""

    name: str  # doom_takecover | carracing | gym
    survival: bool  # a return is steps survived (+1 a step): M's dream pays it without a reward head
    score_label: str  # what a return is called in tables
    score_note: str  # the report's line under its scores ("" = none); `{max_steps}` is filled in
    keys: tuple[str, ...]  # the keys a human drives it with in `play` (() = not drivable)
    track_tiles: bool  # a training episode can end after es.no_progress_steps without a new track tile
    paper: Mapping[str, str] = field(default_factory=dict)  # the paper's scores by evaluation kind
    tau_table: bool = False  # the paper reports its dream and real scores per temperature (§9)
    renderers: tuple[str, ...] = ()  # env.renderer's choices (official first: every reported score uses it)
    steps_per_s: float = 30.0  # agent steps a second of game time: a recording plays in real time at this rate

    def key_action(self, keys: set[str] | frozenset[str]) -> np.ndarray:
        """The controller-space action (what C would output, tanh range) of the keys held.

        Doom: left → −1, right → +1, both or neither → 0 (the env's left / right / nothing at ±1/3).
        CarRacing: steer −1 / +1 / 0; gas 1 on `up` (else none: −1 → gas 0); brake 0.8 on `down` (else 0).
        """
        if not self.keys:
            raise WMError(f"{self.name} has no keyboard mapping: play drives DoomTakeCover and CarRacing")
        steer = float("right" in keys) - float("left" in keys)
        if "up" in self.keys:
            return np.array([steer, 1.0 if "up" in keys else -1.0, 0.8 if "down" in keys else 0.0], np.float32)
        return np.array([steer], np.float32)


DOOM = EnvFamily(
    name="doom_takecover",
    survival=True,
    score_label="steps survived",
    score_note=(
        "Doom scores are steps survived (+1 per tic, capped at env.max_steps = {max_steps}; the paper's cap is 2100); "
        "solved = mean > 750 over 100 trials."
    ),
    keys=("left", "right"),
    track_tiles=False,
    paper={
        "real": "1092 ± 556 (C trained at τ 1.15); released C: 973 ± 540 (`doomrnn/results.txt`)",
        "dream": "918 ± 546 (τ 1.15)",
        "random": "210 ± 108",
    },
    tau_table=True,
    steps_per_s=35.0,  # ViZDoom's 35 tics a second (§1b), no frame skip
)
CARRACING = EnvFamily(
    name="carracing",
    survival=False,
    score_label="return",
    score_note="",
    keys=("left", "right", "up", "down"),
    track_tiles=True,
    paper={"real": "906 ± 21 (full World Model, z and h)"},
    renderers=("official", "fast"),
    steps_per_s=50.0,  # gymnasium's CarRacing runs at 50 frames a second, one step a frame
)
# ALE's 60 Hz at v5's frameskip 4 (the Atari blocks'): another gym env's recording plays faster or slower than its game
GYM = EnvFamily(name="gym", survival=False, score_label="return", score_note="", keys=(), track_tiles=False, steps_per_s=15.0)


def family(env: str | Config) -> EnvFamily:
    """The record of `env.name` (a name, or a config holding one)."""
    name = env if isinstance(env, str) else env.env.name
    if name == DOOM.name:
        return DOOM
    if name == CARRACING.name:
        return CARRACING
    if name.startswith("gym:") and len(name) > 4:
        return GYM
    raise WMError(f"unknown env.name {name!r} (expected doom_takecover, carracing or gym:<id>)")
