"""The trained agent (V + M + C of a finished run) as a data policy: `collect.policy: agent` (paper §5, iterative).

The paper's iterative training procedure rolls the current controller out in the real env, adds those episodes
to the data and retrains M (and C) on them, so M learns the states C actually reaches; a C trained on random
data alone finds states M has never seen and exploits them (in DoomTakeCover: walking into a wall, where M
predicts no death). This module is the rollout half: one env step is one compiled batch-1 graph that encodes
the frame with V, samples z = μ + σ·ε (ε from the episode's generator), asks C, and steps M with the action
actually applied — `wm.rollout.agent_step`, the same step the real-env evaluation uses.

Exploration (`collect.explore`): the episode is cut into hold segments of U{hold_min..hold_max} steps; each
segment, with probability `explore`, applies a uniform random action held for the segment (the `hold` data
policy) instead of C's. M always receives the applied action, so the data stays consistent.

The source run is `collect.agent_run` (a path, relative to the collecting run's directory): its
`vae/vae.weights.h5`, `mdnrnn/mdnrnn.weights.h5` and `controller/best.npz`. Models load once per worker process.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from wm.errors import WMError


def agent_paths(source: Path) -> dict[str, Path]:
    return {"vae": source / "vae" / "vae.weights.h5", "mdnrnn": source / "mdnrnn" / "mdnrnn.weights.h5",
            "params": source / "controller" / "best.npz"}


def agent_source(cfg: Any, run_dir: Path | str | None) -> Path:
    """`collect.agent_run` as a path: relative paths are taken from the collecting run's directory."""
    raw = str(cfg.collect.agent_run)
    if not raw:
        raise WMError("collect.policy is agent but collect.agent_run is empty (the run whose V, M and C act)")
    p = Path(raw)
    return p if p.is_absolute() else Path(run_dir or ".") / p


def check_agent_run(source: Path) -> None:
    """One clear line when the source run lacks a finished V, M or C."""
    if not source.is_dir():
        raise WMError(f"collect.agent_run: {source} is not a run directory")
    for what, path in agent_paths(source).items():
        if not path.exists():
            raise WMError(f"collect.agent_run: {path} missing (the agent's {what}; finish that run's stages first)")


@cache
def _models(source: str, cfg_yaml: str) -> tuple[Any, ...]:
    import yaml

    from wm import tf_setup

    tf = tf_setup.setup(threads=1, gpu=False)  # one per collect worker: one env, batch-1 graph
    from wm.config import Config
    from wm.envs import action_dim
    from wm.models.controller import Controller
    from wm.models.mdnrnn import load_mdnrnn
    from wm.models.vae import load_vae
    from wm.rollout import agent_step

    cfg = Config(yaml.safe_load(cfg_yaml))
    paths = agent_paths(Path(source))
    A = action_dim(cfg.env.name)
    vae = load_vae(paths["vae"], cfg.vae.z_dim)
    m = load_mdnrnn(paths["mdnrnn"], cfg.vae.z_dim, A, cfg.mdnrnn.hidden, cfg.mdnrnn.num_mixtures, cfg.mdnrnn.predict_done)
    ctrl = Controller.from_config(cfg, A)
    with np.load(paths["params"]) as f:
        params = np.asarray(f["params"], np.float32).reshape(1, -1)
    if params.shape[1] != ctrl.n_params:
        raise WMError(f"{paths['params']} holds {params.shape[1]} parameters but {ctrl} needs {ctrl.n_params}")
    params_t = tf.constant(params)

    @tf.function(input_signature=[tf.TensorSpec((1, 64, 64, 3), tf.uint8), tf.TensorSpec((1, m.z_dim), tf.float32),
                                  tf.TensorSpec((1, m.hidden), tf.float32), tf.TensorSpec((1, m.hidden), tf.float32),
                                  tf.TensorSpec((1,), tf.float32), tf.TensorSpec((1, A), tf.float32),
                                  tf.TensorSpec((), tf.bool)])
    def step(obs, eps, c, h, fresh, override, use_override):
        a, _, c, h = agent_step(vae, m, ctrl, obs, eps, c, h, params_t, fresh, override, use_override)
        return a, c, h

    return step, m.z_dim, m.hidden, A


class AgentPolicy:
    """`act(obs)` / `reset()` like the data policies, driven by a trained run's V, M and C (module docstring)."""

    def __init__(self, cfg: Any, source: Path, rng: np.random.Generator, explore: float):
        import yaml

        if not 0.0 <= explore <= 1.0:
            raise WMError(f"collect.explore must be in [0, 1], got {explore}")
        self.step, self.z_dim, self.hidden, self.action_dim = _models(str(source), yaml.safe_dump(cfg.to_dict()))
        self.rng, self.explore = rng, float(explore)
        self.lo, self.hi = int(cfg.collect.hold_min), int(cfg.collect.hold_max)
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
        a, self.c, self.h = self.step(np.asarray(obs, np.uint8)[None], eps, self.c, self.h, self.fresh, self.a,
                                      np.bool_(self.random))
        self.fresh = np.zeros(1, np.float32)
        return a.numpy()[0]
