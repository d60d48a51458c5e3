"""M (paper settings §4): counts, NLL vs NumPy, temperature, restart zeroing, done weighting, batching,
learning sanity, the train-mdnrnn stage (resume equivalence, refusals)."""

from __future__ import annotations

import json

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from tests.helpers import mdnrnn_run, stage_run, write_series  # noqa: E402
from wm.core.config import update  # noqa: E402
from wm.core.errors import WMError  # noqa: E402
from wm.data.episodes import episode_name, write_episode  # noqa: E402
from wm.models import mixture, mixture_tf  # noqa: E402
from wm.models.mdnrnn import MDNRNN, load_mdnrnn, lr_at, make_optimizer  # noqa: E402
from wm.models.mdnrnn_tf import make_train_step  # noqa: E402


def np_nll(logmix, mu, logstd, target):
    """Independent reference: −log Σ_k softmax(logmix)_k N(target; μ_k, σ_k), log-sum-exp, mean over all."""
    lm = logmix - logmix.max(-1, keepdims=True)
    lm = lm - np.log(np.exp(lm).sum(-1, keepdims=True))
    x = target[..., None]
    v = lm - 0.5 * ((x - mu) / np.exp(logstd)) ** 2 - logstd - 0.5 * np.log(2 * np.pi)
    m = v.max(-1, keepdims=True)
    return -(m[..., 0] + np.log(np.exp(v - m).sum(-1)))


def test_paper_parameter_counts():
    assert MDNRNN(32, 3, 256).count_params() == 422_368  # Car (§4, §9)
    assert MDNRNN(64, 1, 512, predict_done=True).count_params() == 1_678_785  # Doom


def test_mixture_nll_matches_numpy_logsumexp():
    rng = np.random.default_rng(0)
    shape = (3, 4, 6, 5)
    logmix, mu, logstd = rng.normal(size=shape) * 2, rng.normal(size=shape), rng.normal(size=shape) * 0.5
    target = rng.normal(size=shape[:-1]) * 1.5
    mask = (rng.random(shape[:2]) > 0.3).astype(np.float32)
    ref = np_nll(logmix, mu, logstd, target)
    got = mixture.mixture_nll(*(tf.constant(x, tf.float32) for x in (logmix, mu, logstd, target)))
    np.testing.assert_allclose(float(got), ref.mean(), rtol=1e-5)
    got_m = mixture.mixture_nll(*(tf.constant(x, tf.float32) for x in (logmix, mu, logstd, target)), tf.constant(mask))
    np.testing.assert_allclose(float(got_m), (ref * mask[..., None]).sum() / (mask.sum() * shape[2]), rtol=1e-5)


def test_head_layout_and_log_softmax():
    m = MDNRNN(3, 1, 4, num_mixtures=5, predict_done=True)
    h = tf.random.normal((2, 4))
    out = m.head(h)
    flat = (h @ m.out_kernel + m.out_bias).numpy()
    np.testing.assert_allclose(out.done_logit.numpy(), flat[:, 0], rtol=1e-5)
    rows = flat[:, 1:].reshape(2, 3, 15)  # dimension-major rows of [5 logmix | 5 mu | 5 logstd] (§4)
    np.testing.assert_allclose(out.mu.numpy(), rows[..., 5:10], rtol=1e-5)
    np.testing.assert_allclose(out.logstd.numpy(), rows[..., 10:], rtol=1e-5)
    np.testing.assert_allclose(out.logmix.numpy(), tf.nn.log_softmax(rows[..., :5]).numpy(), atol=1e-5)


