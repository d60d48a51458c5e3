"""The dream: M as an environment (paper_settings §5), batched over whole populations in one compiled graph.

`DreamEvaluator.evaluate(params (P, n), seeds (P, K))` runs all P·K episodes in one `tf.function` with a
`tf.while_loop`. Per step, for every live episode: a = C([z, c, h]) (post-processed for CarRacing, §6) → M step
with restart = 1 on the first step (§5) → z' sampled at temperature τ (§4) → done when the done logit > 0 or the
step cap is reached; reward +1 per step including the terminal one (§5), or, when M has a reward head
(`mdnrnn.predict_reward`: CarRacing in the dream), M's predicted reward of each step. Finished episodes are dropped from
the batch every `compact_every` steps (masked until then), so the cost follows the live episodes, not the longest.

Randomness is keyed by (episode seed, step) through a counter-based hash (below), not by a batch-wide RNG:
an episode's result depends only on its seed and its parameters, not on which batch it runs in, and the same
seed gives the same episode (up to float round-off of matmuls of different batch sizes). The start z is
μ + σ·ε for the `initial_z` entry the seed picks (§5), or ε alone with `dream.start: normal` (z ~ N(0, I), as Dropout's
Dream Land starts its CarRacing dream). `DreamEnv` steps one episode with the same step function.
With M's dropout (`mdnrnn.dropout`), each episode draws its masks once from its seed (`_Core.masks`) and keeps them
to its end: every dream is a slightly different simulator (Dropout's Dream Land). With `dream.branch_share` (not the
paper's; measured on Doom, README "Nor are dreams branched mid-game"), that share of the episodes starts instead at
a recorded mid-game state (`branch_states`: frame t0 of a recorded episode and M's (c, h) teacher-forced up to it)
and plays the rest of the game, max_steps − t0 steps at most, without the restart flag; with `dream.branch_steps` N
only its next N steps (short rollouts from recorded states, where M is still accurate: MBPO, Janner et al. 2019).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

from wm.errors import WMError
from wm.models import mixture
from wm.models.controller import Controller
from wm.models.mdnrnn import MDNRNN
from wm.rollout import nonfinite_flags, nonfinite_names

if TYPE_CHECKING:  # annotations only
    from wm.config import Config
    from wm.data.sequences import Series
    from wm.rundir import RunDir
    from wm.world import World

_M32 = 0xFFFFFFFF
# streams of the per-episode RNG
_S_PICK, _S_INIT, _S_COMP, _S_EPS, _S_DONE, _S_DROP_Z, _S_DROP_H, _S_BRANCH, _S_BRANCH_PICK = 1, 2, 3, 4, 5, 6, 7, 8, 9
# where an episode starts (`dream.start`): a recorded frame-0 z (§5), or z ~ N(0, I) (Dropout's Dream Land's
# CarRacing dream; V's prior, no recorded frame needed)
STARTS = ("recorded", "normal")


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


@dataclass
class Branches:
    """Recorded mid-episode states a dream can start from (`dream.branch_share`): row i is frame t0[i] of a recorded
    episode, z's μ/σ there, and M's (c, h) after reading that episode's frames and actions 0..t0 − 1 (teacher-forced)."""

    mu: np.ndarray  # (N, z) float32
    sigma: np.ndarray  # (N, z)
    c: np.ndarray  # (N, H)
    h: np.ndarray  # (N, H)
    t0: np.ndarray  # (N,) int64, ≥ 1
    episode: np.ndarray  # (N,) the series episode each row was drawn from


