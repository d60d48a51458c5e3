"""The dream as a gymnasium env (`wm.rollouts.gym_dream`): gymnasium's env checker, seeding, the same episodes as
`DreamEvaluator`, the vector env on the batched kernel, `gymnasium.make` from a run dir, and random search on a linear
policy in a dream where survival depends on the action."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
gymnasium = pytest.importorskip("gymnasium")

from gymnasium.utils.env_checker import check_env  # noqa: E402
from gymnasium.vector import AutoresetMode  # noqa: E402

from tests.helpers import tiny_cfg, tiny_world  # noqa: E402
from wm.core.errors import WMError  # noqa: E402
from wm.core.rundir import RunDir  # noqa: E402
from wm.models.controller import Controller  # noqa: E402
from wm.rollouts.dream import DreamEvaluator  # noqa: E402
from wm.rollouts.gym_dream import ENV_ID, DreamGymEnv, DreamVectorEnv, load_run_world  # noqa: E402

CAP = 60  # tiny_world's dream.max_steps
UNBOUNDED = ".*(infinity|alternative render modes)"  # the checker's notes on Box(−inf, inf) and a spec-less env


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """tests/helpers.py's tiny Doom run (a random-weight M whose done logit fires now and then, 5 initial z),
    plus a random-weight V to render with."""
    from wm.models.training import save_weights
    from wm.models.vae import ConvVAE

    cfg, run = tiny_world(tmp_path_factory.mktemp("gym") / "run")
    save_weights(ConvVAE(int(cfg.vae.z_dim)), run.vae_weights)
    return run.path


@pytest.fixture(scope="module")
def world(run_dir):
    return load_run_world(run_dir)


def _play(env, seed, act):
    """One episode on `seed`: (return, length, observations (length + 1, dim)) with actions act(t, obs)."""
    obs, _ = env.reset(seed=seed)
    seen, total = [obs], 0.0
    while True:
        obs, r, term, trunc, _ = env.step(act(len(seen) - 1, obs))
        seen, total = [*seen, obs], total + r
        if term or trunc:
            return total, len(seen) - 1, np.array(seen)


def test_the_env_checker_passes(world):
    m = world.mdnrnn
    for observe, dim in (("z", m.z_dim), ("zh", m.z_dim + m.hidden), ("zch", m.z_dim + 2 * m.hidden)):
        env = DreamGymEnv(world, observe=observe)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # anything else the checker says fails the test
            warnings.filterwarnings("ignore", message=UNBOUNDED)
            check_env(env.unwrapped)
        assert env.observation_space == gymnasium.spaces.Box(-np.inf, np.inf, (dim,), np.float32)
        assert env.action_space == gymnasium.spaces.Box(-1, 1, (1,), np.float32)
        obs, info = env.reset(seed=3)
        assert obs.dtype == np.float32 and obs.shape == (dim,) and info == {"seed": 3, "t": 0}
    with pytest.raises(WMError, match="observe must be one of"):
        DreamGymEnv(world, observe="h")
    with pytest.raises(WMError, match="exactly one"):
        DreamGymEnv()
    with pytest.raises(WMError, match="decodes z with V"):
        DreamGymEnv(world, render_mode="rgb_array")


def test_a_seeded_reset_reproduces_its_episodes(world):
    env = DreamGymEnv(world, observe="zh")
    actions = np.random.default_rng(0).uniform(-1, 1, (CAP, 1)).astype(np.float32)

    def episodes(seed):
        """The seeded episode, then two whose seeds the env draws from its np_random."""
        out = []
        for k in range(3):
            obs, info = env.reset(seed=seed if k == 0 else None)
            seen, end = [obs], False
            while not end:
                obs, _, term, trunc, _ = env.step(actions[len(seen) - 1])
                seen, end = [*seen, obs], term or trunc
            out.append((info["seed"], np.array(seen)))
        return out

    one, two = episodes(17), episodes(17)
    assert [s for s, _ in one] == [s for s, _ in two] and one[0][0] == 17 and len({s for s, _ in one}) == 3
    for (_, a), (_, b) in zip(one, two, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(episodes(18)[0][1][0], one[0][1][0])


def test_the_env_follows_the_evaluator_for_a_fixed_linear_c(world):
    """A linear C ("zh", with bias) acting on the env's [z, h] plays the episode `DreamEvaluator` plays on that seed."""
    m, dream = world.mdnrnn, world.setup.dream
    c = Controller("zh", m.z_dim, m.hidden, 1, bias=True)
    params = np.random.default_rng(1).normal(0, 0.5, (3, c.n_params)).astype(np.float32)
    seeds = np.arange(12, dtype=np.int64).reshape(3, 4) * 7919 + 11
    ev = DreamEvaluator(m, c, world.initial_mu, world.initial_logvar, dream.temperature, CAP, **dream.done_options())
    returns, lengths = ev.evaluate(params, seeds)
    assert len(set(lengths.ravel())) > 1  # episodes end at different steps
    env = DreamGymEnv(world, observe="zh")
    act = tf.function(lambda p, x: c.act_tf(p, x[:, : m.z_dim], None, x[:, m.z_dim :]))
    for p in range(3):
        for k in range(4):
            total, n, _ = _play(env, int(seeds[p, k]), lambda t, obs, p=p: act(params[p], obs[None]).numpy()[0])
            assert (total, n) == (returns[p, k], lengths[p, k]), (p, k)