def test_temperature_sampling():
    n, k = 20000, 3
    logmix = tf.math.log(tf.constant([[0.5, 0.3, 0.2]]) * tf.ones((n, 1)))[:, None, :]  # (n, 1, K)
    mu = tf.constant([[[-100.0, 0.0, 100.0]]]) * tf.ones((n, 1, 1))
    logstd = tf.math.log(tf.constant([[[0.5, 1.0, 2.0]]])) * tf.ones((n, 1, 1))
    rng = np.random.default_rng(1)
    u = tf.constant(rng.random((n, 1)), tf.float32)
    eps = tf.constant(rng.standard_normal((n, 1)), tf.float32)
    for tau in (1.0, 1.5, 0.5):
        z = mixture_tf.sample_mixture(logmix, mu, logstd, tau, u, eps).numpy()[:, 0]
        comp = np.digitize(z, [-50, 50])
        p = np.array([0.5, 0.3, 0.2]) ** (1 / tau)
        np.testing.assert_allclose(np.bincount(comp, minlength=k) / n, p / p.sum(), atol=0.015)  # logits / τ
        np.testing.assert_allclose(z[comp == 2].std(), 2.0 * np.sqrt(tau), rtol=0.05)  # σ·√τ
        # the same distribution as the TFP tempered mixture
        d = mixture_tf.tempered(logmix[:1], mu[:1], logstd[:1], tau)
        np.testing.assert_allclose(d.mixture_distribution.probs_parameter().numpy()[0, 0], p / p.sum(), rtol=1e-5)
    z = mixture_tf.sample_mixture(logmix, mu, logstd, 0.01, u, eps).numpy()[:, 0]
    assert np.mean(np.abs(z + 100) < 1.0) > 0.99  # τ → 0 concentrates on the top component


def test_low_temperature_keeps_a_uniform_mixture_uniform():
    # τ = 0.01 over K = 5 equal weights: logmix/τ = −log 5/0.01 ≈ −161, and exp of that underflows to 0 in float32
    # for every component unless the max over K is taken off first; then the sampler always picked component 0.
    n, k = 5000, 5
    logmix = tf.fill((n, 1, k), float(-np.log(k)))
    mu = tf.constant(100.0 * np.arange(k), tf.float32) * tf.ones((n, 1, 1))
    logstd = tf.zeros((n, 1, k))
    u = tf.constant(np.random.default_rng(2).random((n, 1)), tf.float32)
    z = mixture_tf.sample_mixture(logmix, mu, logstd, 0.01, u, tf.zeros((n, 1))).numpy()[:, 0]
    np.testing.assert_allclose(np.bincount(np.rint(z / 100).astype(int), minlength=k) / n, np.full(k, 1 / k), atol=0.02)


def test_restart_zeroes_state_before_the_step():
    m = MDNRNN(4, 1, 8, predict_done=True)
    z, a = tf.random.normal((2, 4)), tf.random.normal((2, 1))
    junk = (tf.random.normal((2, 8)), tf.random.normal((2, 8)))
    zero = m.initial_state(2)
    out_j, st_j = m.step(z, a, junk, tf.constant([1.0, 0.0]))
    out_0, st_0 = m.step(z, a, zero, tf.constant([1.0, 1.0]))
    np.testing.assert_allclose(st_j[0][0].numpy(), st_0[0][0].numpy(), atol=1e-6)  # row 0 restarted
    assert not np.allclose(st_j[0][1].numpy(), st_0[0][1].numpy())  # row 1 kept its state
    # sequence mode: a restart in the middle makes the rest independent of the past
    zs, acts = tf.random.normal((1, 6, 4)), tf.random.normal((1, 6, 1))
    r = tf.constant([[1.0, 0, 0, 1.0, 0, 0]])
    full, _ = m(zs, acts, r)
    tail, _ = m(zs[:, 3:], acts[:, 3:], r[:, 3:])
    np.testing.assert_allclose(full.mu.numpy()[:, 3:], tail.mu.numpy(), atol=1e-5)
    # sequence call equals stepping
    st = m.initial_state(1)
    for t in range(6):
        o, st = m.step(zs[:, t], acts[:, t], st, r[:, t])
    np.testing.assert_allclose(o.mu.numpy(), full.mu.numpy()[:, -1], atol=1e-5)


