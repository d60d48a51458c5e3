"""The dream (paper_settings §5): batched evaluator vs single DreamEnv, determinism, batch independence, caps."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from wm.dream import _S_EPS, _S_INIT, DreamEnv, DreamEvaluator, load_dream, normal, uniform  # noqa: E402
from wm.errors import WMError  # noqa: E402
from wm.models.controller import Controller  # noqa: E402
from wm.models.mdnrnn import MDNRNN  # noqa: E402

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


def _reward_m(m, bias, kernel_seed=None):
    """The fixture's M with a reward head after the done column: bias `bias`, a random kernel when `kernel_seed`."""
    r = MDNRNN(6, 1, 12, num_mixtures=3, predict_done=True, predict_reward=True)
    ws = m.get_weights()
    col = np.zeros(12) if kernel_seed is None else np.random.default_rng(kernel_seed).normal(0, 1.0, 12)
    r.set_weights([*ws[:3], np.insert(ws[3], 1, col, axis=1), np.insert(ws[4], 1, bias, axis=0)])
    return r


def test_critics_pay_mean_minus_k_std_of_the_heads(world):
    """`dream.critics` (issue 17): a critic M steps on the dreamed (z, a) and a step pays mean − k·std over M's reward
    head and the critics'; the dream itself (lengths) does not change; a critic equal to M changes nothing; DreamEnv
    pays what the evaluator pays; a critic that cannot judge (no reward head) or a branched start is refused."""
    m, c, mu0, lv0 = world
    params, seeds = _params(c, 3), np.arange(12, dtype=np.int64).reshape(3, 4) * 31 + 5
    r, low, high = _reward_m(m, 0.25), _reward_m(m, -0.25), _reward_m(m, 0.75)
    plain, lengths = DreamEvaluator(r, c, mu0, lv0, 1.25, CAP).evaluate(params, seeds)
    np.testing.assert_allclose(plain, 0.25 * lengths, rtol=1e-6)
    two, n2 = DreamEvaluator(r, c, mu0, lv0, 1.25, CAP, critics=[high]).evaluate(params, seeds)
    np.testing.assert_array_equal(n2, lengths)
    np.testing.assert_allclose(two, 0.25 * lengths, rtol=1e-5)  # heads 0.25 and 0.75, k = 1: their min
    np.testing.assert_allclose(
        DreamEvaluator(r, c, mu0, lv0, 1.25, CAP, critics=[high], pessimism=0.0).evaluate(params, seeds)[0],
        0.5 * lengths,
        rtol=1e-5,
    )
    # three heads 0.25, −0.25, 0.75: mean 0.25, population std sqrt(1/6), k = 2
    three = DreamEvaluator(r, c, mu0, lv0, 1.25, CAP, critics=[low, high], pessimism=2.0, compact_every=2)
    np.testing.assert_allclose(three.evaluate(params, seeds)[0], (0.25 - 2 * np.sqrt(1 / 6)) * lengths, rtol=1e-5)

    # heads that read h: the same M as a critic agrees step by step, so nothing is taken off
    rk, other = _reward_m(m, 0.1, kernel_seed=4), _reward_m(m, 0.1, kernel_seed=5)
    own, n_own = DreamEvaluator(rk, c, mu0, lv0, 1.25, CAP).evaluate(params, seeds)
    same, _ = DreamEvaluator(rk, c, mu0, lv0, 1.25, CAP, critics=[_reward_m(m, 0.1, kernel_seed=4)]).evaluate(params, seeds)
    np.testing.assert_allclose(same, own, rtol=1e-4, atol=1e-4)
    judged, n_j = DreamEvaluator(rk, c, mu0, lv0, 1.25, CAP, critics=[other], compact_every=2).evaluate(params, seeds)
    np.testing.assert_array_equal(n_j, n_own)
    assert (judged < own - 1e-3).all()  # two heads that differ: every episode paid less than M alone pays it
    env = DreamEnv(rk, c, mu0, lv0, 1.25, CAP, critics=[other])
    for p, k in [(0, 1), (2, 3)]:
        env.reset(seed=int(seeds[p, k]), params=params[p])
        total, done = 0.0, False
        while not done:
            _, rew, term, trunc, _ = env.step()
            total, done = total + rew, term or trunc
        assert total == pytest.approx(judged[p, k], rel=1e-4, abs=1e-4)

    with pytest.raises(WMError, match="critic M"):
        DreamEvaluator(rk, c, mu0, lv0, 1.25, CAP, critics=[m])
    with pytest.raises(WMError, match="need M's reward head"):
        DreamEvaluator(m, c, mu0, lv0, 1.25, CAP, critics=[rk])
    with pytest.raises(WMError, match="pessimism"):
        DreamEvaluator(rk, c, mu0, lv0, 1.25, CAP, critics=[other], pessimism=-1.0)


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
    from wm.config import defaults
    from wm.rundir import RunDir

    with pytest.raises(WMError, match="M weights"):
        load_dream(defaults(), RunDir(tmp_path))


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


