"""The dream as a gymnasium environment: `DreamGymEnv` (one dream) and `DreamVectorEnv` (N dreams on the batched
kernel), built from a run directory (its stored config, M's weights and `series/initial_z.npz`) or a loaded World.

    import gymnasium, wm.rollouts.gym_dream                      # the import registers "wm/Dream-v0"
    env = gymnasium.make("wm/Dream-v0", run="runs/doom")         # observe="z" | "zh" | "zch", temperature, max_steps
    envs = gymnasium.make_vec("wm/Dream-v0", num_envs=64, run="runs/doom")   # DreamVectorEnv

Both step `wm.rollouts.dream._Core`, the dream of `DreamEvaluator` (paper settings §5): the action (Box(−1, 1, (A,)),
the env's own action space) goes to M as it is, so CarRacing's post-processing of C's output (`Controller.postprocess`)
is the policy's job; the reward is +1 per step (a survival game) or M's reward head; `terminated` is M's done head,
`truncated` the step cap (`dream.max_steps`; an episode reaching the cap is truncated). Episode randomness is keyed by
an episode seed (counter-based, `wm.rollouts.dream`): `reset(seed=s)` plays episode seed s (the same episode as
`DreamEvaluator` on seed s), and `reset()` draws the next episode seed from the env's `np_random`, so a seeded reset
reproduces the episodes that follow it. Sub-env i of a vector env reset with seed s plays what a single env reset with
seed s + i plays (gymnasium's `SyncVectorEnv` convention), whatever N. Guide: docs/guide/dream-env.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import tensorflow as tf
from gymnasium import spaces
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from wm.core.errors import WMError
from wm.rollouts.dream import _Core, world_env
from wm.rollouts.rollout import nonfinite_flags, nonfinite_names
from wm.rollouts.world import World

ENV_ID = "wm/Dream-v0"
OBSERVE = {"z": ("z",), "zh": ("z", "h"), "zch": ("z", "c", "h")}  # what an observation holds, in order
SEED_HIGH = 2**62  # episode seeds drawn from np_random lie in [0, 2^62); a given seed may be any int in [0, 2^63)


def load_run_world(run: str | Path, need: tuple[str, ...] = ("mdnrnn", "initial_z")) -> World:
    """The World of a run directory from its stored config (`config.yaml`); one WMError line when it has none."""
    from wm.core.rundir import RunDir
    from wm.envs.setup import setup
    from wm.rollouts.world import load_world

    rd = RunDir(run)
    stored = rd.load_config()
    if stored is None:
        raise WMError(f"{rd.config_path} not found: {run} is not a run directory (the dream env reads its config)")
    return load_world(setup(stored), rd, need=need)


def _settings(world: World | None, run: str | Path | None, temperature, max_steps, observe: str, render: bool):
    """(world, τ, step cap, observed parts) of an env: a World or a run dir (exactly one), the config's `dream.*` by
    default."""
    if (world is None) == (run is None):
        raise WMError("a dream env needs a loaded World or run=<run dir>, exactly one")
    if observe not in OBSERVE:
        raise WMError(f"observe must be one of {', '.join(OBSERVE)}, got {observe!r}")
    if world is None:
        world = load_run_world(run, ("mdnrnn", "initial_z", "vae") if render else ("mdnrnn", "initial_z"))
    if world.mdnrnn is None or world.initial_mu is None:
        raise WMError("the dream env's World needs M and the initial z's (load_world need=('mdnrnn', 'initial_z'))")
    facts = world.setup
    if not facts.family.survival and not world.mdnrnn.predict_reward:
        raise WMError(
            f"{facts.env.name}: a dream without M's reward head pays +1 per step, a survival game's reward; train M with "
            "mdnrnn.predict_reward: true"
        )
    tau = float(facts.dream.temperature if temperature is None else temperature)
    cap = int(facts.dream.max_steps if max_steps is None else max_steps)
    if cap < 1 or not tau > 0:
        raise WMError(f"the dream env needs temperature > 0 and max_steps ≥ 1, got {tau} and {cap}")
    return world, tau, cap, OBSERVE[observe]


def _obs_space(world: World, parts: tuple[str, ...]) -> spaces.Box:
    m = world.mdnrnn
    dim = sum(m.z_dim if p == "z" else m.hidden for p in parts)
    return spaces.Box(-np.inf, np.inf, (dim,), np.float32)


def _act_space(world: World) -> spaces.Box:
    return spaces.Box(-1.0, 1.0, (int(world.mdnrnn.action_dim),), np.float32)


def _episode_seed(rng: np.random.Generator) -> int:
    return int(rng.integers(0, SEED_HIGH))


def _given_seed(seed: int) -> int:
    if not 0 <= int(seed) < 2**63:
        raise WMError(f"a dream seed must lie in [0, 2^63), got {seed}")
    return int(seed)


class DreamGymEnv(gymnasium.Env):
    """One dream episode of M (a gymnasium.Env on `DreamEnv`'s step function).

    Args:
        world: a loaded World (M, initial z's, config), or None with `run`.
        run: a run directory instead of a World (what `gymnasium.make("wm/Dream-v0", run=...)` passes).
        temperature, max_steps: the dream's τ and step cap (default the config's `dream.temperature`, `dream.max_steps`).
        observe: "z" (z_dim,), "zh" (z_dim + hidden,: M's LSTM output h) or "zch" (z, cell state c, h: Doom's C input).
        render_mode: None or "rgb_array" (V's decoding of z, uint8 64×64×3; needs V: the run's VAE weights).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(
        self,
        world: World | None = None,
        *,
        run: str | Path | None = None,
        temperature: float | None = None,
        max_steps: int | None = None,
        observe: str = "z",
        render_mode: str | None = None,
    ):
        if render_mode not in (None, "rgb_array"):
            raise WMError(f"render_mode must be None or rgb_array, got {render_mode!r}")
        world, tau, cap, self.parts = _settings(world, run, temperature, max_steps, observe, render_mode is not None)
        if render_mode is not None and world.vae is None:
            raise WMError("render_mode rgb_array decodes z with V: the World needs it (load_world need=(..., 'vae'))")
        self.world, self.render_mode, self.observe = world, render_mode, observe
        self.dream = world_env(world, temperature=tau, max_steps=cap)
        self.temperature, self.max_steps = tau, cap
        self.observation_space, self.action_space = _obs_space(world, self.parts), _act_space(world)
        self.episode_seed: int | None = None
        self._decode = None if world.vae is None else tf.function(lambda z: world.vae.decode(z), autograph=False)

    @classmethod
    def from_run(
        cls,
        run_dir: str | Path,
        temperature: float | None = None,
        max_steps: int | None = None,
        observe: str = "z",
        render_mode: str | None = None,
    ) -> DreamGymEnv:
        """The dream of a run directory: its stored config, M's weights and initial z's (and V to render)."""
        return cls(run=run_dir, temperature=temperature, max_steps=max_steps, observe=observe, render_mode=render_mode)

    def _obs(self) -> np.ndarray:
        z, c, h = self.dream.state
        parts = {"z": z, "c": c, "h": h}
        return np.concatenate([parts[p].numpy()[0] for p in self.parts]).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Episode seed `seed`, or one drawn from `np_random` (seeded by the last seeded reset) without one."""
        super().reset(seed=seed)
        self.episode_seed = _episode_seed(self.np_random) if seed is None else _given_seed(seed)
        self.dream.reset(seed=self.episode_seed)
        return self._obs(), {"seed": self.episode_seed, "t": 0}

    def step(self, action):
        if self.episode_seed is None:
            raise RuntimeError("call reset() before step()")
        a = np.asarray(action, np.float32).reshape(-1)
        if a.shape != self.action_space.shape:
            raise WMError(f"the dream's action has shape {self.action_space.shape}, got {np.shape(action)}")
        _, reward, terminated, truncated, info = self.dream.step(a)  # a non-finite state: one WMError line
        return self._obs(), reward, terminated, truncated, {"seed": self.episode_seed, "t": info["t"]}

    def render(self):
        if self.render_mode is None or self.episode_seed is None:
            return None
        frame = self._decode(self.dream.state[0]).numpy()[0]
        return np.clip(np.rint(frame * 255.0), 0, 255).astype(np.uint8)


class DreamVectorEnv(VectorEnv):
    """N dream episodes stepped together on the batched kernel: one compiled graph a step for the whole batch.

    Sub-env i keeps its own seed generator and episode seed, so its episodes are those of a `DreamGymEnv` seeded the
    same way (counter-based randomness: an episode depends on its seed only, not on the batch). A finished sub-env is
    reset by `autoreset_mode`: `NEXT_STEP` (gymnasium's default: the next `step` ignores its action and returns its first
    observation, reward 0) or `SAME_STEP` (the step that ends it returns the next episode's first observation, the last
    one in `info["final_obs"]`). Arguments as `DreamGymEnv`'s, plus `num_envs`; no rendering.
    """

    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        world: World | None = None,
        num_envs: int = 1,
        *,
        run: str | Path | None = None,
        temperature: float | None = None,
        max_steps: int | None = None,
        observe: str = "z",
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
    ):
        world, tau, cap, self.parts = _settings(world, run, temperature, max_steps, observe, False)
        mode = AutoresetMode(autoreset_mode)
        if mode == AutoresetMode.DISABLED:
            raise WMError("DreamVectorEnv resets finished dreams itself: autoreset_mode NextStep or SameStep")
        if int(num_envs) < 1:
            raise WMError(f"num_envs must be ≥ 1, got {num_envs}")
        self.world, self.observe, self.num_envs, self.autoreset_mode = world, observe, int(num_envs), mode
        self.metadata = {**type(self).metadata, "autoreset_mode": mode}
        self.core = _Core(
            world.mdnrnn,
            world.controller,
            world.initial_mu,
            world.initial_logvar,
            tau,
            cap,
            **world.setup.dream.done_options(),
        )
        self.temperature, self.max_steps = tau, cap
        self.single_observation_space, self.single_action_space = _obs_space(world, self.parts), _act_space(world)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._start = tf.function(lambda s: (self.core.reset(s), self.core.masks(s)), autograph=False)
        self._kernel = tf.function(self._graph, autograph=False)
        self._rngs: list[np.random.Generator | None] = [None] * self.num_envs
        self._state = None  # (seeds, t, z, c, h, mz, mh) tensors of the batch
        self._ended = np.zeros(self.num_envs, bool)  # NEXT_STEP: reset on the next step

    @classmethod
    def from_run(cls, run_dir: str | Path, num_envs: int, **kwargs: Any) -> DreamVectorEnv:
        """N dreams of a run directory (keywords as the constructor's)."""
        return cls(num_envs=num_envs, run=run_dir, **kwargs)

    def _graph(self, seeds, t, z, c, h, mz, mh, action, fresh, new_seeds):
        """One step of every sub-env; those `fresh` start episode `new_seeds` instead (their action is ignored)."""
        core = self.core
        z1, c1, h1, done, a, r = core.step(None, seeds, t, z, c, h, action=action, masks=(mz, mh))
        bits = nonfinite_flags(a, z1, h1) * tf.cast(tf.logical_not(fresh), tf.int32)
        (z0, c0, h0), (m0z, m0h) = core.reset(new_seeds), core.masks(new_seeds)
        col = fresh[:, None]
        state = [tf.where(col, new, old) for new, old in ((z0, z1), (c0, c1), (h0, h1), (m0z, mz), (m0h, mh))]
        cap = t + 1 >= core.max_steps
        live = tf.logical_not(fresh)
        truncated = tf.logical_and(cap, live)
        terminated = tf.logical_and(tf.logical_and(done, tf.logical_not(cap)), live)
        seeds = tf.where(fresh, new_seeds, seeds)
        t = tf.where(fresh, tf.zeros_like(t), t + 1)
        return (seeds, t, *state), tf.where(fresh, 0.0, r), terminated, truncated, bits

    def _obs(self, state) -> np.ndarray:
        parts = {"z": state[2], "c": state[3], "h": state[4]}
        return np.concatenate([parts[p].numpy() for p in self.parts], axis=1).astype(np.float32)

    def _info(self, state) -> dict[str, Any]:
        n = self.num_envs
        return {"seed": state[0].numpy(), "_seed": np.ones(n, bool), "t": state[1].numpy(), "_t": np.ones(n, bool)}

    def _next_seeds(self, which: np.ndarray, seeds: np.ndarray) -> np.ndarray:
        """`seeds` with sub-env i's next episode seed (drawn from its generator) where `which`."""
        out = seeds.copy()
        for i in np.flatnonzero(which):
            if self._rngs[i] is None:
                self._rngs[i] = seeding.np_random()[0]
            out[i] = _episode_seed(self._rngs[i])
        return out

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        """Seeds: None (sub-envs draw their next episode seeds), an int s (sub-env i plays s + i) or one per sub-env."""
        n = self.num_envs
        if seed is None or isinstance(seed, (int, np.integer)):
            super().reset(seed=None if seed is None else int(seed))
            seed = [None] * n if seed is None else [int(seed) + i for i in range(n)]
        if len(seed) != n:
            raise WMError(f"reset: {len(seed)} seeds for {n} sub-envs")
        seeds = np.zeros(n, np.int64)
        for i, s in enumerate(seed):
            if s is not None:
                self._rngs[i] = seeding.np_random(_given_seed(s))[0]
                seeds[i] = int(s)
        seeds = self._next_seeds(np.array([s is None for s in seed]), seeds)
        (z, c, h), (mz, mh) = self._start(tf.constant(seeds))
        self._state = (tf.constant(seeds), tf.zeros(n, tf.int64), z, c, h, mz, mh)
        self._ended[:] = False
        return self._obs(self._state), self._info(self._state)

    def step(self, actions):
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        a = np.asarray(actions, np.float32)
        if a.shape != self.action_space.shape:
            raise WMError(f"the dreams' actions have shape {self.action_space.shape}, got {a.shape}")
        seeds = self._state[0].numpy()
        fresh = self._ended.copy()  # NEXT_STEP: last step's finished episodes start again now
        new_seeds = self._next_seeds(fresh, seeds)
        state, r, term, trunc, bits = self._kernel(*self._state, tf.constant(a), tf.constant(fresh), tf.constant(new_seeds))
        bits = bits.numpy()
        if bits.any():
            i = int(np.flatnonzero(bits)[0])
            raise WMError(
                f"dream: non-finite {nonfinite_names(bits[i])} at step {int(self._state[1].numpy()[i])} of sub-env "
                f"{i}, seed {seeds[i]}; check M's weights and the actions"
            )
        term, trunc = term.numpy(), trunc.numpy()
        ended = term | trunc
        obs, info = self._obs(state), self._info(state)
        if self.autoreset_mode == AutoresetMode.SAME_STEP and ended.any():
            final = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(ended):
                final[i] = obs[i].copy()
            info |= {"final_obs": final, "_final_obs": ended.copy(), "final_info": info.copy(), "_final_info": ended}
            new_seeds = self._next_seeds(ended, state[0].numpy())
            (z0, c0, h0), (m0z, m0h) = self._start(tf.constant(new_seeds))
            col = tf.constant(ended)[:, None]
            kept = [tf.where(col, new, old) for new, old in zip((z0, c0, h0, m0z, m0h), state[2:], strict=True)]
            t = tf.where(tf.constant(ended), tf.zeros_like(state[1]), state[1])
            state = (tf.constant(new_seeds), t, *kept)
            obs, info = self._obs(state), info | {"seed": new_seeds, "t": t.numpy()}
            ended = np.zeros_like(ended)
        self._state, self._ended = state, ended
        return obs, r.numpy().astype(np.float64), term, trunc, info


def _make_vector(num_envs: int = 1, **kwargs: Any) -> DreamVectorEnv:
    """`gymnasium.make_vec("wm/Dream-v0", num_envs=N, run=...)`'s entry point."""
    kwargs.pop("max_episode_steps", None)  # the step cap is `max_steps`
    return DreamVectorEnv(num_envs=num_envs, **kwargs)


if ENV_ID not in gymnasium.registry:
    gymnasium.register(
        ENV_ID,
        entry_point="wm.rollouts.gym_dream:DreamGymEnv",
        vector_entry_point="wm.rollouts.gym_dream:_make_vector",
    )
