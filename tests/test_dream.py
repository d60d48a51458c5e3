"""The dream (paper settings §5): batched evaluator vs single DreamEnv, determinism, batch independence, caps."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from tests.helpers import tiny_cfg  # noqa: E402
from wm.core.errors import WMError  # noqa: E402
from wm.envs.setup import setup  # noqa: E402
from wm.models.controller import Controller  # noqa: E402
from wm.models.mdnrnn import MDNRNN  # noqa: E402
from wm.rollouts.dream import _S_EPS, DreamEnv, DreamEvaluator, load_dream, normal, uniform  # noqa: E402

CAP = 40


@pytest.fixture(scope="module")
def world():
    import keras

    keras.utils.set_random_seed(0)
    m = MDNRNN(6, 1, 12, num_mixtures=3, predict_done=True)
    rng = np.random.default_rng(0)
    # a done logit that fires now and then, so episodes end at different steps
    b = m.out_bias.numpy()
    b[0] = -2.0
    m.out_bias.assign(b)
    w = m.out_kernel.numpy()
    w[:, 0] = rng.normal(0, 3.0, 12)
    m.out_kernel.assign(w)
    c = Controller("zch", 6, 12, 1, bias=False)
    mu0 = rng.normal(size=(5, 6)).astype(np.float32)
    lv0 = np.full((5, 6), -2.0, np.float32)
    return m, c, mu0, lv0


def _never_dies(m):
    """A copy of the fixture's M whose done logit never fires: episodes run to the cap."""
    never = MDNRNN(6, 1, 12, num_mixtures=3, predict_done=True)
    never.set_weights(m.get_weights())
    bias = never.out_bias.numpy()
    bias[0] = -1e4
    never.out_bias.assign(bias)
    return never


def _params(c, p, seed=1):
    return np.random.default_rng(seed).normal(0, 0.5, (p, c.n_params)).astype(np.float32)


def test_evaluator_matches_dream_env_on_the_same_seed(world):
    m, c, mu0, lv0 = world
    ev = DreamEvaluator(m, c, mu0, lv0, 1.25, CAP, compact_every=3)
    params = _params(c, 3)
    seeds = np.arange(12, dtype=np.int64).reshape(3, 4) * 7919 + 11
    returns, lengths = ev.evaluate(params, seeds)
    assert returns.dtype == np.float64 and lengths.dtype == np.int64 and returns.shape == (3, 4)
    assert len(set(lengths.ravel())) > 1 and lengths.max() <= CAP and lengths.min() >= 1
    np.testing.assert_array_equal(returns, lengths)  # +1 per step including the terminal one (§5)
    env = DreamEnv(m, c, mu0, lv0, 1.25, CAP)
    for p in range(3):
        for k in range(4):
            env.reset(seed=int(seeds[p, k]), params=params[p])
            total, done = 0.0, False
            while not done:
                _, r, term, trunc, _ = env.step()
                total += r
                done = term or trunc
            assert total == returns[p, k], (p, k)


def test_dropout_masks_are_drawn_per_episode_and_kept_to_its_end(world):
    """M's dropout in the dream (DDL): each episode's masks come from its seed only (the same in any batch, the same
    for DreamEnv, which draws them once at reset), differ across episodes, and change the dream."""
    m, c, mu0, lv0 = world
    d = MDNRNN(6, 1, 12, num_mixtures=3, predict_done=True, dropout=0.3)
    d.set_weights(m.get_weights())
    ev = DreamEvaluator(d, c, mu0, lv0, 1.25, CAP, compact_every=3)
    seeds = np.arange(12, dtype=np.int64).reshape(3, 4) * 7919 + 11
    mz, mh = (x.numpy() for x in ev.core.masks(tf.constant(seeds.ravel())))
    assert mz.shape == (12, 6) and mh.shape == (12, 12)
    assert len({row.tobytes() for row in mh}) == 12  # every episode its own mask
    assert abs((np.concatenate([mz, mh], 1) == 0).mean() - 0.3) < 0.1
    np.testing.assert_array_equal(ev.core.masks(tf.constant(seeds.ravel()[::-1].copy()))[1].numpy(), mh[::-1])
    assert ev.core.masks(tf.constant(seeds.ravel()))[0].shape == (12, 6)
    assert DreamEvaluator(m, c, mu0, lv0, 1.25, CAP).core.masks(tf.constant(seeds.ravel()))[1].shape == (12, 0)

    params = _params(c, 3)
    _, lengths = ev.evaluate(params, seeds)
    _, plain = DreamEvaluator(m, c, mu0, lv0, 1.25, CAP, compact_every=3).evaluate(params, seeds)
    assert (lengths != plain).any()  # the masks change the dream
    _, one = ev.evaluate(params[2:3], seeds[2:3, 1:2])
    assert one[0, 0] == lengths[2, 1]  # a function of the episode's seed, whatever its batch
    env = DreamEnv(d, c, mu0, lv0, 1.25, CAP)
    for p, k in [(0, 0), (1, 3), (2, 1)]:
        env.reset(seed=int(seeds[p, k]), params=params[p])
        n, done = 0, False
        while not done:
            _, _, term, trunc, _ = env.step()
            n, done = n + 1, term or trunc
        assert n == lengths[p, k], (p, k)


