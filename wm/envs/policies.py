"""Data-collection policies in controller space (docs/paper-settings.md §1a, §1b).

- `random_agent` (car, §1a): the authors roll out a world-model agent with random weights. Their V and M
  weights end up ≈ 1e-6, so z ≈ N(0, I) fresh every step and h ≈ 0; C keeps Cauchy × stdev weights with
  stdev = U(0, 1) · `collect.random_agent_stdev` drawn per episode. The action is therefore a fixed random
  linear map of white noise, a = tanh(Wᵀz + b) with W (32 × 3), b (3). The h rows of W multiply zeros and are
  not drawn. z has the car V's 32 dims whatever `vae.z_dim` is, so the action statistics stay the authors'.
- `brownian`: a random walk a ← clip(a + N(0, brownian_sigma²), −1, 1) from a ~ U(−1, 1)^A.
- `agent`: a finished run's V + M + C with random hold segments mixed in (`wm.rollouts.agent`, the paper's iterative
  training, §5).
- `hold` (Doom, §1b): a ~ U(−1, 1) held for a while. `collect.hold_rule = ha2018` is the authors' loop
  (`if frame % repeat == 0: draw a, draw repeat ~ U{1..10}`), whose holds end at the next multiple of the new
  repeat, so they are 1..10 steps but not uniform; `exact` holds each action exactly U{hold_min..hold_max} steps.
"""

from __future__ import annotations

import numpy as np

from wm.core.config import Config
from wm.core.errors import WMError

POLICIES = ("random_agent", "brownian", "hold", "agent")
RANDOM_AGENT_Z = 32  # the car V's z size (§1a, §2)


class RandomAgent:
    """Random-weight world-model agent: tanh(Wᵀz + b), z ~ N(0, I) per step, Cauchy weights per episode."""

    def __init__(self, rng: np.random.Generator, action_dim: int, stdev: float):
        self.rng, self.action_dim, self.max_stdev = rng, action_dim, stdev
        self.reset()

    def reset(self) -> None:
        stdev = self.rng.uniform() * self.max_stdev
        self.stdev = stdev
        self.b = self.rng.standard_cauchy(self.action_dim) * stdev
        self.w = self.rng.standard_cauchy((RANDOM_AGENT_Z, self.action_dim)) * stdev

    def act(self, obs=None) -> np.ndarray:
        z = self.rng.standard_normal(RANDOM_AGENT_Z)
        return np.tanh(z @ self.w + self.b).astype(np.float32)


class Brownian:
    """Clipped Gaussian random walk in controller space."""

    def __init__(self, rng: np.random.Generator, action_dim: int, sigma: float):
        self.rng, self.action_dim, self.sigma = rng, action_dim, sigma
        self.reset()

    def reset(self) -> None:
        self.a = self.rng.uniform(-1.0, 1.0, self.action_dim)

    def act(self, obs=None) -> np.ndarray:
        out = self.a.astype(np.float32)
        self.a = np.clip(self.a + self.sigma * self.rng.standard_normal(self.action_dim), -1.0, 1.0)
        return out


class Hold:
    """Uniform action held for a random number of steps (§1b); see the module docstring for the two rules."""

    def __init__(self, rng: np.random.Generator, action_dim: int, lo: int, hi: int, rule: str):
        if not 1 <= lo <= hi:
            raise WMError(f"collect.hold_min/hold_max must satisfy 1 <= min <= max, got {lo}, {hi}")
        if rule not in ("ha2018", "exact"):
            raise WMError(f"unknown collect.hold_rule {rule!r} (expected ha2018 or exact)")
        self.rng, self.action_dim, self.rule = rng, action_dim, rule
        self.lo, self.hi = lo, hi
        self.reset()

    def _repeat(self) -> int:
        return int(self.rng.integers(self.lo, self.hi + 1))

    def reset(self) -> None:
        self.frame = 0
        self.left = 0
        self.repeat = self._repeat()  # the authors draw one before the loop (§1b)
        self.a = np.zeros(self.action_dim)

    def act(self, obs=None) -> np.ndarray:
        if self.rule == "ha2018":
            if self.frame % self.repeat == 0:
                self.a = self.rng.uniform(-1.0, 1.0, self.action_dim)
                self.repeat = self._repeat()
        else:
            if self.left == 0:
                self.a = self.rng.uniform(-1.0, 1.0, self.action_dim)
                self.left = self._repeat()
            self.left -= 1
        self.frame += 1
        return self.a.astype(np.float32)


def make_policy(cfg: Config, rng: np.random.Generator, action_dim: int) -> RandomAgent | Brownian | Hold:
    """The data policy `cfg.collect.policy` with its config parameters; `reset()` per episode, `act(obs)`.

    `agent` (the trained V + M + C of `collect.agent_run`) needs trained models: `wm.rollouts.agent`, built by the collect
    stage (envs never import the agent).
    """
    c = cfg.collect
    if c.policy == "agent":
        raise WMError("collect.policy agent is built from a trained run by the collect stage (wm.rollouts.agent), not here")
    if c.policy == "random_agent":
        return RandomAgent(rng, action_dim, c.random_agent_stdev)
    if c.policy == "brownian":
        return Brownian(rng, action_dim, c.brownian_sigma)
    if c.policy == "hold":
        return Hold(rng, action_dim, c.hold_min, c.hold_max, c.hold_rule)
    raise WMError(f"unknown collect.policy {c.policy!r} (expected one of {POLICIES})")