def test_a_normal_start_draws_z_from_n01_whatever_was_recorded(world):
    # dream.start: normal (DDL's CarRacing dream) starts at the seed's ε ~ N(0, I): the recorded frame-0 z's play
    # no part, and DreamEnv starts the same; recorded starts are μ + σ·ε of an initial_z entry (§5)
    m, c, mu0, lv0 = world
    seeds = tf.constant(np.arange(6, dtype=np.int64) * 31 + 5)
    eps = normal(seeds, 0, _S_INIT, 6).numpy()
    for recorded in (mu0, mu0 + 50.0):
        z = DreamEvaluator(m, c, recorded, lv0, 1.0, CAP, start="normal").core.reset(seeds)[0].numpy()
        np.testing.assert_allclose(z, eps, rtol=0, atol=0)
    z = DreamEvaluator(m, c, mu0 + 50.0, lv0, 1.0, CAP).core.reset(seeds)[0].numpy()
    assert np.abs(z - 50.0).max() < 10.0  # recorded: around the (shifted) recorded μ's
    env = DreamEnv(m, c, mu0 + 50.0, lv0, 1.0, CAP, start="normal")
    env.reset(seed=int(seeds[3]))
    np.testing.assert_allclose(env.z, eps[3], rtol=0, atol=1e-6)  # compiled vs eager ndtri: 1 ulp
    with pytest.raises(WMError, match="dream.start"):
        DreamEvaluator(m, c, mu0, lv0, 1.0, CAP, start="zero")


@pytest.mark.parametrize("env", ["carracing", "atari_boxing"])
def test_a_dream_outside_doom_needs_the_reward_head(tmp_path, env):
    """Without M's reward head a dream pays +1 per step (DoomTakeCover's reward): refused, one line, for CarRacing and
    any gym env (Boxing without a done head would also run every dream to the cap: every member scores the same)."""
    from wm.config import load
    from wm.rundir import RunDir
    from wm.stages.train_controller import check_upstream

    cfg = load([env, "tiny"], ["es.fitness=dream", "mdnrnn.predict_reward=false"])
    run = RunDir(tmp_path / "run")
    run.bind_config(cfg)
    run.stage_dir("train-mdnrnn").mkdir(parents=True)
    run.mark_done("train-mdnrnn", {})
    with pytest.raises(WMError, match=r"needs M's reward head \(mdnrnn.predict_reward: true"):
        check_upstream(cfg, run)


def _series(lengths, seed=0):
    """A Series of episodes with z = μ (σ ≈ 0) and random actions, for branch states."""
    from wm.data.sequences import Series

    rng = np.random.default_rng(seed)
    n = int(sum(lengths))
    return Series(
        rng.normal(size=(n, 6)).astype(np.float16),
        np.full((n, 6), -40.0, np.float16),
        rng.uniform(-1, 1, (n, 1)).astype(np.float32),
        np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64),
        np.asarray(lengths, np.int64),
    )