def _vector_run(envs, seed, actions):
    obs, info = envs.reset(seed=seed)
    out = {"obs": [obs], "r": [], "end": [], "seed": [info["seed"]], "info": []}
    for a in actions:
        obs, r, term, trunc, info = envs.step(a)
        n = envs.num_envs
        assert obs.shape == envs.observation_space.shape and obs.dtype == np.float32
        assert r.shape == term.shape == trunc.shape == (n,) and term.dtype == trunc.dtype == bool
        for k, v in (("obs", obs), ("r", r), ("end", term | trunc), ("seed", info["seed"]), ("info", info)):
            out[k].append(v)
    return {k: v if k == "info" else np.array(v) for k, v in out.items()}


def test_the_vector_env_steps_the_single_envs_episodes(world):
    """Shapes; sub-env i's first episode is the single env's on seed s + i; NEXT_STEP autoreset starts the next
    episode a step later (reward 0) with the seed the single env's np_random draws next."""
    n, dim = 6, world.mdnrnn.z_dim + world.mdnrnn.hidden
    envs = DreamVectorEnv(world, n, observe="zh")
    assert envs.num_envs == n and envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    assert envs.single_observation_space == gymnasium.spaces.Box(-np.inf, np.inf, (dim,), np.float32)
    assert envs.observation_space.shape == (n, dim) and envs.action_space.shape == (n, 1)
    assert envs.single_action_space == gymnasium.spaces.Box(-1, 1, (1,), np.float32)
    actions = np.random.default_rng(2).uniform(-1, 1, (CAP + 1, n, 1)).astype(np.float32)
    got = _vector_run(envs, 40, actions)
    assert (got["seed"][0] == 40 + np.arange(n)).all()
    single, lengths = DreamGymEnv(world, observe="zh"), []
    for i in range(n):
        total, length, seen = _play(single, 40 + i, lambda t, obs, i=i: actions[t, i])
        lengths.append(length)
        np.testing.assert_allclose(got["obs"][: length + 1, i], seen, rtol=1e-5, atol=1e-5)
        assert got["r"][:length, i].sum() == total and got["end"][length - 1, i] and not got["end"][: length - 1, i].any()
        if length <= CAP:
            nxt = single.reset()[1]["seed"]  # the single env's next episode seed, from its np_random
            assert got["r"][length, i] == 0 and not got["end"][length, i] and got["seed"][length + 1, i] == nxt
            np.testing.assert_allclose(got["obs"][length + 1, i], single.reset(seed=nxt)[0], rtol=1e-5, atol=1e-5)
    assert len(set(lengths)) > 1 and min(lengths) < CAP
    # batch independence: the same seeds in a batch of 2 give the same first episodes
    pair = _vector_run(DreamVectorEnv(world, 2, observe="zh"), [40 + 3, 40 + 1], actions[:, [3, 1]])
    for j, i in enumerate((3, 1)):
        np.testing.assert_allclose(pair["obs"][: lengths[i] + 1, j], got["obs"][: lengths[i] + 1, i], rtol=1e-5, atol=1e-5)


