"""encode (docs/paper-settings.md §3): series shapes and dtypes, initial_z, per-episode resume, refusals."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from vae_data import make_run  # noqa: E402

from tests.helpers import stage_run
from wm.core.config import update  # noqa: E402
from wm.core.errors import WMError  # noqa: E402
from wm.data.episodes import episode_name, list_episodes, read_episode  # noqa: E402


def _with_vae(tmp_path, episodes=3, **kw):
    from wm.models.training import save_weights
    from wm.models.vae import ConvVAE

    cfg, run = make_run(tmp_path, episodes=episodes, **kw)
    cfg = update(cfg, {"encode": {"batch_size": 16, "initial_z": 2}})
    model = ConvVAE(32)
    save_weights(model, run.stage_dir("train-vae") / "vae.weights.h5")
    run.mark_done("train-vae", {"z_dim": 32})
    return cfg, run, model


def _encode(cfg, run):

    stage_run("encode", cfg, run)


def test_encode_shapes_dtypes_initial_z_and_bad_file(tmp_path):
    cfg, run, model = _with_vae(tmp_path, episodes=3, t=37)
    cfg = update(cfg, {"data": {"max_bad_share": 0.5}})  # 1 bad file of 4 is more than the default share
    (run.stage_dir("collect") / episode_name(3)).write_bytes(b"PK\x03\x04 truncated")  # a bad shard
    _encode(cfg, run)
    series = run.stage_dir("encode")
    assert [p.name for p in list_episodes(series)] == [episode_name(i) for i in range(3)]
    for i in range(3):
        src = read_episode(run.stage_dir("collect") / episode_name(i))
        s = np.load(series / episode_name(i))
        assert s["mu"].dtype == np.float16 and s["logvar"].dtype == np.float16
        assert s["mu"].shape == s["logvar"].shape == (37, 32)
        for k in ("action", "reward", "done"):
            np.testing.assert_array_equal(s[k], src[k])
        mu, lv = (t.numpy() for t in model.encode(src["obs"]))
        np.testing.assert_allclose(s["mu"].astype(np.float32), mu, rtol=2e-3, atol=2e-3)
        np.testing.assert_allclose(s["logvar"].astype(np.float32), lv, rtol=2e-3, atol=2e-3)
    init = np.load(series / "initial_z.npz")
    assert init["mu"].shape == init["logvar"].shape == (2, 32) and init["mu"].dtype == np.float32
    frame0 = np.stack([read_episode(run.stage_dir("collect") / episode_name(i))["obs"][0] for i in range(2)])
    mu0, lv0 = (t.numpy() for t in model.encode(frame0))
    np.testing.assert_allclose(init["mu"], mu0, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(init["logvar"], lv0, rtol=1e-5, atol=1e-5)
    import json

    info = json.loads((series / "DONE").read_text())
    assert info["episodes"] == 3 and info["bad_files"] == 1 and info["initial_z"] == 2
    assert "bad episode file" in run.log_path("encode").read_text()


def test_encode_resumes_per_episode(tmp_path):
    cfg, run, _ = _with_vae(tmp_path, episodes=4, t=20)
    _encode(cfg, run)
    series = run.stage_dir("encode")
    init_before = np.load(series / "initial_z.npz")["mu"]
    kept = series / episode_name(3)
    os.utime(kept, (1, 1))
    (series / episode_name(1)).unlink()
    (series / episode_name(2)).write_bytes(b"garbage")
    run.clear_done("encode")
    _encode(cfg, run)
    assert kept.stat().st_mtime == 1  # valid output left alone
    for i in (1, 2):
        assert read_episode(series / episode_name(i), ("mu",))["mu"].shape == (20, 32)
    np.testing.assert_allclose(
        np.load(series / "initial_z.npz")["mu"], init_before, rtol=1e-4, atol=1e-6
    )  # batch-size round-off
    assert run.is_done("encode")


def test_encode_refuses_missing_or_mismatched_vae(tmp_path):
    cfg, run = make_run(tmp_path / "a", episodes=1, t=10)
    with pytest.raises(WMError, match="train-vae"):
        _encode(cfg, run)
    cfg, run, _ = _with_vae(tmp_path / "b", episodes=1, t=10)
    with pytest.raises(WMError, match="z_dim=32 but vae.z_dim is 64"):
        _encode(update(cfg, {"vae": {"z_dim": 64}}), run)
    run.mark_done("train-vae", {})  # no z size recorded: the weights file itself is checked
    with pytest.raises(WMError, match=r"vae\.weights\.h5 do not fit ConvVAE\(z_dim=64\)"):
        _encode(update(cfg, {"vae": {"z_dim": 64}}), run)
    assert not list_episodes(run.stage_dir("encode"))