def test_dream_pays_the_reward_head(world):
    """With a reward head (CarRacing in the dream) a dream episode returns the sum of M's predicted rewards: the
    head's bias alone pays exactly bias × length, and any head pays what DreamEnv's steps report."""
    m, c, mu0, lv0 = world
    r = MDNRNN(6, 1, 12, num_mixtures=3, predict_done=True, predict_reward=True)
    ws = m.get_weights()  # lstm x, lstm h, lstm bias, out kernel, out bias: the reward column goes after done's
    kernel = np.insert(ws[3], 1, 0.0, axis=1)
    bias = np.insert(ws[4], 1, 0.25, axis=0)
    r.set_weights([*ws[:3], kernel, bias])
    params, seeds = _params(c, 3), np.arange(12, dtype=np.int64).reshape(3, 4) * 31 + 5
    plain_returns, plain = DreamEvaluator(m, c, mu0, lv0, 1.25, CAP).evaluate(params, seeds)
    returns, lengths = DreamEvaluator(r, c, mu0, lv0, 1.25, CAP).evaluate(params, seeds)
    np.testing.assert_array_equal(lengths, plain)  # the MDN and done columns are untouched
    np.testing.assert_allclose(returns, 0.25 * lengths, rtol=1e-6)
    assert (plain_returns == plain).all()  # without the head: +1 per step (§5)

    kernel[:, 1] = np.random.default_rng(4).normal(0, 1.0, 12)
    r.set_weights([*ws[:3], kernel, bias])
    returns, lengths = DreamEvaluator(r, c, mu0, lv0, 1.25, CAP, compact_every=2).evaluate(params, seeds)
    env = DreamEnv(r, c, mu0, lv0, 1.25, CAP)
    for p, k in [(0, 1), (2, 3)]:
        env.reset(seed=int(seeds[p, k]), params=params[p])
        total, n, done = 0.0, 0, False
        while not done:
            _, rew, term, trunc, _ = env.step()
            total, n, done = total + rew, n + 1, term or trunc
        assert n == lengths[p, k] and total == pytest.approx(returns[p, k], rel=1e-4, abs=1e-4)
        assert abs(total - n) > 1e-3  # not +1 per step


def test_deterministic_and_independent_of_the_batch(world):
    m, c, mu0, lv0 = world
    ev = DreamEvaluator(m, c, mu0, lv0, 1.25, CAP, compact_every=1)
    params = _params(c, 4, seed=2)
    seeds = np.random.default_rng(5).integers(0, 2**62, (4, 3))
    r1, l1 = ev.evaluate(params, seeds)
    r2, l2 = ev.evaluate(params, seeds)
    np.testing.assert_array_equal(l1, l2)
    # the same (params, seed) pairs in another order and another batch size give the same episodes
    r3, l3 = ev.evaluate(params[[2, 0]], seeds[[2, 0]][:, ::-1].copy())
    np.testing.assert_array_equal(l3, l1[[2, 0]][:, ::-1])
    r4, l4 = ev.evaluate(params[1:2], seeds[1:2, 1:2])
    assert l4[0, 0] == l1[1, 1]
    # different seeds give different episodes
    _, l5 = ev.evaluate(params, seeds + 1)
    assert (l5 != l1).any()


