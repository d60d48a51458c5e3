"""Gymnasium CarRacing-v3 behind the controller-space wrapper (docs/paper-settings.md §1a, §6, §10.3).

The base env is built with `gymnasium.make(...).unwrapped`: no TimeLimit (the cap is ours, like the authors'
directly built `CarRacingWrapper`) and no order checks, so collection can keep stepping after termination
(`collect.ignore_done`, §1a). Gymnasium renders `state_pixels` off-screen with pygame: no display needed and no
`render()` call per step (the gym ≤ 0.10 bug of §10.2 does not exist here).

`cfg.env.renderer` picks who draws the 96×96 `state_pixels`: `official` (gymnasium) or `fast`
(`wm.envs.car_render.FastCarRacing`, a subclass of gymnasium's class with the same physics and seeding that draws
straight at 2× the state resolution: ≈ 7× the steps/s, frames within half a grey level after preprocessing on
average). A training-time option: scores are measured with `official`.
"""

from __future__ import annotations

import os

import numpy as np

from wm.core.config import Config
from wm.envs import car_action
from wm.envs.base import FrameEnv
from wm.envs.preprocess import CAR_CROP, CAR_FULL

ACTION_DIM = 3
RENDERERS = ("official", "fast")


class CarRacingEnv(FrameEnv):
    """CarRacing-v3 with 64×64 frames and the §6 action post-processing."""

    def __init__(self, cfg: Config, keep_raw: bool = False):
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # headless even if pygame ever opens a display
        import gymnasium as gym

        renderer = str(cfg.env.renderer)  # one of RENDERERS (config.RULES)
        # the paper crops the indicator bar away (§1a); env.indicators keeps the whole 96×96 state (ctallec's frames)
        super().__init__(cfg, CAR_FULL if bool(cfg.env.indicators) else CAR_CROP, ACTION_DIM, keep_raw)
        self.renderer = renderer
        if renderer == "fast":
            from wm.envs.car_render import FastCarRacing

            self.inner = FastCarRacing(**gym.spec("CarRacing-v3").kwargs)  # the registry's arguments, unwrapped
        else:
            self.inner = gym.make("CarRacing-v3").unwrapped

    def _reset_inner(self, seed: int | None) -> np.ndarray:
        obs, _ = self.inner.reset(seed=seed)
        return obs

    def _step_inner(self, a: np.ndarray) -> tuple[np.ndarray, float, bool, bool]:
        obs, reward, terminated, truncated, _ = self.inner.step(car_action(a).astype(np.float64))
        return obs, reward, terminated, truncated

    def close(self) -> None:
        self.inner.close()
