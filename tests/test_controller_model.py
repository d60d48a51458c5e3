"""C (paper settings §6): parameter counts, the authors' flat-vector layouts, NumPy vs TF, batching, car post-processing."""

from __future__ import annotations

import numpy as np
import pytest

from wm.core.config import defaults, update
from wm.core.errors import WMError
from wm.envs import car_action
from wm.envs.setup import setup
from wm.models.controller import Controller


def test_paper_parameter_counts():
    assert Controller("zh", 32, 256, 3, bias=True).n_params == 867  # Car (§6)
    assert Controller("zch", 64, 512, 1, bias=False).n_params == 1088  # Doom
    assert Controller("z", 32, 256, 3, bias=True).n_params == 99  # ablation
    assert Controller("z_hidden", 32, 256, 3, bias=True, hidden_units=40).n_params == 1443
    assert Controller("zc", 32, 256, 3, bias=True).input_dim == 288
    with pytest.raises(WMError):
        Controller("zz", 32, 256, 3, True)


def test_car_layout_bias_first_then_row_major_weights():
    c = Controller("zh", 32, 256, 3, bias=True)
    rng = np.random.default_rng(0)
    p = rng.normal(size=c.n_params).astype(np.float32) * 0.1
    z, h = rng.normal(size=32), rng.normal(size=256)
    b, w = p[:3], p[3:].reshape(288, 3)  # the authors' model.py layout
    np.testing.assert_allclose(c.act(p, z, h=h), np.tanh(np.concatenate([z, h]) @ w + b), rtol=1e-4, atol=1e-5)


def test_doom_layout_zch_order_no_bias():
    c = Controller("zch", 64, 512, 1, bias=False)
    rng = np.random.default_rng(1)
    p = rng.normal(size=1088).astype(np.float32) * 0.05
    z, cc, h = rng.normal(size=64), rng.normal(size=512), rng.normal(size=512)
    np.testing.assert_allclose(
        c.act(p, z, cc, h), np.tanh(np.concatenate([z, cc, h]) @ p.reshape(1088, 1)), rtol=1e-4, atol=1e-5
    )


def test_z_hidden_layout():
    c = Controller("z_hidden", 32, 256, 3, bias=True)
    rng = np.random.default_rng(2)
    p = rng.normal(size=1443).astype(np.float32) * 0.1
    z = rng.normal(size=32)
    bh, wh, bo, wo = p[:40], p[40:1320].reshape(32, 40), p[1320:1323], p[1323:].reshape(40, 3)
    np.testing.assert_allclose(c.act(p, z), np.tanh(np.tanh(z @ wh + bh) @ wo + bo), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode,bias", [("zh", True), ("zch", False), ("z_hidden", True), ("zc", True)])
def test_batched_numpy_and_tf_agree(mode, bias):
    tf = pytest.importorskip("tensorflow")
    c = Controller(mode, 8, 16, 3, bias=bias, hidden_units=5)
    rng = np.random.default_rng(3)
    p = rng.normal(size=(4, c.n_params)).astype(np.float32)
    z, cc, h = (rng.normal(size=(4, d)).astype(np.float32) for d in (8, 16, 16))
    batched = c.act(p, z, cc, h)
    rows = np.stack([c.act(p[i], z[i], cc[i], h[i]) for i in range(4)])
    np.testing.assert_allclose(batched, rows, rtol=1e-5)
    got = c.act_tf(tf.constant(p), tf.constant(z), tf.constant(cc), tf.constant(h), postprocess=False).numpy()
    np.testing.assert_allclose(got, rows, rtol=1e-5, atol=1e-6)
    shared = c.act_tf(tf.constant(p[0]), tf.constant(z), tf.constant(cc), tf.constant(h)).numpy()
    np.testing.assert_allclose(shared, car_action(c.act(p[0], z, cc, h)), rtol=1e-5, atol=1e-6)
    # (P, n) params with (P, K, dim) inputs
    zk = rng.normal(size=(4, 2, 8)).astype(np.float32)
    ck, hk = (rng.normal(size=(4, 2, 16)).astype(np.float32) for _ in range(2))
    np.testing.assert_allclose(c.act(p, zk, ck, hk)[:, 1], c.act(p, zk[:, 1], ck[:, 1], hk[:, 1]), rtol=1e-5)


def test_car_postprocessing_and_from_setup():
    a = np.array([[-0.5, -1.0, -0.3], [0.9, 1.0, 0.7]], np.float32)
    np.testing.assert_allclose(car_action(a), [[-0.5, 0.0, 0.0], [0.9, 1.0, 0.7]])
    car = update(
        defaults(),
        {
            "env": {"name": "carracing"},
            "vae": {"z_dim": 32},
            "mdnrnn": {"hidden": 256},
            "controller": {"mode": "zh", "bias": True},
        },
    )
    c = Controller.from_setup(setup(car))
    assert c.n_params == 867 and c.car_actions
    doom = update(defaults(), {"vae": {"z_dim": 64}})
    d = Controller.from_setup(setup(doom))
    assert d.n_params == 1088 and not d.car_actions
    np.testing.assert_array_equal(d.postprocess(np.array([[0.4]])), [[0.4]])