def branch_states(mdnrnn: MDNRNN, series: Series, n: int, newest: int, seed: int, window: int = 0) -> Branches:
    """`n` branch states drawn uniformly over the frames 1 … L − 2 of the newest `newest` episodes of `series` (file
    order; 0 = all) — with `window` > 0 only over the last `window` frames before a recorded death (episodes that
    ended by the env's termination): M is run along each drawn episode with its recorded actions and a sampled
    z = μ + σ·ε (as in M's training, §3), restart on frame 0, and its state before frame t0 is kept (`Branches`)."""
    rng = np.random.default_rng(seed)
    first = 0 if newest <= 0 else max(0, series.n_episodes - int(newest))
    eps = np.arange(first, series.n_episodes)
    hi = series.lengths[eps] - 2  # frames lo … L − 2: a state with a next frame to predict
    lo = np.ones_like(hi)
    if window > 0:
        died = np.ones(len(eps), bool) if series.terminal is None else series.terminal[eps]
        lo = np.where(died, np.maximum(1, hi + 1 - int(window)), hi + 1)
    spans = np.maximum(hi - lo + 1, 0)
    if n <= 0 or spans.sum() == 0:
        raise WMError(f"no branch states: {n} asked of {len(eps)} episodes with {int(spans.sum())} frames to start at")
    flat = rng.choice(int(spans.sum()), size=int(n), replace=True)
    ep_of = np.searchsorted(np.cumsum(spans), flat, side="right")
    t0 = (flat - np.concatenate([[0], np.cumsum(spans)[:-1]])[ep_of] + lo[ep_of]).astype(np.int64)
    rows = series.starts[eps[ep_of]]
    T = int(t0.max())
    idx = np.minimum(rows[:, None] + np.arange(T)[None], len(series.mu) - 1)  # frames 0 … T − 1 (past t0: unused)
    z = series.mu[idx].astype(np.float32)  # z = μ + σ·ε in place: (n, T, z) is the table's largest array
    z += np.exp(series.logvar[idx].astype(np.float32) / 2.0) * rng.standard_normal(z.shape, np.float32)
    act = series.action[idx].astype(np.float32)
    c, h = tf.function(_teacher_forced_state)(mdnrnn, tf.constant(z), tf.constant(act), tf.constant(t0))
    at = rows + t0
    return Branches(
        series.mu[at].astype(np.float32),
        np.exp(series.logvar[at].astype(np.float32) / 2.0),
        c.numpy(),
        h.numpy(),
        t0,
        eps[ep_of],
    )