def test_same_step_autoreset(world):
    """SAME_STEP: the step that ends an episode returns the next one's first observation, the last in final_obs."""
    n = 4
    actions = np.zeros((CAP, n, 1), np.float32)
    nxt = _vector_run(DreamVectorEnv(world, n), 7, actions)
    same = _vector_run(DreamVectorEnv(world, n, autoreset_mode="SameStep"), 7, actions)
    assert same["info"][0].keys() >= {"seed", "_seed", "t", "_t"}
    for i in range(n):
        length = int(np.argmax(nxt["end"][:, i])) + 1
        np.testing.assert_allclose(same["obs"][:length, i], nxt["obs"][:length, i], rtol=1e-5, atol=1e-5)
        if length < CAP:
            info = same["info"][length - 1]
            assert info["_final_obs"][i] and same["end"][length - 1, i]
            np.testing.assert_allclose(info["final_obs"][i], nxt["obs"][length, i], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(same["obs"][length, i], nxt["obs"][length + 1, i], rtol=1e-5, atol=1e-5)
            assert same["seed"][length, i] == nxt["seed"][length + 1, i]
    with pytest.raises(WMError, match="NextStep or SameStep"):
        DreamVectorEnv(world, n, autoreset_mode=AutoresetMode.DISABLED)


def test_a_non_finite_dream_is_one_error_line(world):
    from dataclasses import replace

    from wm.models.mdnrnn import MDNRNN

    m = world.mdnrnn
    broken = MDNRNN(m.z_dim, 1, m.hidden, m.num_mixtures, True)
    broken.set_weights(m.get_weights())
    b = broken.out_bias.numpy()
    b[1:] = np.nan  # the mixture's parameters: z' goes NaN on the first step (the done logit stays finite)
    broken.out_bias.assign(b)
    bad = replace(world, mdnrnn=broken)
    env = DreamGymEnv(bad)
    env.reset(seed=5)
    with pytest.raises(WMError, match=r"non-finite z at step 0 of seed 5"):
        env.step(np.zeros(1, np.float32))
    envs = DreamVectorEnv(bad, 3)
    envs.reset(seed=5)
    with pytest.raises(WMError, match=r"non-finite z at step 0 of sub-env 0, seed 5;"):
        envs.step(np.zeros((3, 1), np.float32))
    with pytest.raises(WMError, match=r"actions have shape \(3, 1\)"):
        envs.step(np.zeros(3, np.float32))


def test_make_from_a_run_dir(run_dir):
    """`gymnasium.make("wm/Dream-v0", run=...)` after importing the module; `make_vec` gets the batched env; the
    config's dream settings by default; rgb_array renders V's decoding of z."""
    env = gymnasium.make(ENV_ID, run=str(run_dir), observe="zh", render_mode="rgb_array")
    assert isinstance(env.unwrapped, DreamGymEnv) and env.unwrapped.max_steps == CAP
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=UNBOUNDED)
        check_env(env.unwrapped)  # with a spec: the checker also makes it in rgb_array
    obs, _ = env.reset(seed=1)
    frame = env.render()
    assert obs.shape == (18,) and frame.shape == (64, 64, 3) and frame.dtype == np.uint8
    env.close()
    short = DreamGymEnv.from_run(run_dir, temperature=0.5, max_steps=3)
    assert (short.temperature, short.max_steps) == (0.5, 3) and short.spec is None
    short.reset(seed=0)
    ends = [short.step(np.zeros(1, np.float32))[2:4] for _ in range(3)]
    assert ends[-1] == (False, True) and not any(map(any, ends[:-1]))  # this episode runs to the cap: truncated
    envs = gymnasium.make_vec(ENV_ID, num_envs=3, run=str(run_dir))
    assert isinstance(envs, DreamVectorEnv) and envs.observation_space.shape == (3, 6)
    obs, _ = envs.reset(seed=0)
    assert envs.step(np.zeros((3, 1), np.float32))[0].shape == (3, 6)
    with pytest.raises(WMError, match="not a run directory"):
        DreamGymEnv.from_run(run_dir.parent / "nowhere")


# --------------------------------------------------------------------------- random search in a steering dream


