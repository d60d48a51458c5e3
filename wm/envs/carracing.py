"""Gymnasium CarRacing-v3 behind the controller-space wrapper (paper_settings.md §1a, §6, §10.3).

The base env is built with `gymnasium.make(...).unwrapped`: no TimeLimit (the cap is ours, like the authors'
directly built `CarRacingWrapper`) and no order checks, so collection can keep stepping after termination
(`collect.ignore_done`, §1a). Gymnasium renders `state_pixels` off-screen with pygame: no display needed and no
`render()` call per step (the gym ≤ 0.10 bug of §10.2 does not exist here).
"""

from __future__ import annotations

import os

import numpy as np

from wm.config import Config
from wm.envs import car_action
from wm.envs.base import FrameEnv
from wm.envs.preprocess import CAR_CROP

ACTION_DIM = 3


class CarRacingEnv(FrameEnv):
    """CarRacing-v3 with 64×64 frames and the §6 action post-processing."""

    def __init__(self, cfg: Config, keep_raw: bool = False):
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # headless even if pygame ever opens a display
        import gymnasium as gym

        super().__init__(cfg, CAR_CROP, ACTION_DIM, keep_raw)
        self.inner = gym.make("CarRacing-v3").unwrapped

    def _reset_inner(self, seed: int | None) -> np.ndarray:
        obs, _ = self.inner.reset(seed=seed)
        return obs

    def _step_inner(self, a: np.ndarray) -> tuple[np.ndarray, float, bool, bool]:
        obs, reward, terminated, truncated, _ = self.inner.step(car_action(a).astype(np.float64))
        return obs, reward, terminated, truncated

    def close(self) -> None:
        self.inner.close()
