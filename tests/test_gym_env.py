"""Any gymnasium pixel env as `env.name: gym:<id>`: actions, frames, seeding, refusals, Atari."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import tiny_cfg
from wm.core import config as C
from wm.core.errors import WMError
from wm.envs import action_dim, action_post, m_action, make_env
from wm.envs.setup import setup
from wm.models.controller import Controller

CARTPOLE = ["env.name=gym:CartPole-v1", "env.actions=discrete:2", "env.crop=[150,350,0,600]", "env.max_steps=40"]


def test_action_spaces_and_what_m_sees():
    disc, box = tiny_cfg(*CARTPOLE), tiny_cfg("env.name=gym:Pendulum-v1", "env.actions=box:1")
    assert action_dim(disc) == 2 and action_post(disc) == "onehot" and action_dim(box) == 1 and action_post(box) == "none"
    np.testing.assert_array_equal(m_action(action_post(disc), [[0.2, -0.3], [-1.0, 1.0]]), [[1, 0], [0, 1]])
    np.testing.assert_array_equal(m_action(action_post(box), [[2.0]]), [[1.0]])  # clipped to the controller's range
    c = Controller.from_setup(setup(disc))
    np.testing.assert_array_equal(c.postprocess(np.array([[0.1, 0.7]])), [[0, 1]])
    import tensorflow as tf

    np.testing.assert_array_equal(c.postprocess_tf(tf.constant([[0.9, 0.7], [0.1, 0.7]])).numpy(), [[1, 0], [0, 1]])
    assert action_dim(tiny_cfg()) == 1 and action_post("carracing") == "car"  # the paper's games as before
    with pytest.raises(WMError, match="env.actions must be discrete:N, joystick:N or box:N"):
        action_dim(tiny_cfg("env.name=gym:CartPole-v1", "env.actions=discrete:two"))
    with pytest.raises(WMError, match="a gym env's actions come from the config"):
        action_dim("gym:CartPole-v1")
    with pytest.raises(WMError, match="unknown env.name 'gym:'"):
        action_dim(C.update(tiny_cfg("env.actions=discrete:2"), {"env": {"name": "gym:"}}))


@pytest.mark.env
def test_cartpole_from_its_render():
    env = make_env(tiny_cfg(*CARTPOLE))
    try:
        a, _ = env.reset(seed=4)
        b, _ = env.reset(seed=4)
        assert a.shape == (64, 64, 3) and a.dtype == np.uint8 and np.array_equal(a, b)  # seeded
        assert env.env_action(np.array([0.9, -0.9])) == 0 and env.env_action(np.array([-0.9, 0.9])) == 1
        n, done = 0, False
        while not done:
            _, r, term, trunc, _ = env.step(np.array([1.0, -1.0]))  # always push left: it falls
            n, done = n + 1, term or trunc
        assert r == 1.0 and n < 40 and term
    finally:
        env.close()
    with pytest.raises(WMError, match=r"env.actions is 'discrete:3' but CartPole-v1 has action space Discrete\(2\)"):
        make_env(tiny_cfg("env.name=gym:CartPole-v1", "env.actions=discrete:3"))
    with pytest.raises(WMError, match="gymnasium cannot make 'NoSuchEnv-v0'"):
        make_env(tiny_cfg("env.name=gym:NoSuchEnv-v0", "env.actions=discrete:2"))


@pytest.mark.env
def test_box_actions_are_scaled_to_the_bounds():
    env = make_env(tiny_cfg("env.name=gym:Pendulum-v1", "env.actions=box:1"))
    try:
        np.testing.assert_allclose(env.env_action(np.array([1.0])), [2.0])
        np.testing.assert_allclose(env.env_action(np.array([-1.0])), [-2.0])
        np.testing.assert_allclose(env.env_action(np.array([0.0])), [0.0])
    finally:
        env.close()
    from wm.envs.gym_env import gym_kwargs

    assert gym_kwargs(["frameskip=4", "repeat_action_probability=0.0"]) == {"frameskip": 4, "repeat_action_probability": 0.0}
    with pytest.raises(WMError, match="env.gym_kwargs items are key=value, got 'frameskip'"):
        gym_kwargs(["frameskip"])


@pytest.mark.env
def test_atari_boxing_preset():
    pytest.importorskip("ale_py")
    cfg = tiny_cfg("env.gym_kwargs=[repeat_action_probability=0.0]", env="atari_boxing")
    env = make_env(cfg, seed=0)
    try:
        obs, _ = env.reset()
        again, _ = env.reset(seed=0)
        assert obs.shape == (64, 64, 3) and np.array_equal(obs, again) and action_dim(cfg) == 18
        rewards = [env.step(np.eye(18)[1] * 2 - 1)[1] for _ in range(200)]  # FIRE held: some punches land
        assert set(rewards) <= {-2.0, -1.0, 0.0, 1.0, 2.0}
    finally:
        env.close()


def test_joystick_actions_are_three_thresholded_outputs():
    cfg = tiny_cfg(*CARTPOLE[:1], "env.actions=joystick:18")
    assert action_dim(cfg) == 3 and action_post(cfg) == "joystick"
    a = np.array([[0.5, -0.2, 0.1], [-0.4, 0.34, -0.1], [0.3, -0.9, 0.0]], np.float32)
    want = [[1, 0, 1], [-1, 1, -1], [0, -1, -1]]  # axes pushed past ±1/3, fire above 0
    np.testing.assert_array_equal(m_action(action_post(cfg), a), want)
    c = Controller.from_setup(setup(cfg))
    assert c.n_params == c.input_dim * 3  # 3 outputs, whatever the env's action count (tiny: no bias)
    np.testing.assert_array_equal(c.postprocess(a), want)
    import tensorflow as tf

    np.testing.assert_array_equal(c.postprocess_tf(tf.constant(a)).numpy(), want)
    with pytest.raises(WMError, match="needs an env with Atari action names; CartPole-v1 has none"):
        make_env(tiny_cfg(*CARTPOLE[:1], "env.actions=joystick:2"))


@pytest.mark.env
def test_joystick_plays_the_atari_action_of_its_name():
    pytest.importorskip("ale_py")
    env = make_env(tiny_cfg("env.actions=joystick:18", env="atari_boxing"))
    try:
        names = env.inner.unwrapped.get_action_meanings()
        assert env.action_space.shape == (3,) and sorted(names[i] for i in env.joystick.values()) == sorted(names)
        assert names[env.env_action(np.array([-0.9, 0.9, 0.5]))] == "UPLEFTFIRE"
        assert names[env.env_action(np.array([0.2, -0.5, -0.5]))] == "DOWN"
        assert names[env.env_action(np.array([0.0, 0.0, -1.0]))] == "NOOP"
    finally:
        env.close()
    pong = make_env(tiny_cfg("env.name=gym:ALE/Pong-v5", "env.actions=joystick:6", env="atari_boxing"))
    try:  # Pong has no UP: a combination it lacks plays the first part it has
        names = pong.inner.unwrapped.get_action_meanings()
        assert names[pong.env_action(np.array([0.9, 0.9, 0.9]))] == "RIGHTFIRE"
        assert names[pong.env_action(np.array([0.0, 0.9, -0.9]))] == "NOOP"
    finally:
        pong.close()