def _teacher_forced_state(m: MDNRNN, z: tf.Tensor, act: tf.Tensor, t0: tf.Tensor):
    """M's (c, h) after frames 0 … t0 − 1 of each row (z (B, T, z), actions (B, T, A)), restart on frame 0."""
    b = tf.shape(z)[0]
    c, h = m.initial_state(b)

    def body(t, c, h, kc, kh):
        restart = tf.fill([b], tf.cast(tf.equal(t, 0), tf.float32))
        _, (c, h) = m.step(z[:, t], act[:, t], (c, h), restart if m.predict_done else None)
        keep = tf.equal(tf.cast(t, tf.int64) + 1, t0)[:, None]
        return t + 1, c, h, tf.where(keep, c, kc), tf.where(keep, h, kh)

    _, _, _, kc, kh = tf.while_loop(lambda t, *_: t < tf.shape(z)[1], body, (tf.constant(0), c, h, c, h))
    return kc, kh


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
        start: str = "recorded",
        branches: Branches | None = None,
        branch_share: float = 0.0,
        branch_steps: int = 0,
        critics: Sequence[MDNRNN] = (),
        pessimism: float = 1.0,
    ):
        if done_sampling not in ("threshold", "bernoulli"):
            raise WMError(f"dream.done_sampling must be threshold or bernoulli, got {done_sampling!r}")
        if start not in STARTS:
            raise WMError(f"dream.start must be one of {', '.join(STARTS)}, got {start!r}")
        self.done_sampling, self.start = done_sampling, start
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
        if not 0.0 <= float(branch_share) <= 1.0:
            raise WMError(f"dream.branch_share must be in [0, 1], got {branch_share}")
        if branch_share > 0 and (branches is None or not len(branches.t0)):
            raise WMError("dream.branch_share > 0 needs branch states (wm.dream.branch_states of the run's series)")
        self.branch_share = float(branch_share)
        if int(branch_steps) < 0:
            raise WMError(f"dream.branch_steps must be ≥ 0 (0: the rest of the game), got {branch_steps!r}")
        if int(branch_steps) > 0 and self.branch_share <= 0:
            raise WMError("dream.branch_steps cuts branched dreams only: it needs dream.branch_share > 0")
        # a branched dream's window: it ends (truncated) after this many steps, 0 = at the game's cap
        self.branch_steps = int(branch_steps)
        self.branches = None
        if self.branch_share > 0:
            if branches.c.shape[1] != mdnrnn.hidden or branches.mu.shape[1] != mdnrnn.z_dim:
                raise WMError(f"branch states of shape {branches.c.shape} do not fit M (hidden {mdnrnn.hidden})")
            self.branches = {k: tf.constant(getattr(branches, k)) for k in ("mu", "sigma", "c", "h", "t0")}
        self.critics, self.pessimism = list(critics), float(pessimism)
        if self.critics:
            if not mdnrnn.predict_reward:
                raise WMError("dream.critics need M's reward head (mdnrnn.predict_reward): they judge its rewards")
            for k in self.critics:
                if not k.predict_reward or k.z_dim != mdnrnn.z_dim or k.action_dim != mdnrnn.action_dim:
                    raise WMError(
                        f"dream.critics: a critic M (z {k.z_dim}, A {k.action_dim}, reward head {k.predict_reward}) "
                        f"does not fit M (z {mdnrnn.z_dim}, A {mdnrnn.action_dim}, reward head)"
                    )
            if self.branch_share > 0:
                raise WMError("dream.critics cannot follow branched starts (dream.branch_share > 0): they have no state there")
            if not self.pessimism >= 0:
                raise WMError(f"dream.pessimism must be ≥ 0, got {pessimism}")

    def critic_state(self, n: int | tf.Tensor) -> tuple[tf.Tensor, ...]:
        """The critics' zero (c, h), flattened (c₁, h₁, c₂, h₂, …); () without critics."""
        return tuple(x for k in self.critics for x in k.initial_state(n))

    def reset(self, seeds: tf.Tensor):
        """Start z (μ + σ·ε of the initial_z entry picked by the seed, §5; ε itself with `start: normal`), zero
        (c, h) and step offset 0; with `dream.branch_share`, that share of the seeds (drawn per seed) start instead at
        a recorded mid-episode state (z, c, h) of the branch table, offset by its frame index t0 (`branch_states`)."""
        eps = normal(seeds, 0, _S_INIT, self.m.z_dim)
        c, h = self.m.initial_state(tf.shape(seeds)[0])
        off = tf.zeros_like(seeds)
        if self.start == "normal":
            z = eps
        else:
            n0 = tf.shape(self.mu0, out_type=tf.int64)[0]
            idx = _pick(seeds, _S_PICK, n0)
            z = tf.gather(self.mu0, idx) + tf.gather(self.sigma0, idx) * eps
        if self.branches is None:
            return z, c, h, off
        b = self.branches
        j = _pick(seeds, _S_BRANCH_PICK, tf.shape(b["t0"], out_type=tf.int64)[0])
        on = uniform(seeds, 0, _S_BRANCH, 1)[:, 0] < self.branch_share
        col = on[:, None]
        z = tf.where(col, tf.gather(b["mu"], j) + tf.gather(b["sigma"], j) * eps, z)
        c, h = tf.where(col, tf.gather(b["c"], j), c), tf.where(col, tf.gather(b["h"], j), h)
        return z, c, h, tf.where(on, tf.gather(b["t0"], j), off)

    def masks(self, seeds: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """M's dropout masks of each episode, a function of its seed only: (N, z) and (N, H); (N, 0) twice without
        dropout (carried through the loop at no cost)."""
        if self.m.dropout <= 0:
            empty = tf.zeros([tf.shape(seeds)[0], 0], tf.float32)
            return empty, empty
        return self.m.dropout_masks(uniform(seeds, 0, _S_DROP_Z, self.m.z_dim), uniform(seeds, 0, _S_DROP_H, self.m.hidden))

    def cut(self, t, off: tf.Tensor) -> tf.Tensor:
        """(N,) bool: step t (0-based) is an episode's last by truncation, the game's step cap (counted from frame 0:
        `off` is where it started) or, for a branched start, its `dream.branch_steps` window."""
        n = tf.cast(t, tf.int64) + 1
        cut = n + off >= self.max_steps
        if self.branch_steps > 0:
            cut = tf.logical_or(cut, tf.logical_and(off > 0, n >= self.branch_steps))
        return cut

    def step(self, params, seeds, t, z, c, h, action=None, masks=None, off=None, crit=()):
        """One dream step for a batch: returns (z', c', h', done, action, reward, crit'). `action` overrides C when
        given; `masks` are the episodes' dropout masks (`masks`; ignored without dropout); `off` (N,) the game step each
        episode started at (`reset`; 0 but for branched starts); `crit` the critics' states (`critic_state`). The
        reward is M's reward head, or 1 per step without one (§5); with critics, `pessimistic` over M's head and
        theirs."""
        if action is None:
            action = self.c.act_tf(params, z, c, h)
        n = tf.shape(z)[0]
        off = tf.zeros([n], tf.int64) if off is None else off
        # restart = 1 on a game's first step (§5): not on a branched start, which goes on from a recorded state
        restart = tf.cast(tf.logical_and(tf.equal(t, 0), tf.equal(off, 0)), tf.float32)
        masks = masks if self.m.dropout > 0 else None
        z_in = z
        out, (c, h) = self.m.step(z, action, (c, h), restart if self.m.predict_done else None, masks)
        zd = self.m.z_dim
        z = mixture.sample_mixture(
            out.logmix, out.mu, out.logstd, self.temperature, uniform(seeds, t, _S_COMP, zd), normal(seeds, t, _S_EPS, zd)
        )
        done = self.cut(t, off)
        if out.done_logit is not None and self.done_sampling == "bernoulli":
            # death drawn with M's probability: a hazard V cannot see (a fireball from off-screen) still kills
            p = tf.sigmoid(out.done_logit - self.done_shift)
            if self.done_horizon > 1:
                p = 1.0 - tf.pow(1.0 - p, 1.0 / self.done_horizon)
            done = tf.logical_or(done, uniform(seeds, t, _S_DONE, 1)[:, 0] < p)
        elif out.done_logit is not None:
            done = tf.logical_or(done, out.done_logit > 0.0)  # cutoff, no sampling, no τ (§4)
        reward = out.reward if out.reward is not None else tf.ones([n], tf.float32)
        if self.critics:
            # each critic M reads the same dreamed (z, a) as M, without dropout, and predicts its own reward
            paid, new = [reward], []
            for i, k in enumerate(self.critics):
                o, state = k.step(z_in, action, (crit[2 * i], crit[2 * i + 1]), restart if k.predict_done else None)
                paid.append(o.reward)
                new += state
            reward, crit = pessimistic(tf.stack(paid), self.pessimism), tuple(new)
        return z, c, h, done, action, reward, crit


def pessimistic(rewards: tf.Tensor, k: float) -> tf.Tensor:
    """mean − k·std over the heads (axis 0; population std): the reward of a step the heads agree on stands, one
    they disagree on is paid less (the ensemble penalty of MOPO, Yu et al. 2020). Two heads at k = 1: their min."""
    mean = tf.reduce_mean(rewards, axis=0)
    return mean - k * tf.sqrt(tf.reduce_mean(tf.square(rewards - mean), axis=0))


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
        """`options`: the dream's settings, `_Core`'s keywords (done_sampling, done_weight, done_horizon, start, branches,
        branch_share)."""
        self.core = _Core(mdnrnn, controller, initial_mu, initial_logvar, temperature, max_steps, **options)
        self.controller, self.max_steps, self.compact_every = controller, int(max_steps), max(1, int(compact_every))
        self._run = tf.function(self._graph, reduce_retracing=True)

    def _graph(self, params: tf.Tensor, seeds: tf.Tensor, pidx: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        core, n = self.core, tf.shape(seeds)[0]
        z, c, h, off = core.reset(seeds)
        mz, mh = core.masks(seeds)
        crit = core.critic_state(n)
        prow = tf.gather(params, pidx)
        ids = tf.range(n)
        alive = tf.ones([n], tf.bool)
        lengths = tf.zeros([n], tf.int64)
        bad = tf.zeros([n, 2], tf.int64)  # per episode: `nonfinite_flags` bits, the step they appeared at
        paid = tf.zeros([n], tf.float32)  # M's predicted rewards summed (a reward head; else the lengths are the returns)
        head = core.m.predict_reward

        def cond(t, ids, seeds, prow, z, c, h, mz, mh, off, alive, lengths, bad, paid, *crit):
            return tf.logical_and(t < self.max_steps, tf.reduce_any(alive))

        def body(t, ids, seeds, prow, z, c, h, mz, mh, off, alive, lengths, bad, paid, *crit):
            z, c, h, done, a, r, crit = core.step(prow, seeds, t, z, c, h, masks=(mz, mh), off=off, crit=crit)
            lengths = tf.tensor_scatter_nd_add(lengths, ids[:, None], tf.cast(alive, tf.int64))  # +1 reward per step (§5)
            if head:
                paid = tf.tensor_scatter_nd_add(paid, ids[:, None], tf.where(alive, r, 0.0))
            # a live episode whose action, z' or h' went NaN/inf is recorded and ended (evaluate raises), so it
            # cannot run on to the cap (a NaN done logit is never > 0)
            bits = tf.cast(nonfinite_flags(a, z, h), tf.int64) * tf.cast(alive, tf.int64)
            bad = tf.tensor_scatter_nd_add(bad, ids[:, None], tf.stack([bits, tf.sign(bits) * t], axis=1))
            alive = tf.logical_and(alive, tf.logical_and(tf.logical_not(done), tf.equal(bits, 0)))
            t = t + 1
            live = [ids, seeds, prow, z, c, h, mz, mh, off, alive, *crit]

            def compact():
                keep = tf.where(alive)[:, 0]
                return [tf.gather(x, keep) for x in live]

            do = tf.logical_and(tf.equal(t % self.compact_every, 0), tf.logical_not(tf.reduce_all(alive)))
            ids, seeds, prow, z, c, h, mz, mh, off, alive, *crit = tf.cond(do, compact, lambda: live)
            return t, ids, seeds, prow, z, c, h, mz, mh, off, alive, lengths, bad, paid, *crit

        loop = (tf.constant(0, tf.int64), ids, seeds, prow, z, c, h, mz, mh, off, alive, lengths, bad, paid, *crit)
        rows = [tf.TensorShape([None] + list(x.shape[1:])) for x in (*loop[1:11], *crit)]  # batch-sized: they shrink
        inv = tuple([tf.TensorShape([]), *rows[:10], lengths.shape, bad.shape, paid.shape, *rows[10:]])
        out = tf.while_loop(cond, body, loop, shape_invariants=inv)
        return out[11], out[12], out[13]

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
        self._reset = tf.function(lambda s: (self.core.reset(s), self.core.masks(s), self.core.critic_state(1)))
        self._step_c = tf.function(
            lambda p, s, t, z, c, h, m, o, k: self.core.step(p[None], s, t, z, c, h, masks=m, off=o, crit=k)
        )
        self._step_a = tf.function(
            lambda s, t, z, c, h, a, m, o, k: self.core.step(None, s, t, z, c, h, action=a, masks=m, off=o, crit=k)
        )
        self.t, self.seed, self.state, self.masks, self.off, self.crit = 0, 0, None, None, None, ()

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
        (*self.state, self.off), self.masks, self.crit = self._reset(tf.constant([self.seed], tf.int64))
        self.state = tuple(self.state)
        return self._obs(), {"t": 0, "t0": int(self.off.numpy()[0])}

    def step(self, action: np.ndarray | None = None):
        if self.state is None:
            raise RuntimeError("call reset() first")
        seeds, t = tf.constant([self.seed], tf.int64), tf.constant(self.t, tf.int64)
        if action is None:
            if self.params is None:
                raise RuntimeError("DreamEnv.step(None) needs controller params (reset(params=...))")
            z, c, h, done, a, r, crit = self._step_c(
                tf.constant(self.params), seeds, t, *self.state, self.masks, self.off, self.crit
            )
        else:
            a = tf.constant(np.asarray(action, np.float32).reshape(1, -1))
            z, c, h, done, a, r, crit = self._step_a(seeds, t, *self.state, a, self.masks, self.off, self.crit)
        sick = [name for name, x in (("action", a), ("z", z), ("h", h)) if not np.isfinite(x.numpy()).all()]
        if sick:
            raise WMError(
                f"dream: non-finite {', '.join(sick)} at step {self.t} of seed {self.seed}; check M's weights "
                "and the controller params"
            )
        self.state, self.crit, self.t = (z, c, h), tuple(crit), self.t + 1
        done = bool(done.numpy()[0])
        truncated = done and bool(self.core.cut(self.t - 1, self.off).numpy()[0])  # the step just played
        reward = float(r.numpy()[0])  # 1 per step (§5), or M's predicted reward with a reward head
        return self._obs(), reward, done and not truncated, truncated, {"t": self.t, "action": a.numpy()[0]}


class DreamEnsemble:
    """C's dreams shared among several Ms of one V (`dream.worlds`): each member's k-th episode runs in world
    k mod W, so a member's fitness averages over the worlds and the seeds keep their meaning (an episode depends on
    its seed, its params and its world only). `evaluate` as `DreamEvaluator.evaluate`."""

    def __init__(self, evaluators: list[DreamEvaluator]):
        if not evaluators:
            raise ValueError("DreamEnsemble needs at least one evaluator")
        self.evaluators = list(evaluators)

    def evaluate(self, params: np.ndarray, seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        params, seeds = np.asarray(params, np.float32), np.asarray(seeds, np.int64)
        params, seeds = (params[None] if params.ndim == 1 else params), (seeds[None] if seeds.ndim == 1 else seeds)
        returns, lengths = np.zeros(seeds.shape, np.float64), np.zeros(seeds.shape, np.int64)
        w = len(self.evaluators)
        for i, ev in enumerate(self.evaluators):
            cols = np.arange(i, seeds.shape[1], w)
            if cols.size:
                returns[:, cols], lengths[:, cols] = ev.evaluate(params, seeds[:, cols])
        return returns, lengths


def other_ms(cfg: Config, run: RunDir, key: str) -> list[MDNRNN]:
    """The Ms of `dream.<key>` (worlds or critics), each checked to read this run's V."""
    from wm.rundir import RunDir, same_file
    from wm.world import dream_worlds, load_world

    ms = []
    for path in dream_worlds(cfg, run, key):
        other = RunDir(path)
        if not path.is_dir():
            raise WMError(f"dream.{key}: {path} is not a run directory")
        if other.vae_weights.exists() and not same_file(other.vae_weights, run.vae_weights):
            raise WMError(f"dream.{key}: {path}'s V differs from {run.path}'s (the worlds' M must read the same z)")
        ms.append(load_world(cfg, other, need=("mdnrnn",)).mdnrnn)
    return ms


def load_dream(cfg: Config, run: RunDir, **kw: Any) -> DreamEvaluator | DreamEnsemble:
    """The DreamEvaluator of a run: M and the recorded initial z's through `wm.world.load_world`; with
    `dream.worlds`, a `DreamEnsemble` of this M and theirs (the run's initial z's start every world's dreams); with
    `dream.critics`, their Ms judge every world's rewards (`pessimistic`)."""
    from wm.world import load_world

    world = load_world(cfg, run, need=("mdnrnn", "initial_z"))
    kw = dream_options(cfg) | {"critics": other_ms(cfg, run, "critics")} | kw
    ms = [world.mdnrnn, *other_ms(cfg, run, "worlds")]
    series = run_series(cfg, run) if kw["branch_share"] > 0 else None
    evs = [
        DreamEvaluator(
            m,
            world.controller,
            world.initial_mu,
            world.initial_logvar,
            cfg.dream.temperature,
            cfg.dream.max_steps,
            branches=None if series is None else run_branches(cfg, m, series),
            **kw,
        )
        for m in ms
    ]
    return evs[0] if len(evs) == 1 else DreamEnsemble(evs)


def done_options(cfg: Config) -> dict[str, Any]:
    """How a dream of this config decides a death: `dream.done_sampling` and what M's done head was trained on
    (`mdnrnn.done_weight`, `mdnrnn.done_horizon`); keywords of DreamEvaluator and DreamEnv."""
    m = cfg.mdnrnn
    return {"done_sampling": cfg.dream.done_sampling, "done_weight": m.done_weight, "done_horizon": int(m.done_horizon)}


def dream_options(cfg: Config) -> dict[str, Any]:
    """A run's dreams as C trains in them: `done_options` plus where they start (`dream.start`, `dream.branch_share`,
    `dream.branch_steps`; the branch table itself is per M, built by the caller) and `dream.pessimism` (the critics'
    Ms: `other_ms`)."""
    d = cfg.dream
    return done_options(cfg) | {
        "start": d.start,
        "branch_share": float(d.branch_share),
        "branch_steps": int(d.branch_steps),
        "pessimism": float(d.pessimism),
    }


def run_series(cfg: Config, run: RunDir) -> Series:
    """The run's encoded series (M's training data), read for branch states (`dream.branch_share`)."""
    from wm.data.sequences import load_series
    from wm.envs import action_dim

    return load_series(
        run.series_dir,
        int(cfg.vae.z_dim),
        action_dim(cfg),
        max_bad_share=float(cfg.data.max_bad_share),
        dones=bool(cfg.mdnrnn.predict_done),
    )


def run_branches(cfg: Config, mdnrnn: MDNRNN, series: Series) -> Branches:
    """`dream.branch_states` branch states of `mdnrnn` over the newest `dream.branch_episodes` of the series (within
    `dream.branch_window` frames of a death when > 0), drawn from `run.seed` (every MPI rank builds the same table)."""
    d = cfg.dream
    return branch_states(mdnrnn, series, int(d.branch_states), int(d.branch_episodes), int(cfg.run.seed), int(d.branch_window))


def dream_env(cfg: Config, run: RunDir, params: np.ndarray | None = None) -> DreamEnv:
    """A single DreamEnv of the run at `dream.temperature` (M and initial z's through `wm.world.load_world`)."""
    from wm.world import load_world

    return world_env(load_world(cfg, run, need=("mdnrnn", "initial_z")), params)


def world_env(world: World, params: np.ndarray | None = None) -> DreamEnv:
    """A DreamEnv over a loaded world (M and initial z's) with its config's dream settings."""
    cfg = world.cfg
    return DreamEnv(
        world.mdnrnn,
        world.controller,
        world.initial_mu,
        world.initial_logvar,
        cfg.dream.temperature,
        cfg.dream.max_steps,
        params=params,
        branches=run_branches(cfg, world.mdnrnn, run_series(cfg, world.run)) if cfg.dream.branch_share > 0 else None,
        critics=other_ms(cfg, world.run, "critics"),
        **dream_options(cfg),
    )
