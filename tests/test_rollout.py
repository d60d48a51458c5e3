"""Real-env rollouts (wm.rollouts.rollout) on a stand-in env: a non-finite action, z or h is caught, not stepped into
the env."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from wm.core import config as C  # noqa: E402
from wm.core.errors import WMError  # noqa: E402
from wm.envs.setup import setup  # noqa: E402
from wm.models.controller import Controller  # noqa: E402
from wm.models.mdnrnn import MDNRNN  # noqa: E402
from wm.models.vae import ConvVAE  # noqa: E402
from wm.rollouts.rollout import RealEvaluator  # noqa: E402

Z, H, LEN = 4, 8, 5


class FakeEnv:
    """uint8 (64, 64, 3) frames keyed by (seed, step); +1 per step; terminates after LEN steps; NaN actions refused."""

    def reset(self, seed=None):
        self.seed, self.t = int(seed), 0
        return self._obs(), {}

    def _obs(self):
        return np.random.default_rng([self.seed, self.t]).integers(0, 256, (64, 64, 3), dtype=np.uint8)

    def step(self, a):
        assert np.isfinite(a).all(), "a non-finite action reached the env"
        self.t += 1
        return self._obs(), 1.0, self.t >= LEN, False, {}

    def episode_figures(self):
        return {}

    def close(self):
        pass


@pytest.fixture()
def agent(monkeypatch):
    import keras

    import wm.envs

    monkeypatch.setattr(wm.envs, "make_env", lambda cfg, seed=None, keep_raw=False: FakeEnv())
    keras.utils.set_random_seed(0)
    vae, m = ConvVAE(Z), MDNRNN(Z, 1, H, 3, predict_done=True)
    vae.encode(np.zeros((1, 64, 64, 3), np.uint8))
    m.step(np.zeros((1, Z), np.float32), np.zeros((1, 1), np.float32), m.initial_state(1), np.ones(1, np.float32))
    ctl = Controller("zch", Z, H, 1, bias=False)
    params = np.random.default_rng(0).normal(0, 0.5, (2, ctl.n_params)).astype(np.float32)
    return C.defaults(), vae, m, ctl, params


def _evaluate(cfg, vae, m, ctl, params, seeds):
    ev = RealEvaluator(setup(cfg), vae, m, ctl, n_envs=2, should_stop=lambda: False)
    try:
        return ev.evaluate(params, seeds)
    finally:
        ev.close()


def test_finite_rollouts_run(agent):
    cfg, vae, m, ctl, params = agent
    returns, lengths = _evaluate(cfg, vae, m, ctl, params, np.array([[1, 2], [3, 4]]))
    assert (returns == LEN).all() and (lengths == LEN).all()


def test_non_finite_params_are_caught(agent):
    cfg, vae, m, ctl, params = agent
    params[1, 2] = np.nan
    with pytest.raises(WMError, match=r"non-finite action, h at step 0 of member 1, seed 3"):
        _evaluate(cfg, vae, m, ctl, params, np.array([[1, 2], [3, 4]]))


def test_non_finite_m_is_caught(agent):
    cfg, vae, m, ctl, params = agent
    broken = MDNRNN(Z, 1, H, 3, predict_done=True)
    broken.set_weights([np.full_like(w, np.nan) for w in m.get_weights()])
    # step 0 acts on V's z and the zero state (both finite); M's next h is NaN
    with pytest.raises(WMError, match=r"non-finite h at step 0 of member 0, seed 1"):
        _evaluate(cfg, vae, broken, ctl, params, np.array([[1, 2], [3, 4]]))


def test_non_finite_v_is_caught(agent):
    cfg, vae, m, ctl, params = agent
    broken = ConvVAE(Z)
    broken.encode(np.zeros((1, 64, 64, 3), np.uint8))
    broken.set_weights([np.full_like(w, np.nan) for w in vae.get_weights()])
    with pytest.raises(WMError, match=r"non-finite action, z, h at step 0 of member 0, seed 1"):
        _evaluate(cfg, broken, m, ctl, params, np.array([[1, 2], [3, 4]]))


class LongEnv(FakeEnv):
    """FakeEnv with episodes of 100 + 37·(seed mod 5) steps (longer than an ε block, ending at different steps) and
    reward = the action's sum, so returns follow the ε the agent drew."""

    def step(self, a):
        self.t += 1
        return self._obs(), float(np.sum(a)), self.t >= 100 + 37 * (self.seed % 5), False, {}


