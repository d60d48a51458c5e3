"""The shared wrapper: controller-space Box(−1, 1) actions in, preprocessed 64×64×3 uint8 frames out.

Subclasses provide `_reset_inner(seed) -> raw` and `_step_inner(a) -> (raw, reward, terminated, truncated)`.
The step cap `cfg.env.max_steps` is counted here (truncation), because neither the authors' envs nor the
ViZDoom cfg carry the paper's cap (§1a, §10.4).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from wm.core.config import Config
from wm.envs.preprocess import Crop, preprocess


class FrameEnv(gym.Env):
    """Base wrapper; see the module docstring. `info["raw"]` holds the raw screen when `keep_raw`."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, cfg: Config, crop: Crop, action_dim: int, keep_raw: bool = False):
        self.size = cfg.env.frame_size
        self.mode = cfg.env.preprocess
        self.max_steps = cfg.env.max_steps
        self.crop = crop
        self.keep_raw = keep_raw
        self.render_mode = "rgb_array"
        self.observation_space = gym.spaces.Box(0, 255, (self.size, self.size, 3), np.uint8)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (action_dim,), np.float32)
        self._t = 0
        self._raw: np.ndarray | None = None
        self.pending_seed: int | None = None  # make_env(seed=...): used by the first reset without a seed

    # -- to implement
    def _reset_inner(self, seed: int | None) -> np.ndarray:
        raise NotImplementedError

    def progress(self) -> int:
        """How far along its course the episode has come, for a training budget that ends an episode making no
        progress (`es.no_progress_steps`): CarRacing's visited tiles; 0 for an env without a course."""
        return 0

    def episode_figures(self) -> dict[str, float]:
        """What the env measured of the episode so far beside its return (CarRacing: tiles, lap, speed, gas, brake),
        recorded per evaluation episode; {} for an env that measures nothing more."""
        return {}

    def _step_inner(self, a: np.ndarray) -> tuple[np.ndarray, float, bool, bool]:
        raise NotImplementedError

    # -- gymnasium API
    def _obs(self, raw: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        self._raw = raw
        info: dict[str, Any] = {"raw": raw.copy()} if self.keep_raw else {}
        return preprocess(raw, self.mode, self.crop, self.size), info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is None and self.pending_seed is not None:
            seed = self.pending_seed
        self.pending_seed = None
        super().reset(seed=seed)
        self._t = 0
        return self._obs(self._reset_inner(seed))

    def step(self, action):
        a = np.clip(np.asarray(action, dtype=np.float32).reshape(self.action_space.shape), -1.0, 1.0)
        raw, reward, terminated, truncated = self._step_inner(a)
        self._t += 1
        truncated = bool(truncated or self._t >= self.max_steps)
        obs, info = self._obs(raw)
        info["t"] = self._t
        return obs, float(reward), bool(terminated), truncated, info

    def render(self) -> np.ndarray | None:
        return self._raw