def test_cap_and_start_states(world):
    m, c, mu0, lv0 = world
    never = _never_dies(m)
    ev = DreamEvaluator(never, c, mu0, lv0, 1.0, 17)
    r, n = ev.evaluate(_params(c, 2), np.array([[1, 2], [3, 4]]))
    assert (n == 17).all() and (r == 17).all()
    env = DreamEnv(never, c, mu0, lv0, 1.0, 17)
    env.reset(seed=3)
    # the start z is μ + σ·ε of one initial_z entry (σ = e^{−1}: within 5σ of some μ)
    assert np.min(np.abs(env.z[None] - mu0).max(-1)) < 5 * np.exp(-1.0)
    for _ in range(16):
        assert env.step(np.zeros(1))[3] is False
    assert env.step(np.zeros(1))[3] is True  # truncated at the cap


def test_hash_rng_is_uniform_and_keyed():
    u = uniform(tf.constant(np.arange(2000), tf.int64), tf.constant(7, tf.int64), 3, 16).numpy()
    assert 0.0 < u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.std() - np.sqrt(1 / 12)) < 0.01
    v = uniform(tf.constant(np.arange(2000), tf.int64), tf.constant(8, tf.int64), 3, 16).numpy()
    assert abs(np.corrcoef(u.ravel(), v.ravel())[0, 1]) < 0.03


def test_hash_rng_stays_inside_the_unit_interval():
    # The reviewer's case: seed 192366, step 1, the ε stream, column 7 hashes to the top value. Mapped with 24 bits,
    # (2^24 − 1 + 0.5)·2^−24 rounds to 1.0 in float32 and ndtri(1) = +inf entered z; 23 bits stay strictly inside.
    seeds, t = tf.constant([192366], tf.int64), tf.constant(1, tf.int64)
    u = uniform(seeds, t, _S_EPS, 8).numpy()
    assert 0.0 < u[0, 7] < 1.0 and u[0, 7] == np.float32(1.0 - 2.0**-24)
    assert np.isfinite(normal(seeds, t, _S_EPS, 8).numpy()).all()


def test_non_finite_state_is_detected(world):
    m, c, mu0, lv0 = world
    params = _params(c, 2)
    params[1, 3] = np.nan  # member 1's controller: its actions go NaN on the first step
    ev = DreamEvaluator(m, c, mu0, lv0, 1.0, CAP)
    with pytest.raises(WMError, match=r"non-finite action.* at step 0 of member 1, seed 13 \(2 of 4 episodes\)"):
        ev.evaluate(params, np.array([[11, 12], [13, 14]]))
    env = DreamEnv(m, c, mu0, lv0, 1.0, CAP, params=params[1])
    env.reset(seed=13)
    with pytest.raises(WMError, match="non-finite action"):
        env.step()
    # an M whose mixture means are NaN: z' goes non-finite (the action of step 0 and h' are still finite)
    broken = MDNRNN(6, 1, 12, num_mixtures=3, predict_done=True)
    broken.set_weights(m.get_weights())
    b = broken.out_bias.numpy()
    b[:] = np.nan
    b[0] = -2.0  # keep the done logit finite
    broken.out_bias.assign(b)
    with pytest.raises(WMError, match=r"non-finite z at step 0 of member 0, seed 11"):
        DreamEvaluator(broken, c, mu0, lv0, 1.0, CAP).evaluate(params[:1], np.array([[11, 12]]))
    env = DreamEnv(broken, c, mu0, lv0, 1.0, CAP)
    env.reset(seed=11)
    with pytest.raises(WMError, match="non-finite z"):
        env.step(np.zeros(1))


def test_car_controller_actions_are_post_processed(world):
    m = MDNRNN(6, 3, 12, num_mixtures=3)
    c = Controller("zh", 6, 12, 3, bias=True)
    ev = DreamEvaluator(m, c, np.zeros((2, 6)), np.zeros((2, 6)), 0.7, 5)
    r, n = ev.evaluate(_params(c, 2), np.array([[1], [2]]))
    assert (n == 5).all()  # no done head: episodes run to the cap
    env = DreamEnv(m, c, np.zeros((2, 6)), np.zeros((2, 6)), 0.7, 5, params=_params(c, 1)[0])
    env.reset(seed=1)
    a = env.step()[4]["action"]
    assert 0.0 <= a[1] <= 1.0 and 0.0 <= a[2] <= 1.0


def test_load_dream_refuses_missing_files(tmp_path):
    from wm.core.config import defaults
    from wm.core.rundir import RunDir

    with pytest.raises(WMError, match="M weights"):
        load_dream(setup(defaults()), RunDir(tmp_path))


