"""The trained agent (V + M + C of a finished run) as a data policy: `collect.policy: agent` (paper §5, iterative).

The paper's iterative training procedure rolls the current controller out in the real env, adds those episodes
to the data and retrains M (and C) on them, so M learns the states C actually reaches; a C trained on random
data alone finds states M has never seen and exploits them (in DoomTakeCover: walking into a wall, where M
predicts no death). This module is the rollout half: one env step is one compiled batch-1 graph that encodes
the frame with V, samples z = μ + σ·ε (ε from the episode's generator), asks C, and steps M with the action
actually applied — `wm.rollouts.rollout.agent_step`, the same step the real-env evaluation uses.

Exploration (`collect.explore`): the episode is cut into hold segments of U{hold_min..hold_max} steps; each
segment, with probability `explore`, applies a uniform random action held for the segment (the `hold` data
policy) instead of C's. M always receives the applied action, so the data stays consistent.

The source run is `collect.agent_run` (a path, relative to the collecting run's directory): its V, M and best C
(`wm.rollouts.world.load_world`), built with the source run's own config (model sizes and heads), the collecting run's
when it has none. The models load once per collect worker (`AgentModels`, part of the worker's context).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from wm.core.errors import WMError
from wm.core.rundir import RunDir
from wm.rollouts.rollout import nonfinite_names

if TYPE_CHECKING:  # annotations only
    from wm.envs.setup import Setup


def agent_source(raw: str, run_dir: Path | str | None) -> Path:
    """`collect.agent_run` (`raw`) as a path: relative paths are taken from the collecting run's directory."""
    if not raw:
        raise WMError("collect.policy is agent but collect.agent_run is empty (the run whose V, M and C act)")
    p = Path(raw)
    return p if p.is_absolute() else Path(run_dir or ".") / p


def check_agent_run(source: Path) -> None:
    """One clear line when the source run lacks a finished V, M or C."""
    if not source.is_dir():
        raise WMError(f"collect.agent_run: {source} is not a run directory")
    run = RunDir(source)
    for what, path in (("vae", run.vae_weights), ("mdnrnn", run.mdnrnn_weights), ("params", run.params("best"))):
        if not path.exists():
            raise WMError(f"collect.agent_run: {path} missing (the agent's {what}; finish that run's stages first)")


class AgentModels:
    """V + M + C of a finished run as one compiled batch-1 step; loaded once per collect worker (its context)."""

    def __init__(self, fallback: Setup, source: Path):
        from wm.core import tf_setup
        from wm.envs.setup import setup
        from wm.rollouts.world import load_world

        tf_setup.setup(threads=1, gpu=False)  # one per collect worker: one env, batch-1 graph
        src = RunDir(source)
        # the models as the source run trained them (a round may give its own M other heads: the CarRacing dream);
        # `fallback`, the collecting run's setup, when the source has no config
        own = src.load_config()
        facts = fallback if own is None else setup(own)
        self._build(load_world(facts, src, need=("vae", "mdnrnn", "params"), params=src.params("best")))

    @classmethod
    def from_world(cls, world) -> AgentModels:
        """The compiled step over a world already loaded (V, M and params; `wm play --real --agent`)."""
        models = cls.__new__(cls)
        models._build(world)
        return models

    def _build(self, world) -> None:
        import tensorflow as tf

        from wm.rollouts.rollout import agent_step, nonfinite_flags

        vae, m, ctrl = world.vae, world.mdnrnn, world.controller
        A = ctrl.action_dim
        params_t = tf.constant(world.params.reshape(1, -1))

        @tf.function(
            input_signature=[
                tf.TensorSpec((1, 64, 64, 3), tf.uint8),
                tf.TensorSpec((1, m.z_dim), tf.float32),
                tf.TensorSpec((1, m.hidden), tf.float32),
                tf.TensorSpec((1, m.hidden), tf.float32),
                tf.TensorSpec((1,), tf.float32),
                tf.TensorSpec((1, A), tf.float32),
                tf.TensorSpec((), tf.bool),
            ],
            autograph=False,
        )
        def step(obs, eps, c, h, fresh, override, use_override):
            a, z, c, h = agent_step(vae, m, ctrl, obs, eps, c, h, params_t, fresh, override, use_override)
            return a, c, h, nonfinite_flags(a, z, h)

        self.step, self.z_dim, self.hidden, self.action_dim = step, m.z_dim, m.hidden, A


class AgentPolicy:
    """`act(obs)` / `reset()` like the data policies, driven by a trained run's V, M and C (module docstring)."""

    def __init__(self, models: AgentModels, rng: np.random.Generator, explore: float, hold_min: int, hold_max: int):
        self.step, self.z_dim, self.hidden, self.action_dim = models.step, models.z_dim, models.hidden, models.action_dim
        self.rng, self.explore = rng, float(explore)
        self.lo, self.hi = int(hold_min), int(hold_max)
        self.reset()

    def reset(self) -> None:
        self.c = self.h = np.zeros((1, self.hidden), np.float32)
        self.fresh = np.ones(1, np.float32)
        self.left, self.random, self.a = 0, False, np.zeros((1, self.action_dim), np.float32)

    def act(self, obs) -> np.ndarray:
        if self.left == 0:
            self.left = int(self.rng.integers(self.lo, self.hi + 1))
            self.random = bool(self.rng.random() < self.explore)
            self.a = self.rng.uniform(-1.0, 1.0, (1, self.action_dim)).astype(np.float32)
        self.left -= 1
        eps = self.rng.standard_normal((1, self.z_dim)).astype(np.float32)
        a, self.c, self.h, bad = self.step(
            np.asarray(obs, np.uint8)[None], eps, self.c, self.h, self.fresh, self.a, np.bool_(self.random)
        )
        if bad.numpy()[0]:  # the same check as the real-env evaluation: no NaN action reaches the env
            raise WMError(f"agent policy: non-finite {nonfinite_names(bad.numpy()[0])}; check the agent run's V, M and C")
        self.fresh = np.zeros(1, np.float32)
        return a.numpy()[0]