def test_branch_states_are_m_teacher_forced_to_a_recorded_frame(world):
    """`dream.branch_share`'s table (issue 22): frame t0 ∈ [1, L − 2] of one of the newest episodes, its μ, and M's
    (c, h) after frames 0 … t0 − 1 — checked against M's own sequence call (restart on frame 0) on each prefix."""
    from wm.dream import branch_states

    m = world[0]
    s = _series([30, 25, 20])
    b = branch_states(m, s, 24, newest=2, seed=3)
    assert b.t0.min() >= 1 and b.c.shape == (24, 12) and b.h.shape == (24, 12)
    mu = s.mu.astype(np.float32)
    for i in range(24):
        # which episode: the row's μ is frame t0 of episode 1 (25 frames) or 2 (20 frames), never episode 0
        hits = [e for e in (0, 1, 2) if b.t0[i] <= s.lengths[e] - 2 and np.array_equal(b.mu[i], mu[s.starts[e] + b.t0[i]])]
        assert hits and 0 not in hits and b.episode[i] in hits, i  # the row names its episode
        e, t0 = int(b.episode[i]), int(b.t0[i])
        rows = slice(s.starts[e], s.starts[e] + t0)
        restart = np.zeros((1, t0), np.float32)
        restart[0, 0] = 1.0
        _, (c, h) = m(mu[rows][None], s.action[rows][None], restart)
        np.testing.assert_allclose(b.c[i], c.numpy()[0], atol=1e-5)
        np.testing.assert_allclose(b.h[i], h.numpy()[0], atol=1e-5)
    assert set(np.unique(b.t0)) > {1} and b.sigma.max() < 1e-6
    with pytest.raises(WMError, match="no branch states"):
        branch_states(m, _series([2, 2]), 4, newest=0, seed=0)
    # branch_window: only the last W frames before a recorded death (episode 1 died at frame 24; 0 and 2 did not)
    s.terminal = np.array([False, True, False])
    w = branch_states(m, s, 40, newest=0, seed=3, window=5)
    np.testing.assert_array_equal(np.unique(w.t0), [19, 20, 21, 22, 23])
    np.testing.assert_array_equal(w.mu, mu[s.starts[1] + w.t0])
    # the config's keys reach the table (what load_dream builds for each M with dream.branch_share > 0)
    from wm import config as C
    from wm.dream import run_branches

    sets = {"dream": {"branch_states": 9, "branch_episodes": 1, "branch_window": 3}, "run": {"seed": 3}}
    cfg = C.update(C.defaults(), sets, source="test")
    s.terminal = np.array([False, False, True])  # the newest episode (20 frames) died
    r = run_branches(cfg, m, s)
    assert len(r.t0) == 9 and set(r.t0) <= {16, 17, 18}


def test_branched_dreams_start_mid_game_and_play_the_rest_of_it(world):
    """A branched episode starts at a table row's (z, c, h) without the restart flag and runs to the game's cap
    (max_steps − t0); share 0 is the plain dream bit for bit; the evaluator and DreamEnv play the same episode."""
    from wm.dream import branch_states

    m, c, mu0, lv0 = world
    never = _never_dies(m)
    b = branch_states(never, _series([30, 25, 20]), 16, newest=0, seed=1)
    seeds = np.arange(40, dtype=np.int64).reshape(4, 10) * 131 + 7
    params = _params(c, 4)
    plain = DreamEvaluator(m, c, mu0, lv0, 1.0, CAP).evaluate(params, seeds)
    zero = DreamEvaluator(m, c, mu0, lv0, 1.0, CAP, branches=b, branch_share=0.0).evaluate(params, seeds)
    np.testing.assert_array_equal(plain[1], zero[1])
    ev = DreamEvaluator(never, c, mu0, lv0, 1.0, CAP, branches=b, branch_share=1.0)
    z, c0, h0, off = (x.numpy() for x in ev.core.reset(tf.constant(seeds.ravel())))
    assert set(off) <= set(b.t0) and len(set(off)) > 3
    row = [int(np.flatnonzero(np.abs(b.mu - zi).max(-1) < 1e-4)[0]) for zi in z]  # σ ≈ 0: z is the row's μ
    np.testing.assert_array_equal(off, b.t0[row])
    np.testing.assert_allclose(h0, b.h[row], atol=0)
    _, n = ev.evaluate(params, seeds)
    np.testing.assert_array_equal(n.ravel(), CAP - off)  # the rest of the game, never past its cap
    # no restart on a branched start: M steps on from the recorded state (a restart would zero it first)
    zt, ct, ht = (tf.constant(x[:3]) for x in (z, c0, h0))
    step = ev.core.step(tf.constant(params[:1]), tf.constant(seeds.ravel()[:3]), 0, zt, ct, ht, off=tf.constant(off[:3]))
    fresh = ev.core.step(tf.constant(params[:1]), tf.constant(seeds.ravel()[:3]), 0, zt, ct, ht)
    assert np.abs(step[2].numpy() - fresh[2].numpy()).max() > 1e-3
    with pytest.raises(WMError, match="critics cannot follow branched starts"):
        DreamEvaluator(_reward_m(m, 0.1), c, mu0, lv0, 1.0, CAP, branches=b, branch_share=0.5, critics=[_reward_m(m, 0)])
    half = DreamEvaluator(m, c, mu0, lv0, 1.25, CAP, branches=b, branch_share=0.5, compact_every=3)
    many = np.arange(400, dtype=np.int64)
    share = float((half.core.reset(tf.constant(many))[3].numpy() > 0).mean())
    assert 0.4 < share < 0.6
    r, _ = half.evaluate(params[:1], seeds[:1])
    env = DreamEnv(m, c, mu0, lv0, 1.25, CAP, branches=b, branch_share=0.5)
    starts = []
    for k in range(10):
        _, info = env.reset(seed=int(seeds[0, k]), params=params[0])
        starts.append(info["t0"])
        total, done = 0.0, False
        while not done:
            _, rew, term, trunc, _ = env.step()
            total, done = total + rew, term or trunc
        assert total == r[0, k], k
    assert 0 < sum(t > 0 for t in starts) < 10  # both kinds of start among the ten
    with pytest.raises(WMError, match="branch"):
        DreamEvaluator(m, c, mu0, lv0, 1.0, CAP, branch_share=0.5)