def test_forget_bias_is_a_constant_one():
    m = MDNRNN(2, 1, 3)
    for v in (m.lstm_kernel_x, m.lstm_kernel_h, m.lstm_bias):
        v.assign(tf.zeros_like(v))
    c0 = tf.ones((1, 3))
    _, (c, _) = m.step(tf.zeros((1, 2)), tf.zeros((1, 1)), (c0, tf.zeros((1, 3))))
    # zero weights: c' = c·σ(0 + 1) + σ(0)·tanh(0)
    np.testing.assert_allclose(c.numpy(), np.full((1, 3), 1 / (1 + np.exp(-1.0))), rtol=1e-6)


def test_done_loss_weights_positives_ten_times():
    logit = tf.constant([0.3, -0.2, 1.1, 0.0])
    target = tf.constant([1.0, 0.0, 1.0, 0.0])
    got = float(mixture.weighted_done_loss(logit, target, pos_weight=10.0))
    x, y = logit.numpy(), target.numpy()
    sp = np.log1p(np.exp(-x))  # −log σ(x)
    ref = np.mean(10 * y * sp + (1 - y) * (x + sp))
    np.testing.assert_allclose(got, ref, rtol=1e-5)
    mask = tf.constant([1.0, 1.0, 0.0, 0.0])
    np.testing.assert_allclose(
        float(mixture.weighted_done_loss(logit, target, mask)), np.mean((10 * y * sp + (1 - y) * (x + sp))[:2]), rtol=1e-5
    )


def test_lr_schedule_and_optimizer_settings():
    np.testing.assert_allclose(float(lr_at(24400, 1e-3, 1e-5, 0.99999)), (1e-3 - 1e-5) * 0.99999**24400 + 1e-5, rtol=1e-5)
    opt = make_optimizer(1e-3, 1e-5, 1.0)
    assert opt.epsilon == 1e-8 and opt.clipvalue == 1.0 and opt.clipnorm is None


def test_load_mdnrnn_checks_shapes(tmp_path):
    from wm.models.mdnrnn import save_config
    from wm.models.training import save_weights

    m = MDNRNN(4, 1, 8, predict_done=True)
    save_weights(m, tmp_path / "mdnrnn.weights.h5")
    save_config(m, tmp_path / "model.json")
    m2 = load_mdnrnn(tmp_path / "mdnrnn.weights.h5")
    np.testing.assert_array_equal(m2.lstm_kernel_h.numpy(), m.lstm_kernel_h.numpy())
    with pytest.raises(WMError):
        load_mdnrnn(tmp_path / "mdnrnn.weights.h5", z_dim=5, action_dim=1, hidden=8, predict_done=True)
    with pytest.raises(WMError):
        load_mdnrnn(tmp_path / "missing.weights.h5", 4, 1, 8)


# ---------------------------------------------------------------------------- data and training


