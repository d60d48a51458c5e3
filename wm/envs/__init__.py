"""Environments in controller space: `make_env(cfg)` → 64×64×3 uint8 frames, Box(−1, 1, (A,)) actions.

`action_dim` and `m_action` are NumPy-only (no gymnasium import), so M, C and the dream env can use them cheaply.
`m_action` is the action M sees and episodes store: the post-processed one the env received (§1a, §6).

Besides the paper's two games, any gymnasium pixel env: `env.name: gym:<id>` (e.g. `gym:ALE/Boxing-v5`) with
`env.actions` saying its action space (`discrete:N`, `joystick:N` or `box:N`), `env.crop` the rows/columns kept
(`wm.envs.gym_env`). C outputs N tanh values: a discrete env takes their argmax and M sees it one-hot; a box env scales
them to its bounds and M sees them as they are. `joystick:N` is an Atari game's N joystick actions (UP, DOWNLEFTFIRE,
…) driven by 3 outputs, horizontal, vertical and fire, thresholded as Doom's (±1/3; fire > 0): M sees the thresholded
triple. Such names need the config, not just the name: pass `cfg` to `action_dim`/`action_post`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from wm.core.errors import WMError

if TYPE_CHECKING:  # annotations only: this module stays NumPy-only at import
    from wm.core.config import Config
    from wm.envs.base import FrameEnv

ENV_NAMES = ("doom_takecover", "carracing", "gym:<id>")
ACTION_KINDS = ("discrete", "joystick", "box")
JOYSTICK_THRESHOLD = 1.0 / 3.0  # a joystick axis is pushed past ±1/3 (the Doom mapping's thresholds)


def _name(env: str | Config) -> str:
    return env if isinstance(env, str) else env.env.name


def gym_actions(env: str | Config) -> tuple[str, int]:
    """`env.actions` of a gym env: (`discrete` | `box`, N)."""
    if isinstance(env, str):
        raise WMError(f"env.name {env!r}: a gym env's actions come from the config (env.actions), pass it")
    spec = env.env.actions
    kind, _, n = spec.partition(":")
    if kind not in ACTION_KINDS or not n.isdigit() or int(n) < 1:
        raise WMError(f"env.actions must be discrete:N, joystick:N or box:N for {env.env.name!r}, got {spec!r}")
    return kind, int(n)


def action_dim(env: str | Config) -> int:
    """Controller/M action size: 3 for carracing, 1 for doom_takecover, N of `env.actions` for a gym env."""
    name = _name(env)
    if name == "carracing":
        return 3
    if name == "doom_takecover":
        return 1
    if name.startswith("gym:") and len(name) > 4:
        kind, n = gym_actions(env)
        return 3 if kind == "joystick" else n
    raise WMError(f"unknown env.name {name!r} (expected one of {ENV_NAMES})")


def action_post(env: str | Config) -> str:
    """What turns C's tanh output into the action M sees: `car` (§6), `onehot` (a discrete gym env), `joystick` or
    `none`."""
    name = _name(env)
    action_dim(env)
    if name == "carracing":
        return "car"
    if name.startswith("gym:"):
        kind = gym_actions(env)[0]
        return {"discrete": "onehot", "joystick": "joystick"}.get(kind, "none")
    return "none"


def one_hot_argmax(a: np.ndarray) -> np.ndarray:
    """One-hot of the argmax over the last axis (a discrete env's action as M sees it)."""
    a = np.asarray(a, dtype=np.float32)
    return (np.arange(a.shape[-1]) == np.argmax(a, axis=-1)[..., None]).astype(np.float32)


def joystick_action(a: np.ndarray) -> np.ndarray:
    """C's (…, 3) tanh output → the joystick (…, 3): horizontal and vertical in {−1, 0, 1} (past ±1/3), fire ±1."""
    a = np.asarray(a, dtype=np.float32)
    axes = np.sign(a[..., :2]) * (np.abs(a[..., :2]) > JOYSTICK_THRESHOLD)
    return np.concatenate([axes, np.where(a[..., 2:3] > 0, 1.0, -1.0)], axis=-1).astype(np.float32)


def m_action(post: str, a: np.ndarray) -> np.ndarray:
    """The action M sees for controller output `a` (..., A), by `action_post`'s kind (`Setup.post`): car [steer, gas,
    brake] (§6); a discrete gym env's one-hot choice; a joystick env's thresholded triple; doom and box envs `a`
    unchanged (clipped to [−1, 1])."""
    return post_action(post, np.clip(np.asarray(a, dtype=np.float32), -1.0, 1.0))


def post_action(post: str, a: np.ndarray) -> np.ndarray:
    """C's tanh output `a` → what the env and M receive, by `action_post`'s kind (`none`: `a` unchanged)."""
    fn = {"car": car_action, "onehot": one_hot_argmax, "joystick": joystick_action}.get(post)
    return fn(a) if fn is not None else a


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
    if cfg.env.name == "carracing":
        from wm.envs.carracing import CarRacingEnv

        env = CarRacingEnv(cfg, keep_raw)
    elif cfg.env.name == "doom_takecover":
        from wm.envs.doom import DoomTakeCoverEnv

        env = DoomTakeCoverEnv(cfg, keep_raw)
    else:
        action_dim(cfg)  # a gym:<id> name with valid env.actions, or one clear line
        from wm.envs.gym_env import GymPixelEnv

        env = GymPixelEnv(cfg, keep_raw)
    env.pending_seed = seed
    return env
