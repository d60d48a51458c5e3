"""The dream: M as an environment (paper settings §5), batched over whole populations in one compiled graph.

`DreamEvaluator.evaluate(params (P, n), seeds (P, K))` runs all P·K episodes in one `tf.function` with a
`tf.while_loop`. Per step, for every live episode: a = C([z, c, h]) (post-processed for CarRacing, §6) → M step
with restart = 1 on the first step (§5) → z' sampled at temperature τ (§4) → done when the done logit > 0 or the
step cap is reached; reward +1 per step including the terminal one (§5), or, when M has a reward head
(`mdnrnn.predict_reward`: CarRacing in the dream), M's predicted reward of each step. Finished episodes are dropped from
the batch every `compact_every` steps (masked until then), so the cost follows the live episodes, not the longest.

Randomness is keyed by (episode seed, step) through a counter-based hash (below), not by a batch-wide RNG:
an episode's result depends only on its seed and its parameters, not on which batch it runs in, and the same
seed gives the same episode (up to float round-off of matmuls of different batch sizes). The start z is
μ + σ·ε for the `initial_z` entry the seed picks (§5). `DreamEnv` steps one episode with the same step function.
With M's dropout (`mdnrnn.dropout`), each episode draws its masks once from its seed (`_Core.masks`) and keeps them
to its end: every dream is a slightly different simulator (Dropout's Dream Land).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

from wm.core.errors import WMError
from wm.models import mixture_tf
from wm.models.controller import Controller
from wm.models.mdnrnn import MDNRNN
from wm.rollouts.rollout import nonfinite_flags, nonfinite_names

if TYPE_CHECKING:  # annotations only
    from wm.core.rundir import RunDir
    from wm.envs.setup import Setup
    from wm.rollouts.world import World

_M32 = 0xFFFFFFFF
# streams of the per-episode RNG
_S_PICK, _S_INIT, _S_COMP, _S_EPS, _S_DONE, _S_DROP_Z, _S_DROP_H = 1, 2, 3, 4, 5, 6, 7


def _mix(x: tf.Tensor) -> tf.Tensor:
    """A 32-bit integer hash (xorshift-multiply) on int64 tensors holding values in [0, 2^32).

    Multipliers stay below 2^31 so products never overflow int64.
    """
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))
    x = tf.bitwise.bitwise_and(x * 0x7FEB352D, _M32)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 15))
    x = tf.bitwise.bitwise_and(x * 0x2C1B3C6D, _M32)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))
    x = tf.bitwise.bitwise_and(x * 0x297A2D39, _M32)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 15))


def _np_mix(x: np.ndarray) -> np.ndarray:
    """`_mix` in NumPy (uint64 arithmetic), for constants."""
    x = x.astype(np.uint64)
    for shift, mult in ((16, 0x7FEB352D), (15, 0x2C1B3C6D), (16, 0x297A2D39)):
        x = ((x ^ (x >> np.uint64(shift))) * np.uint64(mult)) & np.uint64(_M32)
    return x ^ (x >> np.uint64(15))


def _column_keys(dim: int) -> np.ndarray:
    return _np_mix(np.arange(dim, dtype=np.uint64) + np.uint64(0x61C88647)).astype(np.int64)


def _keys(seeds: tf.Tensor, t: tf.Tensor, stream: int) -> tf.Tensor:
    """One 32-bit key per episode for (seed, step, stream)."""
    lo = tf.bitwise.bitwise_and(seeds, _M32)
    hi = tf.bitwise.bitwise_and(tf.bitwise.right_shift(seeds, 32), _M32)
    k = _mix(tf.bitwise.bitwise_xor(lo, 0x3C6EF372))
    k = _mix(tf.bitwise.bitwise_xor(k, hi))
    k = _mix(tf.bitwise.bitwise_xor(k, tf.bitwise.bitwise_and(tf.cast(t, tf.int64) + 0x165667B1, _M32)))
    return _mix(tf.bitwise.bitwise_xor(k, stream * 0x27D4EB2F))


def uniform(seeds: tf.Tensor, t: tf.Tensor, stream: int, dim: int) -> tf.Tensor:
    """(N, dim) uniforms in (0, 1), a function of (seed, step, stream, column) only.

    The top 23 bits of the hash: ((h >> 9) + 0.5)·2^−23 is exact in float32 and lies in [2^−24, 1 − 2^−24].
    (24 bits would map the top value to (2^24 − 0.5)·2^−24, which rounds to 1.0, and ndtri(1) = +inf.)
    """
    k = _keys(seeds, t, stream)[:, None]
    h = _mix(tf.bitwise.bitwise_xor(k, tf.constant(_column_keys(dim))[None, :]))
    return (tf.cast(tf.bitwise.right_shift(h, 9), tf.float32) + 0.5) * (1.0 / 8388608.0)


def normal(seeds: tf.Tensor, t: tf.Tensor, stream: int, dim: int) -> tf.Tensor:
    """(N, dim) standard normals by inverse CDF of `uniform`."""
    return tf.math.ndtri(uniform(seeds, t, stream, dim))


def _pick(seeds: tf.Tensor, stream: int, n: tf.Tensor) -> tf.Tensor:
    """One index in [0, n) per episode, a function of its seed (and the stream) only."""
    u = uniform(seeds, 0, stream, 1)[:, 0]
    return tf.minimum(tf.cast(u * tf.cast(n, tf.float32), tf.int64), n - 1)


class _Core:
    """The step function shared by the evaluator and DreamEnv (one place for the dream's semantics)."""

    def __init__(
        self,
        mdnrnn: MDNRNN,
        controller: Controller,
        initial_mu: np.ndarray,
        initial_logvar: np.ndarray,
        temperature: float,
        max_steps: int,
        *,
        done_sampling: str = "threshold",
        done_weight: float = 1.0,
        done_horizon: int = 1,
    ):
        if done_sampling not in ("threshold", "bernoulli"):
            raise WMError(f"dream.done_sampling must be threshold or bernoulli, got {done_sampling!r}")
        self.done_sampling = done_sampling
        # M's done head was trained with deaths weighted ×w, which moves its logit up by log w; Bernoulli sampling
        # takes it back off to draw deaths at the data's own rate (the cutoff is the paper's, on the raw logit)
        self.done_shift = float(np.log(max(float(done_weight), 1e-12)))
        if int(done_horizon) < 1:
            raise WMError(f"mdnrnn.done_horizon must be ≥ 1, got {done_horizon!r}")
        # a head trained on "dies within k steps" (mdnrnn.done_horizon k) gives P over k steps; Bernoulli sampling
        # draws the per-step hazard 1 − (1 − P)^(1/k) that compounds to it over k steps
        self.done_horizon = int(done_horizon)
        if (
            controller.z_dim != mdnrnn.z_dim
            or controller.hidden != mdnrnn.hidden
            or controller.action_dim != mdnrnn.action_dim
        ):
            raise WMError(f"{controller} does not fit M (z {mdnrnn.z_dim}, hidden {mdnrnn.hidden}, A {mdnrnn.action_dim})")
        initial_mu = np.asarray(initial_mu, np.float32)
        initial_logvar = np.asarray(initial_logvar, np.float32)
        if (
            initial_mu.ndim != 2
            or initial_mu.shape[1] != mdnrnn.z_dim
            or initial_mu.shape != initial_logvar.shape
            or not len(initial_mu)
        ):
            raise WMError(f"initial_z has shape {initial_mu.shape}/{initial_logvar.shape}, expected (N, {mdnrnn.z_dim})")
        self.m, self.c = mdnrnn, controller
        self.mu0, self.sigma0 = tf.constant(initial_mu), tf.constant(np.exp(initial_logvar / 2.0))
        self.temperature, self.max_steps = float(temperature), int(max_steps)

    def reset(self, seeds: tf.Tensor):
        """Start z (μ + σ·ε of the initial_z entry picked by the seed, §5) and zero (c, h)."""
        eps = normal(seeds, 0, _S_INIT, self.m.z_dim)
        c, h = self.m.initial_state(tf.shape(seeds)[0])
        n0 = tf.shape(self.mu0, out_type=tf.int64)[0]
        idx = _pick(seeds, _S_PICK, n0)
        return tf.gather(self.mu0, idx) + tf.gather(self.sigma0, idx) * eps, c, h

    def masks(self, seeds: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """M's dropout masks of each episode, a function of its seed only: (N, z) and (N, H); (N, 0) twice without
        dropout (carried through the loop at no cost)."""
        if self.m.dropout <= 0:
            empty = tf.zeros([tf.shape(seeds)[0], 0], tf.float32)
            return empty, empty
        return self.m.dropout_masks(uniform(seeds, 0, _S_DROP_Z, self.m.z_dim), uniform(seeds, 0, _S_DROP_H, self.m.hidden))

    def step(self, params, seeds, t, z, c, h, action=None, masks=None):
        """One dream step for a batch: returns (z', c', h', done, action, reward). `action` overrides C when given;
        `masks` are the episodes' dropout masks (`masks`; ignored without dropout). The reward is M's reward head, or
        1 per step without one (§5); done includes the step cap (`max_steps`, a truncation). `t`: one step for the
        batch, or one per episode (N,) (`wm.rollouts.gym_dream`'s vector env)."""
        if action is None:
            action = self.c.act_tf(params, z, c, h)
        n = tf.shape(z)[0]
        restart = tf.broadcast_to(tf.cast(tf.equal(t, 0), tf.float32), [n])  # restart = 1 on a game's first step (§5)
        masks = masks if self.m.dropout > 0 else None
        out, (c, h) = self.m.step(z, action, (c, h), restart if self.m.predict_done else None, masks)
        zd = self.m.z_dim
        z = mixture_tf.sample_mixture(
            out.logmix, out.mu, out.logstd, self.temperature, uniform(seeds, t, _S_COMP, zd), normal(seeds, t, _S_EPS, zd)
        )
        done = tf.broadcast_to(tf.cast(t, tf.int64) + 1 >= self.max_steps, [n])
        if out.done_logit is not None and self.done_sampling == "bernoulli":
            # death drawn with M's probability: a hazard V cannot see (a fireball from off-screen) still kills
            p = tf.sigmoid(out.done_logit - self.done_shift)
            if self.done_horizon > 1:
                p = 1.0 - tf.pow(1.0 - p, 1.0 / self.done_horizon)
            done = tf.logical_or(done, uniform(seeds, t, _S_DONE, 1)[:, 0] < p)
        elif out.done_logit is not None:
            done = tf.logical_or(done, out.done_logit > 0.0)  # cutoff, no sampling, no τ (§4)
        reward = out.reward if out.reward is not None else tf.ones([n], tf.float32)
        return z, c, h, done, action, reward


class DreamEvaluator:
    """All P·K dream episodes of a population in one compiled graph (§5, DESIGN "Performance shape")."""

    def __init__(
        self,
        mdnrnn: MDNRNN,
        controller: Controller,
        initial_mu: np.ndarray,
        initial_logvar: np.ndarray,
        temperature: float,
        max_steps: int,
        compact_every: int = 10,
        **options: Any,
    ):
        """`options`: how the dream decides a death, `_Core`'s keywords (`wm.envs.setup.DreamSettings.done_options`:
        done_sampling, done_weight, done_horizon)."""
        self.core = _Core(mdnrnn, controller, initial_mu, initial_logvar, temperature, max_steps, **options)
        self.controller, self.max_steps, self.compact_every = controller, int(max_steps), max(1, int(compact_every))
        self._run = tf.function(self._graph, reduce_retracing=True, autograph=False)

    def _graph(self, params: tf.Tensor, seeds: tf.Tensor, pidx: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        core, n = self.core, tf.shape(seeds)[0]
        z, c, h = core.reset(seeds)
        mz, mh = core.masks(seeds)
        prow = tf.gather(params, pidx)
        ids = tf.range(n)
        alive = tf.ones([n], tf.bool)
        lengths = tf.zeros([n], tf.int64)
        bad = tf.zeros([n, 2], tf.int64)  # per episode: `nonfinite_flags` bits, the step they appeared at
        paid = tf.zeros([n], tf.float32)  # M's predicted rewards summed (a reward head; else the lengths are the returns)
        head = core.m.predict_reward

        def cond(t, ids, seeds, prow, z, c, h, mz, mh, alive, lengths, bad, paid):
            return tf.logical_and(t < self.max_steps, tf.reduce_any(alive))

        def body(t, ids, seeds, prow, z, c, h, mz, mh, alive, lengths, bad, paid):
            z, c, h, done, a, r = core.step(prow, seeds, t, z, c, h, masks=(mz, mh))
            lengths = tf.tensor_scatter_nd_add(lengths, ids[:, None], tf.cast(alive, tf.int64))  # +1 reward per step (§5)
            if head:
                paid = tf.tensor_scatter_nd_add(paid, ids[:, None], tf.where(alive, r, 0.0))
            # a live episode whose action, z' or h' went NaN/inf is recorded and ended (evaluate raises), so it
            # cannot run on to the cap (a NaN done logit is never > 0)
            bits = tf.cast(nonfinite_flags(a, z, h), tf.int64) * tf.cast(alive, tf.int64)
            bad = tf.tensor_scatter_nd_add(bad, ids[:, None], tf.stack([bits, tf.sign(bits) * t], axis=1))
            alive = tf.logical_and(alive, tf.logical_and(tf.logical_not(done), tf.equal(bits, 0)))
            t = t + 1
            live = [ids, seeds, prow, z, c, h, mz, mh, alive]

            def compact():
                keep = tf.where(alive)[:, 0]
                return [tf.gather(x, keep) for x in live]

            do = tf.logical_and(tf.equal(t % self.compact_every, 0), tf.logical_not(tf.reduce_all(alive)))
            ids, seeds, prow, z, c, h, mz, mh, alive = tf.cond(do, compact, lambda: live)
            return t, ids, seeds, prow, z, c, h, mz, mh, alive, lengths, bad, paid

        loop = (tf.constant(0, tf.int64), ids, seeds, prow, z, c, h, mz, mh, alive, lengths, bad, paid)
        rows = [tf.TensorShape([None] + list(x.shape[1:])) for x in loop[1:10]]  # batch-sized: they shrink
        inv = tuple([tf.TensorShape([]), *rows, lengths.shape, bad.shape, paid.shape])
        out = tf.while_loop(cond, body, loop, shape_invariants=inv)
        return out[10], out[11], out[12]

    def evaluate(self, params: np.ndarray, seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Returns (returns float64 (P, K), lengths int64 (P, K)) for P parameter vectors × K seeds each."""
        params = np.asarray(params, np.float32)
        if params.ndim == 1:
            params = params[None]
        seeds = np.asarray(seeds, np.int64)
        if seeds.ndim == 1:
            seeds = seeds[None]
        p, k = seeds.shape
        if params.shape != (p, self.controller.n_params):
            raise WMError(f"params shape {params.shape} does not fit seeds {seeds.shape} and {self.controller}")
        pidx = np.repeat(np.arange(p, dtype=np.int32), k)
        lengths, bad, paid = self._run(tf.constant(params), tf.constant(seeds.reshape(-1)), tf.constant(pidx))
        lengths, bad = lengths.numpy().reshape(p, k), bad.numpy()
        hit = np.flatnonzero(bad[:, 0])
        if hit.size:
            j = hit[0]
            raise WMError(
                f"dream: non-finite {nonfinite_names(bad[j, 0])} at step {bad[j, 1]} of member {j // k}, seed "
                f"{seeds.flat[j]} ({hit.size} of {p * k} episodes); check M's weights and the controller params"
            )
        returns = paid.numpy().reshape(p, k) if self.core.m.predict_reward else lengths
        return returns.astype(np.float64), lengths.astype(np.int64)


class DreamEnv:
    """One dream episode, gymnasium-style (`reset(seed)` → obs, info; `step(a)` → obs, r, terminated, truncated, info).

    The observation is [z, c, h] (§5). Uses the evaluator's step function, so for the same seed and C it
    follows the same episode as `DreamEvaluator` (its test checks this). `step(None)` lets C act; given
    an action (B=1, A), it is fed to M as is (post-process CarRacing actions yourself, `Controller.postprocess`).
    """

    def __init__(
        self,
        mdnrnn: MDNRNN,
        controller: Controller,
        initial_mu: np.ndarray,
        initial_logvar: np.ndarray,
        temperature: float,
        max_steps: int,
        params: np.ndarray | None = None,
        **options: Any,
    ):
        """`options`: the dream's settings, as `DreamEvaluator`'s (`_Core`'s keywords)."""
        self.core = _Core(mdnrnn, controller, initial_mu, initial_logvar, temperature, max_steps, **options)
        self.controller, self.params = controller, None if params is None else np.asarray(params, np.float32)
        self._reset = tf.function(lambda s: (self.core.reset(s), self.core.masks(s)), autograph=False)
        self._step_c = tf.function(
            lambda p, s, t, z, c, h, m: self.core.step(p[None], s, t, z, c, h, masks=m), autograph=False
        )
        self._step_a = tf.function(
            lambda s, t, z, c, h, a, m: self.core.step(None, s, t, z, c, h, action=a, masks=m), autograph=False
        )
        self.t, self.seed, self.state, self.masks = 0, 0, None, None

    def _obs(self) -> np.ndarray:
        return np.concatenate([x.numpy()[0] for x in self.state])

    @property
    def z(self) -> np.ndarray:
        return self.state[0].numpy()[0]

    def reset(self, seed: int | None = None, params: np.ndarray | None = None):
        if params is not None:
            self.params = np.asarray(params, np.float32)
        self.seed = int(np.random.SeedSequence().entropy % 2**62) if seed is None else int(seed)
        self.t = 0
        state, self.masks = self._reset(tf.constant([self.seed], tf.int64))
        self.state = tuple(state)
        return self._obs(), {"t": 0}

    def step(self, action: np.ndarray | None = None):
        if self.state is None:
            raise RuntimeError("call reset() first")
        seeds, t = tf.constant([self.seed], tf.int64), tf.constant(self.t, tf.int64)
        if action is None:
            if self.params is None:
                raise RuntimeError("DreamEnv.step(None) needs controller params (reset(params=...))")
            z, c, h, done, a, r = self._step_c(tf.constant(self.params), seeds, t, *self.state, self.masks)
        else:
            a = tf.constant(np.asarray(action, np.float32).reshape(1, -1))
            z, c, h, done, a, r = self._step_a(seeds, t, *self.state, a, self.masks)
        sick = [name for name, x in (("action", a), ("z", z), ("h", h)) if not np.isfinite(x.numpy()).all()]
        if sick:
            raise WMError(
                f"dream: non-finite {', '.join(sick)} at step {self.t} of seed {self.seed}; check M's weights "
                "and the controller params"
            )
        self.state, self.t = (z, c, h), self.t + 1
        done = bool(done.numpy()[0])
        truncated = done and self.t >= self.core.max_steps  # the step just played reached the cap
        reward = float(r.numpy()[0])  # 1 per step (§5), or M's predicted reward with a reward head
        return self._obs(), reward, done and not truncated, truncated, {"t": self.t, "action": a.numpy()[0]}


def load_dream(facts: Setup, run: RunDir) -> DreamEvaluator:
    """The DreamEvaluator of a run: M and the recorded initial z's through `wm.rollouts.world.load_world`."""
    from wm.rollouts.world import load_world

    world = load_world(facts, run, need=("mdnrnn", "initial_z"))
    d = facts.dream
    return DreamEvaluator(
        world.mdnrnn,
        world.controller,
        world.initial_mu,
        world.initial_logvar,
        d.temperature,
        d.max_steps,
        **d.done_options(),
    )


def dream_env(facts: Setup, run: RunDir, params: np.ndarray | None = None) -> DreamEnv:
    """A single DreamEnv of the run at `dream.temperature` (M and initial z's through `wm.rollouts.world.load_world`)."""
    from wm.rollouts.world import load_world

    return world_env(load_world(facts, run, need=("mdnrnn", "initial_z")), params)


def world_env(
    world: World, params: np.ndarray | None = None, temperature: float | None = None, max_steps: int | None = None
) -> DreamEnv:
    """A DreamEnv over a loaded world (M and initial z's) with its setup's dream settings (τ and the step cap unless
    given)."""
    d = world.setup.dream
    return DreamEnv(
        world.mdnrnn,
        world.controller,
        world.initial_mu,
        world.initial_logvar,
        d.temperature if temperature is None else temperature,
        d.max_steps if max_steps is None else max_steps,
        params=params,
        **d.done_options(),
    )
