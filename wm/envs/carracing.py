"""Gymnasium CarRacing-v3 behind the controller-space wrapper (docs/paper-settings.md §1a, §6, §10.3).

The base env is built with `gymnasium.make(...).unwrapped`: no TimeLimit (the cap is ours, like the authors'
directly built `CarRacingWrapper`) and no order checks, so collection can keep stepping after termination
(`collect.ignore_done`, §1a). Gymnasium renders `state_pixels` off-screen with pygame: no display needed and no
`render()` call per step (the gym ≤ 0.10 bug of §10.2 does not exist here).

`cfg.env.renderer` picks who draws the 96×96 `state_pixels`: `official` (gymnasium) or `fast`
(`wm.envs.car_render.FastCarRacing`, a subclass of gymnasium's class with the same physics and seeding that draws
straight at 2× the state resolution, after the first second from a per-track texture of the world: ≈ 8× the
steps/s, frames within half a grey level after preprocessing on average). A training-time option: scores are
measured with `official`.
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


class Drive:
    """How a CarRacing episode was driven, beside its score (docs/guide/evaluation.md): the share of the track's tiles
    visited, whether and when the lap was finished, how often the car left the track (every wheel off the tiles, from
    on them), its mean speed (the speed gauge's quantity, |v| of the hull) and its mean gas and brake. A slow car and
    a crashing one can score alike; these tell them apart. A few float operations a step (≈ 1 % of the env's)."""

    def __init__(self) -> None:
        self.steps = 0
        self.lap_steps = 0  # the step that finished the lap; 0: not finished
        self.exits = 0
        self.on_track = True
        self.speed = self.gas = self.brake = 0.0

    def step(self, car_env, action: np.ndarray, info: dict) -> None:
        self.steps += 1
        self.gas += float(action[1])
        self.brake += float(action[2])
        car = car_env.car
        vx, vy = car.hull.linearVelocity
        self.speed += float(np.hypot(vx, vy))
        on = any(len(w.tiles) > 0 for w in car.wheels)
        self.exits += int(self.on_track and not on)
        self.on_track = on
        if info.get("lap_finished") and not self.lap_steps:
            self.lap_steps = self.steps

    def figures(self, car_env) -> dict[str, float]:
        n = max(1, self.steps)
        track = len(getattr(car_env, "track", ()) or ()) or 1
        return {
            "tiles": round(float(car_env.tile_visited_count) / track, 4),
            "lap_steps": int(self.lap_steps),
            "off_track": int(self.exits),
            "speed": round(self.speed / n, 2),
            "gas": round(self.gas / n, 4),
            "brake": round(self.brake / n, 4),
        }


class CarRacingEnv(FrameEnv):
    """CarRacing-v3 with 64×64 frames and the §6 action post-processing."""

    def __init__(self, cfg: Config, keep_raw: bool = False):
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # headless even if pygame ever opens a display
        import gymnasium as gym

        renderer = cfg.env.renderer  # one of RENDERERS (config.RULES)
        # the paper crops the indicator bar away (§1a); env.indicators keeps the whole 96×96 state (ctallec's frames)
        super().__init__(cfg, CAR_FULL if cfg.env.indicators else CAR_CROP, ACTION_DIM, keep_raw)
        self.renderer = renderer
        self.drive = Drive()
        if renderer == "fast":
            from wm.envs.car_render import FastCarRacing

            self.inner = FastCarRacing(**gym.spec("CarRacing-v3").kwargs)  # the registry's arguments, unwrapped
        else:
            self.inner = gym.make("CarRacing-v3").unwrapped

    def _reset_inner(self, seed: int | None) -> np.ndarray:
        obs, _ = self.inner.reset(seed=seed)
        self.drive = Drive()
        return obs

    def _step_inner(self, a: np.ndarray) -> tuple[np.ndarray, float, bool, bool]:
        action = car_action(a).astype(np.float64)
        obs, reward, terminated, truncated, info = self.inner.step(action)
        self.drive.step(self.inner, action, info)
        return obs, reward, terminated, truncated

    def progress(self) -> int:
        return int(self.inner.tile_visited_count)

    def episode_figures(self) -> dict[str, float]:
        return self.drive.figures(self.inner)

    def close(self) -> None:
        self.inner.close()