def test_stream_and_episode_batches(tmp_path):
    from wm.data.sequences import EpisodeBatches, StreamBatches, load_series

    write_series(tmp_path, [7, 5, 9])
    s = load_series(tmp_path, 4, 1)
    assert s.n_frames == 21 and list(s.lengths) == [7, 5, 9]
    sb = StreamBatches(s, batch_size=2, seq_len=4, seed=0)
    assert sb.n_chunks == 2  # (21 − 1) // (2·4)
    idx, valid, first, last = sb.epoch_index(0)
    assert valid.all() and idx.shape == (2, 9)
    chunks = list(sb.epoch(0))
    # chunks overlap by one frame: the last target of chunk 0 is the first input of chunk 1 (no §10.11 gap)
    np.testing.assert_array_equal(idx[:, 4], idx[:, 4:][:, 0])
    b0 = chunks[0][1]
    assert b0["z"].shape == (2, 5, 4) and b0["action"].shape == (2, 4, 1) and b0["restart"].shape == (2, 4)
    # restart marks episode starts, done_target the frame before the next start
    assert (b0["restart"] == first[:, :4]).all() and (b0["done_target"] == last[:, :4]).all()
    assert b0["restart"][0, 0] == 1.0
    # z is re-sampled per batch but stays near μ (logvar −8)
    np.testing.assert_allclose(b0["z"], s.mu[idx[:, :5]].astype(np.float32), atol=0.2)
    # episodes mode: padding is masked
    eb = EpisodeBatches(s, batch_size=3, seq_len=9, seed=0, predict_done=True)
    b = eb.batch(0)
    assert b["z"].shape == (3, 10, 4)
    n_frames = b["done_mask"].sum(1)
    assert (
        sorted(n_frames) == [5, 7, 9] and (b["z_mask"].sum(1) == n_frames - 1).all() and (b["done_target"].sum(1) == 1).all()
    )
    eb2 = EpisodeBatches(s, batch_size=3, seq_len=9, seed=0, predict_done=False)
    assert eb2.batch(0)["z"].shape == (3, 9, 4)  # 9-frame window: 8 inputs → 8 targets (999 → 999 for Car)
    np.testing.assert_array_equal(eb.batch(5)["z"], eb.batch(5)["z"])  # a function of (seed, step)


def test_learning_sanity_nll_falls():
    """A synthetic deterministic sequence task: NLL must fall well below its start (and below 0 nats/dim)."""
    rng = np.random.default_rng(0)
    b, t, zd = 16, 20, 3
    a = rng.uniform(-1, 1, (b, t, 1)).astype(np.float32)
    z = np.zeros((b, t + 1, zd), np.float32)
    z[:, 0] = rng.normal(size=(b, zd))
    for s in range(t):
        z[:, s + 1] = 0.8 * np.roll(z[:, s], 1, axis=-1) + 0.5 * a[:, s]
    m = MDNRNN(zd, 1, 32, num_mixtures=3, predict_done=False)
    opt = make_optimizer(1e-2, 1e-5, 1.0)
    step = make_train_step(m, opt)
    batch = {
        "z": tf.constant(z),
        "action": tf.constant(a),
        "z_mask": tf.ones((b, t)),
        "restart": tf.zeros((b, t)),
        "done_target": tf.zeros((b, t)),
        "done_mask": tf.ones((b, t)),
    }
    first = None
    for _ in range(300):
        nll, _, _, _ = step(batch, m.initial_state(b))
        first = float(nll) if first is None else first
    assert float(nll) < first - 1.5 and float(nll) < 0.0, (first, float(nll))


def test_done_head_learns_episode_ends():
    """Done BCE through M: a flag visible in the input predicts the done target after training."""
    import keras

    keras.utils.set_random_seed(1)  # M's initial weights, not whatever the tests before left Keras's generator at
    rng = np.random.default_rng(1)
    b, t = 8, 12
    z = rng.normal(size=(b, t + 1, 2)).astype(np.float32)
    done = (rng.random((b, t)) < 0.1).astype(np.float32)
    a = (done[..., None] * 2 - 1).astype(np.float32)  # the action reveals the end
    m = MDNRNN(2, 1, 16, num_mixtures=2, predict_done=True)
    step = make_train_step(m, make_optimizer(1e-2, 1e-5, 1.0), done_weight=10.0)
    batch = {
        "z": tf.constant(z),
        "action": tf.constant(a),
        "z_mask": tf.ones((b, t)),
        "restart": tf.zeros((b, t)),
        "done_target": tf.constant(done),
        "done_mask": tf.ones((b, t)),
    }
    for _ in range(150):
        step(batch, m.initial_state(b))
    out, _ = m(tf.constant(z[:, :-1]), tf.constant(a), tf.zeros((b, t)))
    assert ((out.done_logit.numpy() > 0) == (done > 0)).all()