def test_branch_steps_cut_a_branched_dream_to_its_window_and_pay_only_those_steps(world):
    """`dream.branch_steps` N (issue 17): a branched start plays min(N, cap − t0) steps, truncated, and is paid M's
    rewards over those steps only; a frame-0 start still plays to the cap; N < 0, or N without branched starts, is
    refused."""
    from wm.dream import branch_states

    m, c, mu0, lv0 = world
    never = _reward_m(_never_dies(m), 0.25)  # no deaths; every step pays 0.25
    b = branch_states(never, _series([30, 25, 20]), 16, newest=0, seed=1)
    seeds = np.arange(40, dtype=np.int64).reshape(4, 10) * 131 + 7
    params = _params(c, 4)
    for n_steps in (7, 35):
        ev = DreamEvaluator(never, c, mu0, lv0, 1.0, CAP, branches=b, branch_share=0.5, branch_steps=n_steps)
        off = ev.core.reset(tf.constant(seeds.ravel()))[3].numpy()
        assert 0 < (off > 0).sum() < off.size  # both kinds of start
        r, n = ev.evaluate(params, seeds)
        want = np.where(off > 0, np.minimum(n_steps, CAP - off), CAP)  # 35 > CAP − t0 for late starts: the cap
        np.testing.assert_array_equal(n.ravel(), want)
        np.testing.assert_allclose(r.ravel(), 0.25 * want, rtol=1e-5)
    env = DreamEnv(never, c, mu0, lv0, 1.0, CAP, branches=b, branch_share=1.0, branch_steps=7)
    env.reset(seed=int(seeds[0, 0]), params=params[0])
    flags = [env.step()[2:4] for _ in range(7)]
    assert flags == [(False, False)] * 6 + [(False, True)]  # the window ends truncated, not terminated
    with pytest.raises(WMError, match="branch_steps"):
        DreamEvaluator(m, c, mu0, lv0, 1.0, CAP, branches=b, branch_share=0.5, branch_steps=-1)
    with pytest.raises(WMError, match="branch_steps cuts branched dreams only"):  # it would change nothing: refused
        DreamEvaluator(m, c, mu0, lv0, 1.0, CAP, branches=b, branch_share=0.0, branch_steps=7)


def test_window_calibration_bench_sums_each_window_and_correlates_over_states(repo_root):
    """`bench/window_calibration.py`'s figures (issue 17): returns summed over the window, their correlation over
    states, the mean error per step; against hand-computed values."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("window_calibration", repo_root / "bench" / "window_calibration.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    real = np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [3.0, 0.0, 0.0]])  # returns 2, 0, 3
    pred = np.array([[0.0, 0.0, 0.5], [0.0, 0.0, -0.5], [0.0, 1.0, 0.5]])  # returns 0.5, −0.5, 1.5
    got = bench.window_stats(real, pred)
    assert got["states"] == 3 and got["real_return_mean"] == pytest.approx(5 / 3)
    assert got["pred_return_mean"] == pytest.approx(0.5)
    assert got["return_corr"] == pytest.approx(np.corrcoef([2, 0, 3], [0.5, -0.5, 1.5])[0, 1])
    assert got["step_error_mean"] == pytest.approx((1.5 - 5) / 9)
    assert bench.window_stats(real, np.zeros_like(real))["return_corr"] is None  # a flat prediction ranks nothing