def test_done_sampling_threshold_vs_bernoulli(world):
    # A done logit pinned at log(1/9) (p = 0.1 per step): the paper's cutoff (logit > 0) never ends an episode,
    # Bernoulli sampling ends them after ≈ 1/p = 10 steps on average (geometric), and the two agree on DreamEnv.
    m, c, mu0, lv0 = world
    hazard = MDNRNN(6, 1, 12, num_mixtures=3, predict_done=True)
    hazard.set_weights(m.get_weights())
    w, b = hazard.out_kernel.numpy(), hazard.out_bias.numpy()
    w[:, 0], b[0] = 0.0, np.log(0.1 / 0.9)
    hazard.out_kernel.assign(w)
    hazard.out_bias.assign(b)
    seeds = np.arange(400, dtype=np.int64).reshape(4, 100)
    cut = DreamEvaluator(hazard, c, mu0, lv0, 1.0, 200)
    assert (cut.evaluate(_params(c, 4), seeds)[1] == 200).all()
    sampled = DreamEvaluator(hazard, c, mu0, lv0, 1.0, 200, done_sampling="bernoulli")
    lengths = sampled.evaluate(_params(c, 4), seeds)[1]
    assert 8.5 < lengths.mean() < 11.5  # mean of a geometric(0.1) over 400 episodes: 10 ± 0.45
    env = DreamEnv(hazard, c, mu0, lv0, 1.0, 200, params=_params(c, 4)[2], done_sampling="bernoulli")
    env.reset(seed=int(seeds[2, 7]))
    t = 1
    while not env.step(None)[2]:
        t += 1
    assert t == lengths[2, 7]
    # trained with deaths weighted ×10, the same head means p = 0.1/(10 − 0.9) ≈ 0.011 at the data's own rate:
    # Bernoulli takes log 10 off the logit, so episodes last ≈ 91 steps, not 10
    weighted = DreamEvaluator(hazard, c, mu0, lv0, 1.0, 1000, done_sampling="bernoulli", done_weight=10.0)
    assert 80 < weighted.evaluate(_params(c, 4), seeds)[1].mean() < 102  # geometric(1/91) over 400: 91 ± 4.5
    # a head trained on "dies within 8 steps" (mdnrnn.done_horizon 8) with P = 0.1 means a per-step hazard
    # 1 − 0.9^(1/8) ≈ 0.0131: episodes last ≈ 76 steps, not 10 (the cutoff ignores the horizon)
    horizon = DreamEvaluator(hazard, c, mu0, lv0, 1.0, 1000, done_sampling="bernoulli", done_horizon=8)
    assert 68 < horizon.evaluate(_params(c, 4), seeds)[1].mean() < 84  # geometric(0.0131) over 400: 76 ± 3.8
    assert (DreamEvaluator(hazard, c, mu0, lv0, 1.0, 200, done_horizon=8).evaluate(_params(c, 4), seeds)[1] == 200).all()
    with pytest.raises(WMError, match="done_horizon"):
        DreamEvaluator(hazard, c, mu0, lv0, 1.0, 200, done_horizon=0)
    with pytest.raises(WMError, match="done_sampling"):
        DreamEvaluator(hazard, c, mu0, lv0, 1.0, 200, done_sampling="coin")


@pytest.mark.parametrize("env", ["carracing", "atari_boxing"])
def test_a_dream_outside_doom_needs_the_reward_head(tmp_path, env):
    """Without M's reward head a dream pays +1 per step (DoomTakeCover's reward): refused, one line, for CarRacing and
    any gym env (Boxing without a done head would also run every dream to the cap: every member scores the same)."""
    from wm.core.rundir import RunDir
    from wm.stages.contract import stage_input
    from wm.stages.train_controller import check_upstream

    cfg = tiny_cfg("es.fitness=dream", "mdnrnn.predict_reward=false", env=env)
    run = RunDir(tmp_path / "run")
    run.bind_config(cfg)
    run.stage_dir("train-mdnrnn").mkdir(parents=True)
    run.mark_done("train-mdnrnn", {})
    with pytest.raises(WMError, match=r"needs M's reward head \(mdnrnn.predict_reward: true"):
        check_upstream(stage_input(cfg, "train-controller"), run)
