"""Real-env rollouts (wm.rollout) on a stand-in env: a non-finite action, z or h is caught, not stepped into the env."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from wm import config as C  # noqa: E402
from wm.errors import WMError  # noqa: E402
from wm.models.controller import Controller  # noqa: E402
from wm.models.mdnrnn import MDNRNN  # noqa: E402
from wm.models.vae import ConvVAE  # noqa: E402
from wm.rollout import RealEvaluator  # noqa: E402

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

    def close(self):
        pass


@pytest.fixture()
def agent(monkeypatch):
    import keras

    import wm.envs

    monkeypatch.setattr(wm.envs, "make_env", lambda cfg, keep_raw=False: FakeEnv())
    keras.utils.set_random_seed(0)
    vae, m = ConvVAE(Z), MDNRNN(Z, 1, H, 3, predict_done=True)
    vae.encode(np.zeros((1, 64, 64, 3), np.uint8))
    m.step(np.zeros((1, Z), np.float32), np.zeros((1, 1), np.float32), m.initial_state(1), np.ones(1, np.float32))
    ctl = Controller("zch", Z, H, 1, bias=False)
    params = np.random.default_rng(0).normal(0, 0.5, (2, ctl.n_params)).astype(np.float32)
    return C.defaults(), vae, m, ctl, params


def _evaluate(cfg, vae, m, ctl, params, seeds):
    ev = RealEvaluator(cfg, vae, m, ctl, n_envs=2, should_stop=lambda: False)
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