def test_dropout_masks_in_sequences_steps_and_training():
    """M's dropout (Dropout's Dream Land): fixed masks per row give the same outputs stepping or as a sequence,
    change the outputs, keep 1 − p of the units scaled by 1/(1 − p); training draws them from (seed, step)."""
    import keras

    rng = np.random.default_rng(3)
    b, t, zd, H, p = 4, 6, 5, 16, 0.25
    keras.utils.set_random_seed(0)
    m = MDNRNN(zd, 1, H, num_mixtures=2, predict_done=True, dropout=p)
    mz, mh = m.dropout_masks(tf.constant(rng.random((b, zd)), tf.float32), tf.constant(rng.random((b, H)), tf.float32))
    big = m.dropout_masks(tf.constant(rng.random((200, 400)), tf.float32), tf.zeros((1, 1)))[0].numpy()
    assert set(np.unique(big)) == {0.0, np.float32(1 / (1 - p))} and abs((big == 0).mean() - p) < 0.01
    z = tf.constant(rng.normal(size=(b, t, zd)), tf.float32)
    a = tf.constant(rng.uniform(-1, 1, (b, t, 1)), tf.float32)
    restart = tf.constant((rng.random((b, t)) < 0.2).astype(np.float32))
    seq, final = m(z, a, restart, masks=(mz, mh))
    state = m.initial_state(b)
    for s in range(t):
        out, state = m.step(z[:, s], a[:, s], state, restart[:, s], masks=(mz, mh))
        np.testing.assert_allclose(out.mu.numpy(), seq.mu.numpy()[:, s], atol=1e-5)
    np.testing.assert_allclose(state[1].numpy(), final[1].numpy(), atol=1e-5)
    plain, _ = m(z, a, restart)
    assert np.abs(plain.mu.numpy() - seq.mu.numpy()).max() > 1e-3  # the masks matter
    ones = tf.ones((b, zd)), tf.ones((b, H))
    np.testing.assert_allclose(m(z, a, restart, masks=ones)[0].mu.numpy(), plain.mu.numpy(), atol=1e-6)

    batch = {
        "z": tf.constant(rng.normal(size=(b, t + 1, zd)), tf.float32),
        "action": a,
        "z_mask": tf.ones((b, t)),
        "restart": restart,
        "done_target": tf.zeros((b, t)),
        "done_mask": tf.ones((b, t)),
    }

    def first_loss(dropout, seed):
        keras.utils.set_random_seed(0)
        mm = MDNRNN(zd, 1, H, num_mixtures=2, predict_done=True, dropout=dropout)
        step = make_train_step(mm, make_optimizer(1e-3, 1e-5, 1.0), seed=seed)
        return [float(step(batch, mm.initial_state(b))[0]) for _ in range(2)]

    assert first_loss(p, 3) == first_loss(p, 3)  # drawn from (seed, step): a resume redraws the same masks
    assert first_loss(p, 3) != first_loss(p, 4)
    assert first_loss(0.0, 3) == first_loss(0.0, 4)  # no dropout: the seed plays no part
    with pytest.raises(WMError, match=r"mdnrnn.dropout must be in \[0, 1\)"):
        MDNRNN(zd, 1, H, dropout=1.0)
    with pytest.raises(WMError, match="keras cannot apply mdnrnn.dropout"):
        MDNRNN(zd, 1, H, lstm="keras", dropout=0.1)
    assert MDNRNN(zd, 1, H, lstm="auto", dropout=0.1).lstm_impl == "custom"