def _per_step_reference(ev, params, seeds):
    """The loop as it was before ε was drawn in blocks: one `standard_normal(z)` per step and episode, each episode
    in a slot of its own (no slot reuse). Returns (returns (P, K), each episode's sampled z per step)."""
    P, K = seeds.shape
    jobs = [(i, k) for i in range(P) for k in range(K)]
    E = len(jobs)
    assert ev.n_envs == E
    rngs = [np.random.default_rng(int(seeds[i, k])) for i, k in jobs]
    obs = np.stack([env.reset(seed=int(seeds[i, k]))[0] for env, (i, k) in zip(ev.envs, jobs, strict=True)])
    prm = np.stack([params[i] for i, _ in jobs]).astype(np.float32)
    fresh, ret, live = np.ones(E, np.float32), np.zeros(E), [True] * E
    c = h = tf.zeros((E, H), tf.float32)
    zs: list[list[np.ndarray]] = [[] for _ in range(E)]
    while any(live):
        eps = np.stack(
            [
                r.standard_normal(Z).astype(np.float32) if x else np.zeros(Z, np.float32)
                for r, x in zip(rngs, live, strict=True)
            ]
        )
        a, z, c, h, _ = ev._step(obs, eps, c, h, prm, fresh)
        a, z = a.numpy(), z.numpy()
        fresh[:] = 0.0
        for e in range(E):
            if live[e]:
                zs[e].append(z[e])
                obs[e], r, term, trunc, _ = ev.envs[e].step(a[e])
                ret[e] += r
                live[e] = not (term or trunc)
    return ret.reshape(P, K), zs


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_eps_drawn_in_blocks_gives_the_per_step_results(agent, monkeypatch):
    """ε is drawn EPS_BLOCK steps at a time: returns and every sampled z are those of one draw per step (bit-identical
    in the reference's batch; to float rounding with fewer envs: slots reused, episodes starting at different
    steps)."""
    import wm.envs
    from wm.rollouts.rollout import EPS_BLOCK

    monkeypatch.setattr(wm.envs, "make_env", lambda cfg, seed=None, keep_raw=False: LongEnv())
    cfg, vae, m, ctl, _ = agent
    params = np.random.default_rng(1).normal(0, 0.5, (3, ctl.n_params)).astype(np.float32)
    seeds = np.array([[10, 11], [12, 13], [14, 17]])  # lengths 100, 137, 174, 211, 248, 211: beyond EPS_BLOCK
    assert EPS_BLOCK < 248
    ref = RealEvaluator(setup(cfg), vae, m, ctl, n_envs=6, should_stop=lambda: False)
    try:
        want_returns, want_z = _per_step_reference(ref, params, seeds)
        for n_envs in (6, 2):
            ev = RealEvaluator(setup(cfg), vae, m, ctl, n_envs=n_envs, should_stop=lambda: False)
            try:
                returns, lengths = ev.evaluate(params, seeds, record=6)
            finally:
                ev.close()
            assert lengths.ravel().tolist() == [100 + 37 * (s % 5) for s in seeds.ravel()]
            # the reference's batch of 6: bit-identical. A batch of 2 runs other matmul kernels on some CPUs (AVX2
            # EPYC: ~1e-7 relative); an ε one step out of place moves z by σ·O(1), far beyond the tolerance
            check = np.testing.assert_array_equal if n_envs == 6 else _close
            check(returns, want_returns)
            for got, want in zip(ev.latents, want_z, strict=True):
                check(np.stack(got), np.stack(want))
    finally:
        ref.close()


@pytest.mark.parametrize("z_input", ["sampled", "mean"])
def test_c_and_m_read_mu_when_the_controller_says_so(agent, z_input):
    """`controller.z_input: mean`: every z the agent acted on (and stepped M with) is V's μ of that step's frame, so
    the episode's actions no longer depend on ε; `sampled` (the paper) moves z by σ·ε."""
    cfg, vae, m, _, params = agent
    ctl = Controller("zch", Z, H, 1, bias=False, z_input=z_input)
    ev = RealEvaluator(setup(cfg), vae, m, ctl, n_envs=2, should_stop=lambda: False)
    try:
        ev.evaluate(params, np.array([[1, 2], [3, 4]]), record=4)
    finally:
        ev.close()
    for inputs, latents in zip(ev.inputs, ev.latents, strict=True):
        mu, _ = vae.encode(np.stack(inputs))
        gap = np.abs(np.stack(latents) - mu.numpy()).max()
        assert (gap < 1e-5) if z_input == "mean" else (gap > 1e-2)  # μ batched otherwise: float rounding only


def test_the_z_input_is_the_configs_and_unknown_ones_are_refused():
    from wm.core.config import update

    cfg = update(C.defaults(), {"controller": {"z_input": "mean"}})
    assert Controller.from_setup(setup(cfg)).z_input == "mean"
    assert Controller.from_setup(setup(C.defaults())).z_input == "sampled"
    with pytest.raises(WMError, match="z_input 'mu' is not one of sampled, mean"):
        Controller("zch", Z, H, 1, bias=False, z_input="mu")
