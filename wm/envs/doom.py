"""ViZDoom `VizdoomTakeCover-v1` behind the controller-space wrapper (docs/paper-settings.md §1b, §10.4).

Skill: the registered env forwards extra `gymnasium.make` kwargs to `DoomGame.set_config` before the game is
initialised (init happens on the first reset), so `gymnasium.make("VizdoomTakeCover-v1", doom_skill=5)` sets
skill 5; `env.unwrapped.game.get_doom_skill()` reads 5 back (checked in tests/test_envs.py).
Measured on ViZDoom 1.3.2 (12–24 episodes each): a per-step uniform random policy lives 210 steps on average
at skill 4 vs 63 at skill 5; the §1b hold policy 336 (all > 100 frames) vs 89 (29 % > 100). The paper's random
baseline is 210 ± 108 and its data averaged ≈ 308 frames per kept episode (§0, §9), so today's skill 4 looks
like what PPQ's `set_doom_skill(5)` produced through doom_py; `cfg.env.doom_skill` chooses.

Also like PPQ: `episode_start_time = 14` tics (the ViZDoom cfg says 1). No frame skip, living reward +1 (same).
The cap (2100) is counted by the wrapper because the ViZDoom cfg has no `episode_timeout` (§10.4).
Actions: a < −1/3 → MOVE_LEFT, a > 1/3 → MOVE_RIGHT, else nothing (§1b); the Discrete(3) indices are looked up
in the env's own `button_map` (today 0 = none, 1 = RIGHT, 2 = LEFT) and checked by movement in the tests.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator

import numpy as np

from wm.core.config import Config
from wm.envs.base import FrameEnv
from wm.envs.preprocess import DOOM_CROP

ACTION_DIM = 1
THRESHOLD = 1.0 / 3.0  # PPQ mapping thresholds ±0.3333 (§1b)
EPISODE_START_TIME = 14  # PPQ DOOM_SETTINGS (§1b)
# one game's start at a time changes this process's working directory (`_in_folder`)
_CWD = threading.Lock()


@contextlib.contextmanager
def _in_folder(folder: str) -> Iterator[None]:
    """Run the block with `folder` as the working directory, then go back.

    ViZDoom's start writes `./_vizdoom/` and `./_vizdoom.ini` into the working directory (its paths, no setting
    moves the folder): each game starts in a fresh private folder instead, so `wm` leaves nothing where it is run
    and two games starting at once no longer race on one `_vizdoom/` (the loser printed "Failed to create
    ./_vizdoom/ directory: File exists" and segfaulted, 1 in 60 simultaneous starts). The paths the game uses after
    its start are absolute. Another thread of this process that opens a relative path during the start (≈ 0.3 s)
    finds an empty folder and fails, so a LOCK refresh or a progress line is skipped once, never misdirected."""
    with _CWD:
        back = os.getcwd()
        os.chdir(folder)
        try:
            yield
        finally:
            os.chdir(back)


def doom_choice(a: np.ndarray) -> np.ndarray:
    """Controller output → -1 (left) / 0 (none) / +1 (right), batched on (..., 1) or scalars."""
    a = np.asarray(a, dtype=np.float32)
    return np.where(a < -THRESHOLD, -1, np.where(a > THRESHOLD, 1, 0)).astype(np.int64)


class DoomTakeCoverEnv(FrameEnv):
    """VizdoomTakeCover-v1 with skill `cfg.env.doom_skill`, 64×64 frames and the ±1/3 action thresholds."""

    def __init__(self, cfg: Config, keep_raw: bool = False):
        import gymnasium as gym
        import vizdoom.gymnasium_wrapper  # noqa: F401  (registers the Vizdoom* ids)

        super().__init__(cfg, DOOM_CROP, ACTION_DIM, keep_raw)
        self.folder: str | None = None  # the game's private working folder, made at its start (the first reset)
        self.inner = gym.make(
            "VizdoomTakeCover-v1", doom_skill=cfg.env.doom_skill, episode_start_time=EPISODE_START_TIME
        ).unwrapped
        self.game = self.inner.game
        names = [b.name for b in self.game.get_available_buttons()]
        pressed = [tuple(names[i] for i in np.flatnonzero(v)) for v in self.inner.button_map]
        # index of each choice −1/0/+1 in the env's Discrete(3)
        self.index = {-1: pressed.index(("MOVE_LEFT",)), 0: pressed.index(()), 1: pressed.index(("MOVE_RIGHT",))}

    def _reset_inner(self, seed: int | None) -> np.ndarray:
        if self.game.is_running():
            obs, _ = self.inner.reset(seed=seed)
        else:  # the first reset starts the game (the wrapper's `init`): in a private folder
            self.folder = self.folder or tempfile.mkdtemp(prefix="wm-vizdoom-")
            with _in_folder(self.folder):
                obs, _ = self.inner.reset(seed=seed)
        return obs["screen"]

    def _step_inner(self, a: np.ndarray) -> tuple[np.ndarray, float, bool, bool]:
        choice = int(doom_choice(a[0]))
        obs, reward, terminated, truncated, _ = self.inner.step(self.index[choice])
        return obs["screen"], reward, terminated, truncated

    def close(self) -> None:
        self.inner.close()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