def test_reward_head_loss_batches_counts_and_learning(tmp_path):
    """M's optional reward head: batches carry each input step's reward, its loss is the masked squared error of
    an independent formula, it adds H + 1 parameters, travels in model.json, and learns r = 2·a."""
    from wm.data.sequences import EpisodeBatches, load_series
    from wm.models.mdnrnn import config_path, save_config

    rng = np.random.default_rng(0)
    pred, target = rng.normal(size=(3, 7)).astype(np.float32), rng.normal(size=(3, 7)).astype(np.float32)
    mask = (rng.random((3, 7)) < 0.7).astype(np.float32)
    err = pred - target
    want = (err**2 * mask).sum() / mask.sum()
    got = float(mixture.reward_loss(tf.constant(pred), tf.constant(target), tf.constant(mask)))
    assert got == pytest.approx(want, rel=1e-6)
    assert float(mixture.reward_loss(tf.constant(pred), tf.constant(target))) == pytest.approx((err**2).mean(), rel=1e-6)

    base = MDNRNN(4, 1, 8, 2, predict_done=True).count_params()
    m = MDNRNN(4, 1, 8, 2, predict_done=True, predict_reward=True)
    assert m.count_params() == base + 8 + 1
    write_series(tmp_path / "series", [30, 25, 40, 35])
    series = load_series(tmp_path / "series", 4, 1, rewards=True)
    np.testing.assert_allclose(series.reward, 2.0 * series.action[:, 0])
    batches = EpisodeBatches(series, 4, 20, seed=0, predict_done=True)
    b = batches.batch(0)
    np.testing.assert_allclose(b["reward"], 2.0 * b["action"][..., 0] * b["done_mask"], atol=1e-6)
    assert "reward" not in EpisodeBatches(load_series(tmp_path / "series", 4, 1), 4, 20, 0, True).batch(0)

    step = make_train_step(m, make_optimizer(1e-2, 1e-5, 1.0))
    losses = []
    for k in range(200):
        batch = {key: tf.constant(v) for key, v in batches.batch(k).items()}
        losses.append(float(step(batch, m.initial_state(4))[2]))
    assert losses[-1] < 0.05 * losses[0], (losses[0], losses[-1])  # r = 2·a (variance 4/3) learned

    weights = tmp_path / "m" / "mdnrnn.weights.h5"
    weights.parent.mkdir()
    m.save_weights(str(weights))
    save_config(m, config_path(weights))
    back = load_mdnrnn(weights)
    assert back.predict_reward and back.count_params() == m.count_params()


def test_stage_refuses_without_series(tmp_path):

    cfg, run = mdnrnn_run(tmp_path, "streams")
    with pytest.raises(WMError, match="encode"):
        stage_run("train-mdnrnn", cfg, run)


