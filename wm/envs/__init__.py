"""Environments in controller space: `make_env(cfg)` → 64×64×3 uint8 frames, Box(−1, 1, (A,)) actions.

`action_dim` and `m_action` are NumPy-only (no gymnasium import), so M, C and the dream env can use them cheaply.
`m_action` is the action M sees and episodes store: the post-processed one the env received (§1a, §6).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from wm.errors import WMError

if TYPE_CHECKING:  # annotations only: this module stays NumPy-only at import
    from wm.config import Config
    from wm.envs.base import FrameEnv

ENV_NAMES = ("doom_takecover", "carracing")


def action_dim(env_name: str) -> int:
    """Controller/M action size: 3 for carracing, 1 for doom_takecover."""
    if env_name == "carracing":
        return 3
    if env_name == "doom_takecover":
        return 1
    raise WMError(f"unknown env.name {env_name!r} (expected one of {ENV_NAMES})")


def m_action(env_name: str, a: np.ndarray) -> np.ndarray:
    """The action M sees for controller output `a` (..., A): car [steer, gas, brake] (§6); doom `a` unchanged."""
    action_dim(env_name)
    a = np.clip(np.asarray(a, dtype=np.float32), -1.0, 1.0)
    return car_action(a) if env_name == "carracing" else a


def car_action(a: np.ndarray) -> np.ndarray:
    """Controller output → CarRacing action (§6): steer = a₀, gas = (a₁ + 1) / 2, brake = clip(a₂, 0, 1). Batched."""
    a = np.asarray(a, np.float32)
    out = a.copy()
    out[..., 1] = (a[..., 1] + 1.0) / 2.0
    out[..., 2] = np.clip(a[..., 2], 0.0, 1.0)
    return out


def make_env(cfg: Config, seed: int | None = None, keep_raw: bool = False) -> FrameEnv:
    """Build the env of `cfg.env.name` (headless); if `seed` is given, the first reset uses it.

    Args:
        cfg: the resolved Config (`env.name`, `env.preprocess`, `env.max_steps`, `env.doom_skill`, `env.frame_size`).
        seed: seed for the first `reset()` (later resets may pass their own `seed=`).
        keep_raw: put the raw screen (uint8 H×W×3) in `info["raw"]` at reset and every step.
    Returns:
        a gymnasium.Env with uint8 (64, 64, 3) observations and Box(−1, 1, (A,), float32) actions.
    """
    from wm.envs.preprocess import MODES

    if cfg.env.preprocess not in MODES:
        raise WMError(f"unknown env.preprocess {cfg.env.preprocess!r} (expected one of {MODES})")
    if cfg.env.name == "carracing":
        from wm.envs.carracing import CarRacingEnv

        env = CarRacingEnv(cfg, keep_raw)
    elif cfg.env.name == "doom_takecover":
        from wm.envs.doom import DoomTakeCoverEnv

        env = DoomTakeCoverEnv(cfg, keep_raw)
    else:
        action_dim(cfg.env.name)
        raise AssertionError
    env.pending_seed = seed
    return env