def steering_run(path):
    """A run whose hand-set M (z 2, one Gaussian) draws z′ ~ N(0, 0.4²) each step and whose done head fires when the
    action strays from z₀ (|a − z₀| ≳ 0.4): a = 0 dies within a few steps, a ≈ z₀ survives long."""
    from wm.core.atomic import atomic_savez
    from wm.models.mdnrnn import MDNRNN, save_config
    from wm.models.training import save_weights

    sets = ["vae.z_dim=2", "mdnrnn.hidden=4", "mdnrnn.num_mixtures=1", "dream.max_steps=100", "dream.temperature=1.0"]
    cfg = tiny_cfg(*sets)
    run = RunDir(path)
    run.bind_config(cfg, None)
    m = MDNRNN(2, 1, 4, 1, True)
    m.step(np.zeros((1, 2), np.float32), np.zeros((1, 1), np.float32), m.initial_state(1), np.ones(1, np.float32))
    kx, kh, b = np.zeros((4, 16), np.float32), np.zeros((4, 16), np.float32), np.zeros(16, np.float32)
    b[0:4], b[8:12], b[12:16] = 10.0, -20.0, 10.0  # input and output gates open, forget shut: h = tanh(tanh(j))
    kx[0, 4], kx[2, 4], b[4] = -3.0, 3.0, -1.0  # unit 0: j = 3(a − z₀) − 1
    kx[0, 5], kx[2, 5], b[5] = 3.0, -3.0, -1.0  # unit 1: j = 3(z₀ − a) − 1
    w, ob = np.zeros((4, 1 + 2 * 3), np.float32), np.zeros(1 + 2 * 3, np.float32)
    w[0, 0], w[1, 0], ob[0] = 4.0, 4.0, 4.0 * 0.55  # done logit 4(h₀ + h₁ + 0.55): > 0 once |a − z₀| ≳ 0.4
    ob[3], ob[6] = np.log(0.4), np.log(0.4)  # log σ of both z dims (mixture logit and μ 0)
    m.set_weights([kx, kh, b, w, ob])
    save_weights(m, run.mdnrnn_weights)
    save_config(m, run.mdnrnn_weights.parent / "model.json")
    rng = np.random.default_rng(0)
    atomic_savez(run.initial_z, mu=rng.normal(0, 0.3, (4, 2)).astype(np.float32), logvar=np.full((4, 2), -4.0, np.float32))
    run.mark_done("train-mdnrnn", {})
    return run.path


def first_returns(envs, weights, seed):
    """Each sub-env's first-episode return under its own linear policy a = tanh([obs, 1]·W), W = weights[i] reshaped
    (obs dim + 1, A). The docs' example (docs/guide/dream-env.md)."""
    n, (dim,), (a_dim,) = envs.num_envs, envs.single_observation_space.shape, envs.single_action_space.shape
    w = weights.reshape(n, dim + 1, a_dim)
    obs, _ = envs.reset(seed=seed)
    total, done = np.zeros(n), np.zeros(n, bool)
    while not done.all():
        a = np.tanh(np.einsum("nd,nda->na", obs, w[:, :-1]) + w[:, -1])
        obs, r, term, trunc, _ = envs.step(a.astype(np.float32))
        total, done = total + np.where(done, 0.0, r), done | term | trunc  # only each sub-env's first episode
    return total


def random_search(envs, rounds, p, k, sigma, rng):
    """Hill climbing: each round p candidates (the incumbent and p − 1 Gaussian perturbations) × k dreams each, all
    p·k in the vector env at once; the best mean return is kept. Returns the flat weights."""
    (dim,), (a_dim,) = envs.single_observation_space.shape, envs.single_action_space.shape
    w = np.zeros((dim + 1) * a_dim)
    for r in range(rounds):
        cand = np.concatenate([w[None], w + sigma * rng.standard_normal((p - 1, w.size))])
        scores = first_returns(envs, np.repeat(cand, k, axis=0), seed=1000 * r).reshape(p, k).mean(axis=1)
        w = cand[np.argmax(scores)]
    return w


def test_random_search_on_a_linear_policy_improves_its_dream_return(tmp_path):
    """Random search (8 candidates × 8 dreams a round, all 64 in one vector env, 5 rounds, σ 0.5) from W = 0 (a = 0):
    on 64 held-out dreams the mean return rises from 3.5 to 92.1 (of the 100-step cap); asserted: from under 5 to
    over 80."""
    envs = gymnasium.make_vec(ENV_ID, num_envs=64, run=str(steering_run(tmp_path / "run")), observe="z")
    assert isinstance(envs, DreamVectorEnv)
    w = random_search(envs, rounds=5, p=8, k=8, sigma=0.5, rng=np.random.default_rng(0))
    before = first_returns(envs, np.zeros((64, w.size)), seed=10_000).mean()
    after = first_returns(envs, np.repeat(w[None], 64, axis=0), seed=10_000).mean()
    print(f"random search: {before:.2f} -> {after:.2f}, W {np.round(w, 2)}")
    assert before < 5 and after > 80, (before, after)