def test_a_done_horizon_below_one_is_refused_by_the_config(tmp_path):
    # config.RULES, checked by every config the code builds: the stage never sees it, nothing is written
    with pytest.raises(WMError, match=r"'mdnrnn.done_horizon' must be >= 1, got 0"):
        mdnrnn_run(tmp_path, "streams", done_horizon=0)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "batching, over",
    [("streams", {}), ("episodes", {}), ("streams", {"dropout": 0.2}), ("episodes", {"predict_reward": True, "steps": 8})],
)
def test_stage_trains_and_resumes_identically(tmp_path, monkeypatch, batching, over):
    """…with M's dropout too (its masks follow the restored step counter, so the resumed run is the same) and with
    a reward head (its loss logged and falling)."""
    import wm.models.training
    from wm.core.bounded import read_jsonl

    cfg, run = mdnrnn_run(tmp_path / "a", batching, **over)
    run.mark_done("encode", {})
    stage_run("train-mdnrnn", cfg, run)
    full = [r["mdnrnn/nll"] for r in read_jsonl(run.metrics_path("train-mdnrnn")) if "mdnrnn/nll" in r]
    assert run.is_done("train-mdnrnn") and (run.stage_dir("train-mdnrnn") / "mdnrnn.weights.h5").exists()
    # streams: (50 − 1) // (2·6) = 4 chunks per epoch
    assert len(full) == (int(cfg.mdnrnn.steps) if batching == "episodes" else 2 * 4)
    # a run that dies at step 3 (mid-epoch, after the step-2 checkpoint with its carried state), then reruns
    cfg2, run2 = mdnrnn_run(tmp_path / "b", batching, **over)
    run2.mark_done("encode", {})
    real = wm.models.training.check_finite

    def dies_at_3(loss, step, ckpt):
        if step == 3:
            raise WMError("killed")
        real(loss, step, ckpt)

    monkeypatch.setattr(wm.models.training, "check_finite", dies_at_3)
    with pytest.raises(WMError, match="killed"):
        stage_run("train-mdnrnn", cfg2, run2)
    monkeypatch.setattr(wm.models.training, "check_finite", real)
    stage_run("train-mdnrnn", cfg2, run2)
    resumed = [r["mdnrnn/nll"] for r in read_jsonl(run2.metrics_path("train-mdnrnn")) if "mdnrnn/nll" in r]
    np.testing.assert_allclose(resumed, full, rtol=1e-5)
    m1 = load_mdnrnn(run.stage_dir("train-mdnrnn") / "mdnrnn.weights.h5")
    m2 = load_mdnrnn(run2.stage_dir("train-mdnrnn") / "mdnrnn.weights.h5")
    np.testing.assert_allclose(m1.lstm_kernel_h.numpy(), m2.lstm_kernel_h.numpy(), atol=1e-6)
    rewards = [r["mdnrnn/reward_loss"] for r in read_jsonl(run.metrics_path("train-mdnrnn")) if "mdnrnn/reward_loss" in r]
    assert len(rewards) == (len(full) if over.get("predict_reward") else 0)
    if rewards:
        assert rewards[-1] < rewards[0] and run.done_info("train-mdnrnn")["mdnrnn/reward_loss"] == rewards[-1]
    if over.get("dropout"):  # and the masks were applied: the same run without dropout learns other weights
        cfg3, run3 = mdnrnn_run(tmp_path / "c", batching)
        run3.mark_done("encode", {})
        stage_run("train-mdnrnn", cfg3, run3)
        plain = [r["mdnrnn/nll"] for r in read_jsonl(run3.metrics_path("train-mdnrnn")) if "mdnrnn/nll" in r]
        assert not np.allclose(plain, full, rtol=1e-4)


@pytest.mark.parametrize("batching", ["streams", "episodes"])
def test_a_rerun_that_finds_the_training_done_reports_the_same_figures(tmp_path, batching):
    """Killed after its last checkpoint but before its DONE, the rerun trains no step: its DONE still says the last
    step's losses (before: NaN, from a rerun that read back no step; the kill campaign found it)."""

    cfg, run = mdnrnn_run(tmp_path, batching)
    run.mark_done("encode", {})
    stage_run("train-mdnrnn", cfg, run)
    first = run.done_info("train-mdnrnn")
    assert np.isfinite(first["mdnrnn/nll"]) and np.isfinite(first["mdnrnn/done_loss"])
    run.clear_done("train-mdnrnn")  # as a kill between the final checkpoint and DONE leaves it
    stage_run("train-mdnrnn", cfg, run)
    assert run.done_info("train-mdnrnn") == first


def test_stage_writes_dream_preview_gif(tmp_path):
    from PIL import Image

    from wm.models.training import save_weights
    from wm.models.vae import ConvVAE

    cfg, run = mdnrnn_run(tmp_path, "episodes", steps=1, preview_episodes=2)
    cfg = update(cfg, {"dream": {"max_steps": 5}})
    run.mark_done("encode", {})
    save_weights(ConvVAE(4), run.stage_dir("train-vae") / "vae.weights.h5")
    stage_run("train-mdnrnn", cfg, run)
    gif = Image.open(run.stage_dir("train-mdnrnn") / "dream_preview.gif")
    assert gif.size == (4 * 64, 2 * 64) and 2 <= gif.n_frames <= 6  # two 64-px rollouts side by side, upscaled ×2 to ≥ 256 px
    assert json.loads((run.stage_dir("train-mdnrnn") / "DONE").read_text())["mdnrnn/step"] == 1


