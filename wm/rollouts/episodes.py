"""One episode outside the batched evaluators: the random policy in a real env, one dream episode (C or random
actions). The engine's episode evaluators, the GIF recorder and M's dream preview play through these, so a recorded
episode is the scored one (under `wm.envs.setup.scoring_config`)."""

from __future__ import annotations

from typing import Any

import numpy as np


def random_episode(env: Any, seed: int, max_steps: int, record: bool = False) -> tuple[float, int, dict[str, list]]:
    """One episode of uniform random controller-space actions (the paper's random policy, §9) in a real env.

    With `record`, also the raw screen and V's 64×64 input of every step (`frames["real"]`, `frames["input"]`).
    """
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=int(seed))
    shape = env.action_space.shape
    frames: dict[str, list] = {"real": [], "input": []}
    total, t = 0.0, 0
    while t < max_steps:
        if record:
            frames["input"].append(obs)
            frames["real"].append(info.get("raw", obs))
        obs, r, term, trunc, info = env.step(rng.uniform(-1.0, 1.0, shape).astype(np.float32))
        total, t = total + float(r), t + 1
        if term or trunc:
            break
    return total, t, frames


def dream_episode(
    env: Any, seed: int, max_steps: int, random: bool, record: bool = False
) -> tuple[float, int, dict[str, list]]:
    """One episode of a `wm.rollouts.dream.DreamEnv`: C acts (`step(None)`) or uniform random actions (post-processed for
    CarRacing, §6). With `record`, `frames["z"]` holds the dream's z at the start and after every step (V decodes
    them into the dream's frames: `wm.rollouts.recording`, M's preview GIF)."""
    rng = np.random.default_rng(seed)
    env.reset(seed=int(seed))
    frames: dict[str, list] = {"z": [env.z] if record else []}
    total, t = 0.0, 0
    while True:
        a = None
        if random:
            a = env.controller.postprocess(rng.uniform(-1.0, 1.0, (1, env.controller.action_dim)).astype(np.float32))
        _, r, term, trunc, _ = env.step(a)
        total, t = total + float(r), t + 1
        if record:
            frames["z"].append(env.z)
        if term or trunc or t >= max_steps:
            return total, t, frames
