"""Any gymnasium env with a pixel screen as a world-models env: `env.name: gym:<id>`.

    --configs atari_boxing tiny                      # the Atari preset (configs/atari.yaml; needs ale-py)
    --set env.name=gym:CartPole-v1 env.actions=discrete:2 env.crop=[150,350,0,600]   # any other env

The frame is the env's observation when that is an RGB image (Atari), else `render()` in `rgb_array` mode
(classic control); `env.crop` keeps rows top:bottom and columns left:right (0 for bottom/right: to the edge), then
`env.preprocess` makes it 64×64 as for the paper's games. Actions come in controller space (tanh outputs):
`discrete:N` takes the argmax of C's N outputs (the episode stores it one-hot: what M sees), `box:N` scales them
from [−1, 1] to the space's bounds, `joystick:N` reads C's 3 outputs as an Atari joystick (horizontal, vertical, fire;
`wm.envs.joystick_action`) and plays the game's action of that name (a combination the game lacks plays the first it
has without FIRE, without one push, or one part alone; NOOP for none). `env.gym_kwargs` ("key=value") go to
`gymnasium.make` (Atari: frameskip, sticky actions).
Seeding is gymnasium's `reset(seed=...)`; the episode cap is `env.max_steps` (the registry's own TimeLimit stays).
"""

from __future__ import annotations

import importlib
import os

import numpy as np

from wm.core.config import Config
from wm.core.errors import WMError
from wm.envs import gym_actions, joystick_action
from wm.envs.base import FrameEnv


def gym_kwargs(items) -> dict:
    """`env.gym_kwargs` ["key=value", …] → {key: YAML value}; one clear line for an item without `=`."""
    from wm.core.bounded import parse_yaml

    out = {}
    for item in items or []:
        key, eq, value = str(item).partition("=")
        if not eq or not key.strip():
            raise WMError(f"env.gym_kwargs items are key=value, got {item!r}")
        out[key.strip()] = parse_yaml(value, f"env.gym_kwargs {key.strip()!r}")
    return out


# The environment variable naming the modules that register a user's own gymnasium envs (comma-separated), imported
# before `gymnasium.make`: `WM_GYM_MODULES=mypkg.envs python -m wm pipeline --set env.name=gym:MyEnv-v0 …`.
GYM_MODULES = "WM_GYM_MODULES"


def make_gym(env_id: str, kwargs: dict):
    """`gymnasium.make(env_id, render_mode="rgb_array", **kwargs)`, registering ale-py's envs for ALE/ ids."""
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    import gymnasium as gym

    for module in filter(None, (m.strip() for m in os.environ.get(GYM_MODULES, "").split(","))):
        # the user's own modules that register custom envs: named by their environment, never by a run's config
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise WMError(f"${GYM_MODULES} names {module!r}, which cannot be imported: {e}") from None
    if env_id.startswith("ALE/"):
        try:
            import ale_py
        except ImportError:
            raise WMError(f"env {env_id!r} needs ale-py (pip install ale-py)") from None
        gym.register_envs(ale_py)
    try:
        return gym.make(env_id, render_mode="rgb_array", **kwargs)
    except gym.error.Error as e:
        raise WMError(f"gymnasium cannot make {env_id!r}: {str(e).splitlines()[0]}") from None


def joystick_table(env, env_id: str) -> dict[tuple[int, int, int], int]:
    """(horizontal, vertical, fire) in {−1, 0, 1}² × {−1, 1} → the env's action index, from its action names (ALE's
    `get_action_meanings`): UP/DOWN, then LEFT/RIGHT, then FIRE, as ALE spells them (UPLEFTFIRE); NOOP for none."""
    meanings = getattr(env.unwrapped, "get_action_meanings", None)
    if meanings is None:
        raise WMError(f"env.actions joystick:N needs an env with Atari action names; {env_id} has none (use discrete:N)")
    index = {name: i for i, name in enumerate(meanings())}
    table = {}
    for h in (-1, 0, 1):
        for v in (-1, 0, 1):
            for f in (-1, 1):
                vert, horiz, fire = (
                    "UP" if v > 0 else "DOWN" if v < 0 else "",
                    "LEFT" if h < 0 else "RIGHT" if h > 0 else "",
                    "FIRE" if f > 0 else "",
                )
                # a combination the game lacks: the first it has without FIRE, without one push, or one part alone
                names = [vert + horiz + fire, vert + horiz, vert + fire, horiz + fire, vert, horiz, fire]
                table[(h, v, f)] = next((index[n] for n in names if n in index), index.get("NOOP", 0))
    return table


class GymPixelEnv(FrameEnv):
    """A gymnasium env behind the controller-space, 64×64-frame interface of the paper's games."""

    def __init__(self, cfg: Config, keep_raw: bool = False):
        self.kind, n = gym_actions(cfg)
        env_id = cfg.env.name[len("gym:") :]
        self.inner = make_gym(env_id, gym_kwargs(cfg.env.gym_kwargs))
        space = self.inner.action_space
        if self.kind in ("discrete", "joystick") and getattr(space, "n", None) != n:
            raise WMError(f"env.actions is {cfg.env.actions!r} but {env_id} has action space {space}")
        try:
            self.joystick = joystick_table(self.inner, env_id) if self.kind == "joystick" else {}
        except WMError:
            self.inner.close()
            raise
        if self.kind == "box" and tuple(getattr(space, "shape", ())) != (n,):
            raise WMError(f"env.actions is {cfg.env.actions!r} but {env_id} has action space {space}")
        self.low = np.asarray(getattr(space, "low", -1.0), np.float64)
        self.high = np.asarray(getattr(space, "high", 1.0), np.float64)
        obs_space = self.inner.observation_space
        self.pixels = len(getattr(obs_space, "shape", ())) == 3 and obs_space.shape[-1] == 3
        top, bottom, left, right = (int(v) for v in cfg.env.crop)
        super().__init__(cfg, (top, bottom or 10**6, left, right or 10**6), 3 if self.kind == "joystick" else n, keep_raw)

    def _frame(self, obs) -> np.ndarray:
        frame = obs if self.pixels else self.inner.render()
        return np.asarray(frame, dtype=np.uint8)

    def _reset_inner(self, seed: int | None) -> np.ndarray:
        obs, _ = self.inner.reset(seed=seed)
        return self._frame(obs)

    def env_action(self, a: np.ndarray):
        """Controller-space `a` (N,) → the inner env's action."""
        if self.kind == "discrete":
            return int(np.argmax(a))
        if self.kind == "joystick":
            return self.joystick[tuple(int(v) for v in joystick_action(a))]
        return (self.low + (np.asarray(a, np.float64) + 1.0) / 2.0 * (self.high - self.low)).astype(np.float32)

    def _step_inner(self, a: np.ndarray) -> tuple[np.ndarray, float, bool, bool]:
        obs, reward, terminated, truncated, _ = self.inner.step(self.env_action(a))
        return self._frame(obs), float(reward), bool(terminated), bool(truncated)

    def close(self) -> None:
        self.inner.close()