def test_done_head_series_end_at_the_first_termination(tmp_path):
    """CarRacing data runs on past the car leaving the playfield (`collect.ignore_done`, done repeated while it is
    off); with a done head M sees each episode only up to its first done, which is its one done target, and an
    episode that reached the step cap gets none (a truncation is not a death)."""
    from wm.data.episodes import read_episode
    from wm.data.sequences import EpisodeBatches, StreamBatches, load_series

    write_series(tmp_path, [12, 9, 10])
    for i, first_done in [(0, 6), (1, None)]:  # episode 0 leaves the field at step 6 and stays off; 1 is capped
        d = read_episode(tmp_path / episode_name(i), ("mu", "logvar", "action", "reward", "done"))
        d["done"][:] = False
        if first_done is not None:
            d["done"][first_done:] = True
            d["reward"][first_done:] = -100.0
        write_episode(tmp_path / episode_name(i), **d)
    s = load_series(tmp_path, 4, 1, rewards=True, dones=True)
    assert list(s.lengths) == [7, 9, 10] and list(s.terminal) == [True, False, True]
    assert (s.reward[: s.lengths[0]] == -100.0).sum() == 1  # the −100 of the step that ended it, once
    # without a done head nothing changes: whole episodes, every last frame a done target (as before)
    assert list(load_series(tmp_path, 4, 1).lengths) == [12, 9, 10]

    eb = EpisodeBatches(s, batch_size=3, seq_len=12, seed=0, predict_done=True)
    for step in range(3):
        b = eb.batch(step)
        n = b["done_mask"].sum(1).astype(int)
        assert sorted(n) == [7, 9, 10]
        for row, length in enumerate(n):
            want = np.zeros(12, np.float32)
            if length != 9:  # the capped episode has no done target
                want[length - 1] = 1.0
            np.testing.assert_array_equal(b["done_target"][row], want)
    idx, valid, first, last = StreamBatches(s, batch_size=1, seq_len=25, seed=0).epoch_index(0)
    assert last.sum() == 2 and first.sum() == 3  # two terminal ends, three starts


def test_a_done_horizon_marks_the_last_frames_of_a_death_not_of_a_cap(tmp_path):
    """mdnrnn.done_horizon k: the done head learns "dies within k steps", so an episode that ended by termination
    gets done targets on its last k frames (all of it when shorter), a capped one none; k = 1 is the paper's one
    target; both batchings agree."""
    from wm.data.episodes import read_episode
    from wm.data.sequences import EpisodeBatches, StreamBatches, load_series

    write_series(tmp_path, [7, 9, 3])
    d = read_episode(tmp_path / episode_name(1), ("mu", "logvar", "action", "reward", "done"))
    d["done"][:] = False  # episode 1 reached the step cap
    write_episode(tmp_path / episode_name(1), **d)
    s = load_series(tmp_path, 4, 1, dones=True)
    assert list(s.terminal) == [True, False, True]
    for k, want in [(1, {7: [6], 9: [], 3: [2]}), (4, {7: [3, 4, 5, 6], 9: [], 3: [0, 1, 2]})]:
        eb = EpisodeBatches(s, batch_size=3, seq_len=9, seed=0, predict_done=True, done_horizon=k)
        b = eb.batch(0)
        for row, length in enumerate(b["done_mask"].sum(1).astype(int)):
            assert list(np.flatnonzero(b["done_target"][row])) == want[length]
        idx, valid, first, last = StreamBatches(s, batch_size=1, seq_len=18, seed=0, done_horizon=k).epoch_index(0)
        assert valid.all() and sorted(idx[0]) == list(range(s.n_frames))  # one stream holds every frame once
        marked = set(idx[0][last[0]].tolist())
        assert marked == {int(s.starts[e]) + f for e, n in enumerate(s.lengths) for f in want[int(n)]}
