"""Any gymnasium pixel env as `env.name: gym:<id>` (issue 20 item 1): actions, frames, seeding, refusals, Atari."""

from __future__ import annotations

import numpy as np
import pytest

from wm import config as C
from wm.envs import action_dim, action_post, m_action, make_env
from wm.errors import WMError
from wm.models.controller import Controller

CARTPOLE = ["env.name=gym:CartPole-v1", "env.actions=discrete:2", "env.crop=[150,350,0,600]", "env.max_steps=40"]


def cfg_of(*sets: str) -> C.Config:
    return C.load(["doom_takecover", "tiny"], list(sets))


def test_action_spaces_and_what_m_sees():
    disc, box = cfg_of(*CARTPOLE), cfg_of("env.name=gym:Pendulum-v1", "env.actions=box:1")
    assert action_dim(disc) == 2 and action_post(disc) == "onehot" and action_dim(box) == 1 and action_post(box) == "none"
    np.testing.assert_array_equal(m_action(disc, [[0.2, -0.3], [-1.0, 1.0]]), [[1, 0], [0, 1]])
    np.testing.assert_array_equal(m_action(box, [[2.0]]), [[1.0]])  # clipped to the controller's range
    c = Controller.from_config(disc, 2)
    np.testing.assert_array_equal(c.postprocess(np.array([[0.1, 0.7]])), [[0, 1]])
    import tensorflow as tf

    np.testing.assert_array_equal(c.postprocess_tf(tf.constant([[0.9, 0.7], [0.1, 0.7]])).numpy(), [[1, 0], [0, 1]])
    assert action_dim(cfg_of()) == 1 and action_post("carracing") == "car"  # the paper's games as before
    with pytest.raises(WMError, match="env.actions must be discrete:N or box:N"):
        action_dim(cfg_of("env.name=gym:CartPole-v1", "env.actions=discrete:two"))
    with pytest.raises(WMError, match="a gym env's actions come from the config"):
        action_dim("gym:CartPole-v1")
    with pytest.raises(WMError, match="unknown env.name 'gym:'"):
        action_dim(C.update(cfg_of("env.actions=discrete:2"), {"env": {"name": "gym:"}}))


@pytest.mark.env
def test_cartpole_from_its_render():
    env = make_env(cfg_of(*CARTPOLE))
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
        make_env(cfg_of("env.name=gym:CartPole-v1", "env.actions=discrete:3"))
    with pytest.raises(WMError, match="gymnasium cannot make 'NoSuchEnv-v0'"):
        make_env(cfg_of("env.name=gym:NoSuchEnv-v0", "env.actions=discrete:2"))


@pytest.mark.env
def test_box_actions_are_scaled_to_the_bounds():
    env = make_env(cfg_of("env.name=gym:Pendulum-v1", "env.actions=box:1"))
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
    cfg = C.load(["atari_boxing", "tiny"], ["env.gym_kwargs=[repeat_action_probability=0.0]"])
    env = make_env(cfg, seed=0)
    try:
        obs, _ = env.reset()
        again, _ = env.reset(seed=0)
        assert obs.shape == (64, 64, 3) and np.array_equal(obs, again) and action_dim(cfg) == 18
        rewards = [env.step(np.eye(18)[1] * 2 - 1)[1] for _ in range(200)]  # FIRE held: some punches land
        assert set(rewards) <= {-2.0, -1.0, 0.0, 1.0, 2.0}
    finally:
        env.close()
