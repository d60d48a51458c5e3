"""M's cuDNN-eligible path: `keras.layers.LSTM` on a view of the custom
cell's variables equals the custom `tf.scan` cell (outputs, final state, gradients), with no restart, with restarts
in the middle of a chunk and at its first step, and without the done head (CarRacing); parameter counts and weight
files are the custom ones; the train-mdnrnn stage gives the same losses and weights with either. Also the stage's
batch prefetch (`wm.models.training.prefetch`) and its logged learning rate without a TF op (`lr_value`)."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from wm.core.errors import WMError  # noqa: E402
from wm.models import lstm_cudnn  # noqa: E402
from wm.models import mdnrnn as M  # noqa: E402
from wm.models.mdnrnn import MDNRNN, from_keras_layout, keras_layout, resolve_lstm  # noqa: E402

Z, H, B, T = 6, 16, 3, 11
RESTARTS = {
    "none": [],
    "middle": [(0, 5), (2, 3), (2, 8)],  # (row, step): state zeroed before these steps
    "first_step": [(1, 0), (0, 6)],  # row 1 restarts at t = 0: its carried state must not leak in
}


def _pair(done: bool, seed: int = 0) -> tuple[MDNRNN, MDNRNN]:
    import keras

    keras.utils.set_random_seed(seed)
    a_dim = 1 if done else 3
    custom, kpath = MDNRNN(Z, a_dim, H, 5, done), MDNRNN(Z, a_dim, H, 5, done, lstm="keras")
    rng = np.random.default_rng(seed)
    # weights away from the initialiser's range so every gate matters (and the +1 is not negligible)
    custom.set_weights([rng.normal(0, 0.4, w.shape).astype(np.float32) for w in custom.get_weights()])
    kpath.set_weights(custom.get_weights())
    return custom, kpath


def _inputs(done: bool, restarts: list[tuple[int, int]], seed: int = 1):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(B, T, Z)).astype(np.float32)
    a = rng.uniform(-1, 1, (B, T, 1 if done else 3)).astype(np.float32)
    r = None
    if done:
        r = np.zeros((B, T), np.float32)
        for b, t in restarts:
            r[b, t] = 1.0
    state = tuple(tf.constant(rng.normal(0, 0.5, (B, H)).astype(np.float32)) for _ in range(2))
    return z, a, r, state


def _run(model: MDNRNN, z, a, r, state):
    with tf.GradientTape() as tape:
        out, (c, h) = model(z, a, r, state=state, training=True)
        loss = tf.reduce_sum(out.mu * 0.3) + tf.reduce_sum(out.logstd**2) + tf.reduce_sum(out.logmix * 0.1)
        loss += tf.reduce_sum(h) + 0.5 * tf.reduce_sum(c)
        if model.predict_done:
            loss += tf.reduce_sum(out.done_logit)
    return out, (c, h), tape.gradient(loss, model.trainable_variables)


def _max_diffs(custom: MDNRNN, kpath: MDNRNN, done: bool, restarts):
    z, a, r, state = _inputs(done, restarts)
    o1, s1, g1 = _run(custom, z, a, r, state)
    o2, s2, g2 = _run(kpath, z, a, r, state)
    out = max(float(np.abs(x - y).max()) for x, y in zip(o1, o2, strict=True) if x is not None)
    st = max(float(np.abs(x - y).max()) for x, y in zip(s1, s2, strict=True))
    grad = max(float(np.abs(x - y).max()) for x, y in zip(g1, g2, strict=True))
    return out, st, grad


@pytest.mark.parametrize("case", list(RESTARTS))
def test_keras_path_equals_the_custom_cell_doom(case):
    custom, kpath = _pair(done=True)
    assert kpath.lstm_impl == "keras" and custom.lstm_impl == "custom"
    out, st, grad = _max_diffs(custom, kpath, True, RESTARTS[case])
    assert out < 1e-5 and st < 1e-5 and grad < 1e-4, (out, st, grad)


def test_keras_path_equals_the_custom_cell_carracing():
    custom, kpath = _pair(done=False)
    out, st, grad = _max_diffs(custom, kpath, False, [])
    assert out < 1e-5 and st < 1e-5 and grad < 1e-4, (out, st, grad)


def test_the_comparison_fails_without_the_restart_or_the_forget_bias(monkeypatch):
    """The equality above is not vacuous: ignoring the restarts, or dropping the +1 forget bias, is caught."""
    custom, kpath = _pair(done=True)
    monkeypatch.setattr(lstm_cudnn, "restart_segments", lambda lstm, x, h0, c0, r: lstm(x, initial_state=[h0, c0]))
    out, st, _ = _max_diffs(custom, kpath, True, RESTARTS["middle"])
    assert out > 1e-3 and st > 1e-3
    monkeypatch.undo()

    def no_plus_one(kx, kh, b):
        k, rk, kb = keras_layout(kx, kh, b)
        return k, rk, kb - np.concatenate([np.zeros(H), np.ones(H), np.zeros(2 * H)]).astype(np.float32)

    monkeypatch.setattr(M, "keras_layout", no_plus_one)
    out, st, _ = _max_diffs(custom, kpath, True, RESTARTS["none"])
    assert out > 1e-3 and st > 1e-3


def test_layout_conversion_round_trips_and_matches_a_keras_lstm():
    rng = np.random.default_rng(0)
    kx, kh, b = rng.normal(size=(5, 4 * H)), rng.normal(size=(H, 4 * H)), rng.normal(size=4 * H)
    kx, kh, b = (w.astype(np.float32) for w in (kx, kh, b))
    back = from_keras_layout(*keras_layout(kx, kh, b))
    for x, y in zip(back, (kx, kh, b), strict=True):
        np.testing.assert_allclose(x, y, atol=1e-6)
    # a plain keras.layers.LSTM holding the converted weights computes the custom cell
    import keras

    m = MDNRNN(4, 1, H)  # input 5
    m.set_weights([kx, kh, b, *m.get_weights()[3:]])
    lstm = keras.layers.LSTM(H, return_sequences=True, return_state=True)
    x = rng.normal(size=(2, 7, 5)).astype(np.float32)
    lstm(x)
    lstm.set_weights(list(keras_layout(kx, kh, b)))
    hs, h, c = lstm(x)
    _, (c_ref, h_ref) = m(x[..., :4], x[..., 4:])
    np.testing.assert_allclose(h.numpy(), h_ref.numpy(), atol=1e-5)
    np.testing.assert_allclose(c.numpy(), c_ref.numpy(), atol=1e-5)


def test_counts_and_weight_files_are_the_custom_ones(tmp_path):
    from wm.models.mdnrnn import load_mdnrnn, save_config
    from wm.models.training import save_weights

    assert MDNRNN(32, 3, 256, lstm="keras").count_params() == 422_368  # Car (§4, §9)
    assert MDNRNN(64, 1, 512, predict_done=True, lstm="keras").count_params() == 1_678_785  # Doom
    _, kpath = _pair(done=True)
    assert [v.name for v in kpath.weights] == ["lstm_kernel_x", "lstm_kernel_h", "lstm_bias", "out_kernel", "out_bias"]
    path = tmp_path / "mdnrnn.weights.h5"
    save_weights(kpath, path)
    import h5py

    def groups(f):
        with h5py.File(f) as h:
            names: list[str] = []
            h.visit(names.append)
            return names

    save_weights(_pair(done=True)[0], tmp_path / "custom.weights.h5")
    assert groups(path) == groups(tmp_path / "custom.weights.h5") == ["vars", *(f"vars/{i}" for i in range(5))]
    save_config(kpath, path.with_name("model.json"))
    loaded = load_mdnrnn(path)  # the custom cell reads the keras model's file, and back
    assert loaded.lstm_impl == "custom"
    for x, y in zip(loaded.get_weights(), kpath.get_weights(), strict=True):
        np.testing.assert_array_equal(x, y)
    other = MDNRNN(Z, 1, H, 5, True, lstm="keras")
    other.load_weights(str(path))
    for x, y in zip(other.get_weights(), kpath.get_weights(), strict=True):
        np.testing.assert_array_equal(x, y)


def test_auto_and_bad_names():
    expected = "keras" if tf.config.list_logical_devices("GPU") else "custom"
    assert resolve_lstm("auto") == expected
    with pytest.raises(WMError, match="mdnrnn.lstm must be one of custom, keras, auto"):
        resolve_lstm("cudnn")


def test_compiled_train_steps_agree():
    """The train step (tf.function, clipped Adam) gives the same losses and weights on either path, state carried."""
    from wm.models.mdnrnn import make_optimizer
    from wm.models.mdnrnn_tf import make_train_step

    models = _pair(done=True)
    z, a, r, state = _inputs(True, RESTARTS["middle"])
    rng = np.random.default_rng(3)
    batch = {
        "z": tf.constant(np.concatenate([z, rng.normal(size=(B, 1, Z)).astype(np.float32)], 1)),
        "action": tf.constant(a),
        "restart": tf.constant(r),
        "z_mask": tf.ones((B, T)),
        "done_target": tf.constant(np.roll(r, -1, 1)),
        "done_mask": tf.ones((B, T)),
    }
    results = []
    for m in models:
        step, carry, losses = make_train_step(m, make_optimizer(1e-2, 1e-5, 1.0)), state, []
        for _ in range(3):
            nll, done_loss, _, carry = step(batch, carry)
            losses.append((float(nll), float(done_loss)))
        results.append((np.array(losses), m.get_weights(), carry))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-5, atol=1e-5)
    for x, y in zip(results[0][1], results[1][1], strict=True):
        np.testing.assert_allclose(x, y, atol=1e-4)
    for x, y in zip(results[0][2], results[1][2], strict=True):
        np.testing.assert_allclose(x.numpy(), y.numpy(), atol=1e-4)


def test_stage_trains_the_same_with_either(tmp_path):
    """train-mdnrnn with `mdnrnn.lstm: keras` (streams: restarts inside chunks, state carried) reproduces custom."""
    from tests.helpers import mdnrnn_run, stage_run
    from wm.core.bounded import read_jsonl
    from wm.models.mdnrnn import load_mdnrnn

    nll, weights = {}, {}
    for impl in ("custom", "keras"):
        cfg, run = mdnrnn_run(tmp_path / impl, "streams", lstm=impl, epochs=1)
        run.mark_done("encode", {})
        stage_run("train-mdnrnn", cfg, run)
        nll[impl] = [r["mdnrnn/nll"] for r in read_jsonl(run.metrics_path("train-mdnrnn")) if "mdnrnn/nll" in r]
        weights[impl] = load_mdnrnn(run.mdnrnn_weights).get_weights()
    assert len(nll["custom"]) == 4
    np.testing.assert_allclose(nll["keras"], nll["custom"], rtol=1e-5)
    for x, y in zip(weights["custom"], weights["keras"], strict=True):
        np.testing.assert_allclose(x, y, atol=1e-4)


def test_prefetch_keeps_order_raises_where_it_failed_and_stops_its_thread():
    import threading

    from wm.models.training import prefetch

    assert list(prefetch(iter(range(50)), depth=3)) == list(range(50))

    def bad():
        yield from range(3)
        raise ValueError("item 3")

    got = []
    with pytest.raises(ValueError, match="item 3"):
        for x in prefetch(bad()):
            got.append(x)
    assert got == [0, 1, 2]
    produced = []

    def endless():
        i = 0
        while True:
            produced.append(i)
            yield i
            i += 1

    it = prefetch(endless(), depth=2)
    assert [next(it) for _ in range(5)] == list(range(5))
    it.close()  # the consumer stops early (a break, an exception): the producer stops too
    assert not any(t.name == "prefetch" and t.is_alive() for t in threading.enumerate())
    assert len(produced) <= 5 + 2 + 2


def test_deferred_reads_back_in_blocks_and_on_flush():
    """V and M read their losses back every N steps (one device sync), in order, ints untouched, rest on flush."""
    import tensorflow as tf

    from wm.models.training import Deferred

    seen = []
    d = Deferred(3, seen.append)
    for step in range(1, 8):
        d.add(step, tf.constant(step / 2), np.float32(step))
    assert [len(block) for block in seen] == [3, 3]  # nothing handled per step
    d.flush()
    d.flush()  # nothing pending: no empty block
    assert [len(block) for block in seen] == [3, 3, 1]
    items = [item for block in seen for item in block]
    assert items == [(s, s / 2, float(s)) for s in range(1, 8)]
    assert all(type(i[0]) is int and type(i[1]) is float for i in items)


def test_logged_lr_matches_the_schedule():
    from wm.models.mdnrnn import lr_at, lr_value

    for step in (0, 1, 7, 24_400, 10**6):
        assert lr_value(step, 1e-3, 1e-5, 0.99999) == float(lr_at(step, 1e-3, 1e-5, 0.99999))
    assert lr_value(5, 1e-3, 1e-3, 1.0) == float(lr_at(5, 1e-3, 1e-3, 1.0))
