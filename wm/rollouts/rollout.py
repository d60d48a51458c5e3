"""Real-env rollouts of the full agent (V + M + C), several envs stepped together so V and M run batched.

`RealEvaluator.evaluate(params (P, n), seeds (P, K)) -> (returns (P, K), lengths (P, K))`, the same signature as
the dream's evaluator: every (member, seed) episode is queued and `n_envs` envs take the next episode as they
finish one, so short episodes do not leave a slot idle. Per step, for all slots at once, one compiled graph does
(docs/paper-settings.md §6): encode obs_t with V → z_t = μ + σ·ε (a **sampled** z, not μ; ε from the episode's seed)
→ a_t = C([z_t, state_t]) with each slot's own parameters → M step with (z_t, m_action(a_t)) (restart = 1 on an
episode's first step, §4) → then each env steps with a_t (in Doom-real M is updated before `env.step`, §6).
The graph has a fixed batch of `n_envs` (idle slots are padded), so it is traced once: no per-step eager calls
or Keras `predict` (peers.md §5: per-step batch-1 model calls were the authors' and ports' bottleneck), and it is
called as a concrete function. Per step the loop's own Python is ≈ 0.03 ms an env step (bench/carracing.py): ε
comes from blocks drawn `EPS_BLOCK` steps at a time, one gather for all slots. The graph's cost is mostly V's
convolutions, cheaper per frame in larger batches: ≈ 0.8 ms a frame at 4 envs, ≈ 0.45 at 16 (one core).

An episode's result depends only on its seed and parameters: `env.reset(seed=seed)` and ε drawn from
`default_rng(seed)`; bit for bit the same for any `n_envs` ≥ 2 (checked 2–16), while `n_envs` = 1 (recordings)
differs in z's last bits (TF's batch-1 kernels round differently). The evaluation engine (`wm.rollouts.engine`) builds it
for `evaluate` and real-env `train-controller`.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from wm.core.errors import WMError

if TYPE_CHECKING:  # annotations only
    from wm.core.rundir import RunDir
    from wm.envs.setup import Setup


def agent_step(vae: Any, m: Any, ctrl: Any, obs, eps, c, h, params, fresh, override=None, use_override=None):
    """One real-env step of the V + M + C agent for a batch, in TF: returns (action, z, c', h').

    A fresh slot starts from the zero state (§4); z = μ + σ·ε is sampled, not μ (§6; peers.md §4 F), unless C reads
    μ (`controller.z_input: mean`, ctallec's port: C and M both get μ and ε is not used); C acts in
    controller space (the env wrapper post-processes itself) unless `use_override` picks `override` (the agent
    data policy's random segments, `wm.rollouts.agent`); M is stepped with what the env applies (§6), restart = fresh.
    """
    import tensorflow as tf

    keep = (1.0 - fresh)[:, None]
    c, h = c * keep, h * keep
    mu, logvar = vae.encode(obs)
    z = mu if ctrl.z_input == "mean" else mu + tf.exp(logvar / 2.0) * eps
    a = ctrl.act_tf(params, z, c, h, postprocess=False)
    if override is not None:
        a = tf.where(use_override, override, a)
    _, (c, h) = m.step(z, ctrl.postprocess_tf(a), (c, h), fresh if m.predict_done else None)
    return a, z, c, h


NONFINITE = ("action", "z", "h")
EPS_BLOCK = 128  # steps of ε drawn at once per episode (RealEvaluator.evaluate)


def nonfinite_flags(action, z, h):
    """Per row (N,) int32 bits, 1: action, 2: z, 4: h holds a NaN/inf (three row reductions: cheap next to M)."""
    import tensorflow as tf

    bits = [
        tf.cast(tf.logical_not(tf.reduce_all(tf.math.is_finite(x), axis=-1)), tf.int32) * (1 << i)
        for i, x in enumerate((action, z, h))
    ]
    return bits[0] + bits[1] + bits[2]


def nonfinite_names(bits: int) -> str:
    """'action, z' for the bits of `nonfinite_flags`."""
    return ", ".join(name for i, name in enumerate(NONFINITE) if int(bits) >> i & 1)


@dataclass
class _Slots:
    """The episodes of one `RealEvaluator.evaluate`: the queue of (member, seed) jobs and each env slot's state."""

    params: np.ndarray  # (P, n) float32
    seeds: np.ndarray  # (P, K) int64
    record: int
    no_progress: int
    jobs: collections.deque
    job: list[tuple[int, int] | None]
    rngs: list[np.random.Generator | None]
    # ε of each slot's episode, drawn EPS_BLOCK steps at a time: the same numbers, in the same order, as one
    # `standard_normal(z)` per step (float64, then float32); an idle slot reads zeros
    eps_buf: np.ndarray
    eps_pos: np.ndarray
    slots: np.ndarray
    obs: np.ndarray
    prm: np.ndarray
    fresh: np.ndarray
    ret: np.ndarray
    steps: np.ndarray
    tiles: np.ndarray  # no_progress: tiles seen …
    stalled: np.ndarray  # … and steps since a new one
    rec_id: list[int]

    @classmethod
    def empty(
        cls, E: int, zd: int, n_params: int, params: np.ndarray, seeds: np.ndarray, record: int, no_progress: int
    ) -> _Slots:
        """`E` idle slots and every (member, seed) episode of `seeds` queued, member by member."""
        P, K = seeds.shape
        return cls(
            params,
            seeds,
            record,
            no_progress,
            jobs=collections.deque((i, k) for i in range(P) for k in range(K)),
            job=[None] * E,
            rngs=[None] * E,
            eps_buf=np.zeros((E, EPS_BLOCK, zd), np.float32),
            eps_pos=np.zeros(E, np.intp),
            slots=np.arange(E),
            obs=np.zeros((E, 64, 64, 3), np.uint8),
            prm=np.zeros((E, n_params), np.float32),
            fresh=np.zeros(E, np.float32),
            ret=np.zeros(E),
            steps=np.zeros(E, np.int64),
            tiles=np.zeros(E, np.int64),
            stalled=np.zeros(E, np.int64),
            rec_id=[-1] * E,
        )


def _refuse_nonfinite(s: _Slots, active: list[int], bad: np.ndarray) -> None:
    """The WMError for the first active slot whose action, z or h came out non-finite (`nonfinite_flags`)."""
    for e in active:
        if bad[e]:
            i, k = s.job[e]
            raise WMError(
                f"real rollout: non-finite {nonfinite_names(bad[e])} at step {s.steps[e]} of member {i}, "
                f"seed {s.seeds[i, k]}; check V's and M's weights and the controller params"
            )


class RealEvaluator:
    """V + M + C agents in `n_envs` real envs of a setup's game, stepped together (see the module docstring)."""

    def __init__(
        self,
        facts: Setup,
        vae: Any,
        mdnrnn: Any,
        controller: Any,
        n_envs: int = 4,
        keep_raw: bool = False,
        should_stop: Callable[[], bool] | None = None,
    ):
        import tensorflow as tf

        if controller.z_dim != mdnrnn.z_dim or controller.hidden != mdnrnn.hidden:
            raise WMError(f"{controller} does not fit M (z {mdnrnn.z_dim}, hidden {mdnrnn.hidden})")
        self.vae, self.m, self.c = vae, mdnrnn, controller
        self.n_envs, self.keep_raw = max(1, int(n_envs)), keep_raw
        if should_stop is None:
            from wm.mpi import should_stop
        self.should_stop = should_stop
        self.envs = [facts.open(keep_raw=keep_raw) for _ in range(self.n_envs)]
        E, zd, H = self.n_envs, mdnrnn.z_dim, mdnrnn.hidden
        spec = [
            tf.TensorSpec((E, 64, 64, 3), tf.uint8),
            tf.TensorSpec((E, zd), tf.float32),
            tf.TensorSpec((E, H), tf.float32),
            tf.TensorSpec((E, H), tf.float32),
            tf.TensorSpec((E, controller.n_params), tf.float32),
            tf.TensorSpec((E,), tf.float32),
        ]
        # the concrete function: called directly, it skips tf.function's argument binding (≈ 0.3 ms a call)
        # autograph=False, as for every graph wm traces: its loops are written as tf.while_loop and tf.cond, and
        # AutoGraph's conversion of each Keras call traced costs ≈ 0.8 s of CPU per process that builds this
        self._step = tf.function(self._graph, input_signature=spec, autograph=False).get_concrete_function()
        # recorded episodes of the last evaluate (record > 0): frames (reset + every step; raw screens with
        # keep_raw), and per step V's 64×64 input and the sampled z the agent acted on
        self.frames: list[list[np.ndarray]] = []
        self.inputs: list[list[np.ndarray]] = []
        self.latents: list[list[np.ndarray]] = []
        # what the env measured of each episode of the last evaluate beside its return (`FrameEnv.episode_figures`,
        # CarRacing's tiles, lap, speed, gas, brake): (P, K) nested lists of dicts
        self.figures: list[list[dict[str, float]]] = []

    @classmethod
    def from_run(cls, facts: Setup, run: RunDir, n_envs: int = 4, keep_raw: bool = False) -> RealEvaluator:
        """Load V and M of a run (`wm.rollouts.world.load_world`) and build the evaluator."""
        from wm.rollouts.world import load_world

        world = load_world(facts, run, need=("vae", "mdnrnn"))
        return cls(facts, world.vae, world.mdnrnn, world.controller, n_envs=n_envs, keep_raw=keep_raw)

    def _graph(self, obs, eps, c, h, params, fresh):
        a, z, c, h = agent_step(self.vae, self.m, self.c, obs, eps, c, h, params, fresh)
        return a, z, c, h, nonfinite_flags(a, z, h)

    def evaluate(
        self, params: np.ndarray, seeds: np.ndarray, record: int = 0, max_steps: int = 0, no_progress: int = 0
    ) -> tuple[np.ndarray, np.ndarray]:
        """Returns (returns float64 (P, K), lengths int64 (P, K)); keeps frames of the first `record` episodes.

        Training-time budgets (wm.es.budget; 0 = off): `max_steps` ends an episode after that many steps (below the
        env's own cap), `no_progress` ends a CarRacing episode after that many steps without a new track tile."""
        import tensorflow as tf

        params = np.atleast_2d(np.asarray(params, np.float32))
        seeds = np.atleast_2d(np.asarray(seeds, np.int64))
        P, K = seeds.shape
        if params.shape != (P, self.c.n_params):
            raise WMError(f"params shape {params.shape} does not fit seeds {seeds.shape} and {self.c}")
        E, zd, H = self.n_envs, self.m.z_dim, self.m.hidden
        returns, lengths = np.zeros((P, K)), np.zeros((P, K), np.int64)
        self.figures = [[{} for _ in range(K)] for _ in range(P)]
        s = _Slots.empty(E, zd, self.c.n_params, params, seeds, record, no_progress)
        job, rngs, eps_buf, eps_pos, slots, rec_id = s.job, s.rngs, s.eps_buf, s.eps_pos, s.slots, s.rec_id
        obs, prm, fresh, ret, steps, tiles, stalled = s.obs, s.prm, s.fresh, s.ret, s.steps, s.tiles, s.stalled
        self.frames, self.inputs, self.latents = [], [], []
        c = h = tf.zeros((E, H), tf.float32)
        envs, step_graph, should_stop = self.envs, self._step, self.should_stop

        for e in range(E):
            self._start(s, e)
        active = [e for e in range(E) if job[e] is not None]
        while active:
            if should_stop():
                raise KeyboardInterrupt
            for e in np.flatnonzero(eps_pos == EPS_BLOCK):
                r = rngs[e]
                eps_buf[e] = 0.0 if r is None else r.standard_normal((EPS_BLOCK, zd))
                eps_pos[e] = 0
            eps = eps_buf[slots, eps_pos]
            eps_pos += 1
            a, z, c, h, bad = step_graph(obs, eps, c, h, prm, fresh)
            a, bad = a.numpy(), bad.numpy()
            if bad.any():  # before any env takes a NaN action (or a NaN state runs on unnoticed)
                _refuse_nonfinite(s, active, bad)
            recording = max(rec_id) >= 0
            if recording:
                z = z.numpy()  # latents only while recording
            fresh[:] = 0.0
            ended = False
            for e in active:
                env = envs[e]
                if recording and rec_id[e] >= 0:
                    self.inputs[rec_id[e]].append(obs[e].copy())
                    self.latents[rec_id[e]].append(z[e])
                o, r, term, trunc, info = env.step(a[e])
                obs[e] = o
                ret[e] += r
                steps[e] += 1
                if recording and rec_id[e] >= 0:
                    self.frames[rec_id[e]].append(info["raw"] if self.keep_raw else o)
                if no_progress:
                    seen = env.progress()
                    stalled[e] = 0 if seen > tiles[e] else stalled[e] + 1
                    tiles[e] = seen
                    trunc = trunc or stalled[e] >= no_progress
                if term or trunc or (max_steps and steps[e] >= max_steps):
                    i, k = job[e]
                    returns[i, k], lengths[i, k] = ret[e], steps[e]
                    self.figures[i][k] = env.episode_figures()
                    self._start(s, e)
                    ended = True
            if ended:
                active = [e for e in range(E) if job[e] is not None]
        return returns, lengths

    def _start(self, s: _Slots, e: int) -> None:
        """Slot `e` takes the next queued episode (env reset, ε's generator, a recording while `record` wants one), or
        idles when the queue is empty."""
        s.eps_pos[e] = EPS_BLOCK  # drawn at the episode's first step
        if not s.jobs:
            s.job[e] = s.rngs[e] = None
            return
        i, k = s.job[e] = s.jobs.popleft()
        seed = int(s.seeds[i, k])
        env = self.envs[e]
        o, info = env.reset(seed=seed)
        s.obs[e], s.prm[e], s.fresh[e], s.ret[e], s.steps[e] = o, s.params[i], 1.0, 0.0, 0
        s.tiles[e], s.stalled[e] = env.progress() if s.no_progress else 0, 0
        s.rngs[e] = np.random.default_rng(seed)
        s.rec_id[e] = -1
        if len(self.frames) < s.record:
            s.rec_id[e] = len(self.frames)
            self.frames.append([info["raw"] if self.keep_raw else o])
            self.inputs.append([])
            self.latents.append([])

    def close(self) -> None:
        """Close every env (ViZDoom's child processes go with them)."""
        for env in self.envs:
            env.close()
        self.envs = []
