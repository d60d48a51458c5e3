"""V and M on both Keras backends: the backend choice, the plain-ops mixture NLL against TFP's, the NumPy frame stream,
and (slow) the same weights giving the same losses under JAX, JAX's weights loading under TensorFlow.

This process runs Keras on TensorFlow (tests/conftest.py); JAX runs in a child process (`fixtures/jax_backend.py`),
where TensorFlow cannot be imported at all.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.vae_data import make_run
from wm.core import backend
from wm.core.errors import WMError

FIXTURE = Path(__file__).parent / "fixtures" / "jax_backend.py"


def test_auto_reads_keras_backend_and_a_running_keras_refuses_another(monkeypatch):
    import keras  # noqa: F401 — this process's Keras runs on TensorFlow (loaded before the variable changes below)

    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert backend.resolve("auto") == "jax" and backend.resolve("tensorflow") == "tensorflow"
    monkeypatch.setenv("KERAS_BACKEND", "torch")  # not one V and M are tested on: TensorFlow
    assert backend.resolve("auto") == "tensorflow"
    with pytest.raises(WMError, match="run.backend must be one of auto, tensorflow, jax"):
        backend.resolve("torch")
    with pytest.raises(WMError, match="Keras already runs on tensorflow in this process"):
        backend.activate("jax")
    assert backend.activate("tensorflow") == "tensorflow"


def test_the_config_refuses_an_unknown_backend():
    from wm.core.config import load

    assert load([], ["run.backend=jax"]).run.backend == "jax"
    with pytest.raises(WMError, match="run.backend"):
        load([], ["run.backend=torch"])


def _mixture_inputs(rng, shape=(6, 5, 16), k=5):
    logits = rng.normal(0, 2, (*shape, k)).astype(np.float32)  # not log-softmaxed: the twin must normalise them
    mu = rng.normal(0, 1, (*shape, k)).astype(np.float32)
    logstd = rng.normal(-0.5, 0.6, (*shape, k)).astype(np.float32)
    target = rng.normal(0, 1.2, shape).astype(np.float32)
    return logits, mu, logstd, target


def test_the_plain_ops_nll_equals_tfp_s():
    """JAX's NLL (`mixture_nll_ops`) against TFP's MixtureSameFamily on TensorFlow, with and without a step mask."""
    from wm.models import mixture

    rng = np.random.default_rng(0)
    logits, mu, logstd, target = _mixture_inputs(rng)
    mask = (rng.random(target.shape[:-1]) < 0.7).astype(np.float32)
    for m in (None, mask):
        tfp_nll = float(mixture.mixture_nll(logits, mu, logstd, target, m))
        ops_nll = float(mixture.mixture_nll_ops(logits, mu, logstd, target, m))
        assert ops_nll == pytest.approx(tfp_nll, rel=1e-6, abs=1e-6)
    # and both against the density written out in NumPy (float64)
    x = target[..., None].astype(np.float64)
    logw = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    comp = -0.5 * ((x - mu) / np.exp(logstd)) ** 2 - logstd - 0.5 * np.log(2 * np.pi)
    expected = -np.log(np.exp(logw + comp).sum(-1)).mean()
    assert float(mixture.mixture_nll_ops(logits, mu, logstd, target)) == pytest.approx(expected, rel=1e-5)


def test_the_done_loss_is_tf_s_weighted_cross_entropy_bit_for_bit():
    import tensorflow as tf

    from wm.models import mixture

    rng = np.random.default_rng(1)
    x = rng.normal(0, 4, (8, 30)).astype(np.float32)
    t = (rng.random((8, 30)) < 0.3).astype(np.float32)
    ours = mixture.weighted_done_loss(tf.constant(x), tf.constant(t), pos_weight=10.0)
    theirs = tf.reduce_mean(tf.nn.weighted_cross_entropy_with_logits(labels=t, logits=x, pos_weight=10.0))
    assert float(ours) == float(theirs)


def _episode_frames(run) -> dict[str, np.ndarray]:
    from wm.data.episodes import read_episode

    return {p.name: read_episode(p, keys=("obs",))["obs"] for p in sorted(run.stage_dir("collect").glob("*.npz"))}


def test_the_numpy_frame_stream_yields_every_frame_once_and_resumes(tmp_path):
    """`frame_batches` (the JAX path's input): every training frame once per epoch, a function of (seed, epoch), a
    resume that skips k batches continues the same stream, and another epoch is another order."""
    from wm.data.frames import frame_batches

    _, run = make_run(tmp_path, episodes=5, t=37)
    frames = _episode_frames(run)
    paths = sorted(run.stage_dir("collect").glob("*.npz"))
    every = np.concatenate(list(frames.values()))

    def stream(**kw):
        return list(frame_batches(paths, 16, seed=7, shuffle_buffer=50, cycle=3, **kw))

    a = stream(epoch=0)
    assert len(a) == len(every) // 16 and all(x.shape == (16, 64, 64, 3) and x.dtype == np.uint8 for x in a)
    whole = list(frame_batches(paths, 16, seed=7, shuffle_buffer=50, cycle=3, drop_remainder=False))
    got = np.concatenate(whole)
    assert len(got) == len(every)
    key = lambda arr: sorted(f.tobytes() for f in arr)  # noqa: E731
    assert key(got) == key(every)  # the same frames, each once
    assert all(np.array_equal(x, y) for x, y in zip(a, stream(epoch=0), strict=True))
    assert all(np.array_equal(x, y) for x, y in zip(a[3:], stream(epoch=0, skip_batches=3), strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, stream(epoch=1), strict=True))
    ordered = np.concatenate(list(frame_batches(paths, 16, cycle=1, drop_remainder=False)))
    assert np.array_equal(ordered, every)  # no shuffle, one file at a time: the files' own order


def test_the_numpy_frame_stream_names_a_file_it_cannot_read(tmp_path):
    from wm.data.frames import frame_batches

    _, run = make_run(tmp_path, episodes=3, t=20)
    paths = sorted(run.stage_dir("collect").glob("*.npz"))
    paths[1].write_bytes(b"not an episode")
    failures: dict[str, str] = {}
    got = np.concatenate(list(frame_batches(paths, 8, cycle=2, drop_remainder=False, failures=failures)))
    assert len(got) == 40 and list(failures) == [str(paths[1])]


@pytest.mark.slow
def test_the_same_weights_give_the_same_losses_on_jax_and_jax_weights_load_on_tensorflow(tmp_path):
    """The models on JAX (no TensorFlow importable there) match TensorFlow's on TensorFlow-saved weights; JAX's
    training steps learn; the weights they write load under TensorFlow and give JAX's outputs (within 1e-5)."""
    import keras

    from wm.models.mdnrnn import MDNRNN, lr_at
    from wm.models.vae import ConvVAE

    rng = np.random.default_rng(0)
    keras.utils.set_random_seed(5)
    v, m = ConvVAE(32), MDNRNN(16, 3, 32, predict_done=True, predict_reward=True)
    v.save_weights(str(tmp_path / "vae_tf.weights.h5"))
    m.save_weights(str(tmp_path / "mdnrnn_tf.weights.h5"))
    b, t = 4, 9
    data = {
        "x": rng.integers(0, 256, (6, 64, 64, 3), dtype=np.uint8),
        "eps": rng.standard_normal((6, 32)).astype(np.float32),
        "m_z": rng.standard_normal((b, t + 1, 16)).astype(np.float32),
        "m_action": rng.uniform(-1, 1, (b, t, 3)).astype(np.float32),
        "m_restart": (rng.random((b, t)) < 0.2).astype(np.float32),
        "m_z_mask": np.ones((b, t), np.float32),
        "m_done_target": (rng.random((b, t)) < 0.2).astype(np.float32),
        "m_done_mask": np.ones((b, t), np.float32),
        "m_reward": rng.standard_normal((b, t)).astype(np.float32),
    }
    np.savez(tmp_path / "in.npz", **data)
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, str(FIXTURE), str(tmp_path / "in.npz"), str(tmp_path)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tensorflow imported: False" in done.stdout
    j = dict(np.load(tmp_path / "outputs.npz"))
    assert (int(j["params_vae32"]), int(j["params_car_m"]), int(j["params_doom_m"])) == (4_348_547, 422_368, 1_678_785)

    bm = {k[2:]: val for k, val in data.items() if k.startswith("m_")}

    def tf_outputs(vae, mdn) -> dict[str, np.ndarray]:
        out = {"v_terms": np.array([float(x) for x in vae.loss_terms(data["x"], data["eps"], 0.5)])}
        o, (c, h) = mdn(bm["z"][:, :-1], bm["action"], bm["restart"])
        out.update({f"m_{k}": np.asarray(val) for k, val in o._asdict().items() if val is not None})
        out["m_c"], out["m_h"] = np.asarray(c), np.asarray(h)
        terms = mdn.loss_terms(o, bm["z"][:, 1:], bm["z_mask"], bm["done_target"], bm["done_mask"], 10.0, bm["reward"], 1.0)
        out["m_loss"] = np.array([float(x) for x in terms])
        return out

    def close(ours: dict, theirs: dict, prefix: str = "") -> None:
        for k, val in ours.items():
            np.testing.assert_allclose(theirs[prefix + k], val, rtol=1e-5, atol=1e-5, err_msg=k)

    close(tf_outputs(v, m), j)
    np.testing.assert_allclose(j["v_recon"], np.asarray(v(data["x"])), atol=1e-5)
    assert j["v_train"][-1, 0] < j["v_train"][0, 0] and j["m_train"][-1, 0] < j["m_train"][0, 0]  # JAX's steps learn
    v2, m2 = ConvVAE(32), MDNRNN(16, 3, 32, predict_done=True, predict_reward=True)
    v2.load_weights(str(tmp_path / "vae_jax.weights.h5"))
    m2.load_weights(str(tmp_path / "mdnrnn_jax.weights.h5"))
    assert not np.allclose(m2.get_weights()[0], m.get_weights()[0])  # they did train
    close(tf_outputs(v2, m2), j, "after_")
    tf_lr = np.array([float(lr_at(s, 1e-3, 1e-5, 0.99999)) for s in (0, 1, 100, 24400)])
    np.testing.assert_allclose(j["lr"], tf_lr, rtol=1e-6)


@pytest.mark.slow
def test_the_device_script_s_dry_run_writes_both_measurements(tmp_path):
    """bench/device_jax.sh (the lent GPU's script) with DRY=1: small models, JAX on the CPU, both JSON files."""
    import json

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "DRY": "1", "PY": sys.executable, "OUT": str(tmp_path)}
    done = subprocess.run(["bash", str(root / "bench" / "device_jax.sh")], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("jax_gpu.json", "jax_cpu.json"):
        got = json.loads((tmp_path / name).read_text())["jax"]
        assert got["v"]["frames_per_s"] > 0 and got["m"]["epoch_s"] > 0
        assert len(got["v"]["loss"]) == 3 and len(got["m"]["nll"]) == 3  # 1 warm + 2 timed steps each
    assert "cpu" in json.loads((tmp_path / "jax_cpu.json").read_text())["jax"]["device"].lower()


# The tiny pipeline with V and M on JAX, loaded by every later stage on TensorFlow: tests/test_pipeline_car.py runs
# the CarRacing pipeline under KERAS_BACKEND=jax.
