"""The logger's TensorBoard pictures and hparams (wm.core.metrics, tensorboardX), read back from the event files
without TensorFlow: TFRecord framing (u64 length, u32 crc, data, u32 crc) and tensorboardX's protos."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from tests.helpers import tb_values, tiny_cfg
from wm.core import config as C
from wm.core.errors import WMError
from wm.core.metrics import make_logger
from wm.core.rundir import RunDir


def hparams_data(folder) -> dict:
    """The hparams plugin's records in `folder`, by tag (`_hparams_/experiment`, …/session_start_info, …)."""
    from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData

    return {
        v.tag: HParamsPluginData.FromString(v.metadata.plugin_data.content)
        for _, v in tb_values(folder)
        if v.metadata.plugin_data.plugin_name == "hparams"
    }


def _run(tmp_path) -> tuple[C.Config, RunDir]:
    cfg = tiny_cfg()
    run = RunDir(tmp_path / "run")
    run.bind_config(cfg, None)
    return cfg, run


def test_image_and_hparams_reach_the_event_files(tmp_path):
    cfg, run = _run(tmp_path)
    grid = np.zeros((10, 20, 3), np.float32)
    grid[:, :10, 0] = 1.0  # left half red, as floats in [0, 1] (V's output)
    with make_logger(run, "train-vae", console=False) as log:
        log.scalars(5, {"vae/loss": 3.0, "vae/kl": 1.0})
        log.scalars(9, {"vae/loss": 2.5, "vae/kl": float("nan")})
        log.image("vae/reconstructions", grid)  # at the last step
    folder = run.tb_dir / "vae"
    images = [(step, v) for step, v in tb_values(folder) if v.HasField("image")]
    assert [(step, v.tag) for step, v in images] == [(9, "vae/reconstructions")]
    png = np.asarray(Image.open(io.BytesIO(images[0][1].image.encoded_image_string)).convert("RGB"))
    assert png.shape == (10, 20, 3)
    assert (png[0, 0] == (255, 0, 0)).all() and (png[0, 15] == 0).all()

    hp = hparams_data(folder / "hparams")  # its own session folder, beside the stage's scalars
    start = hp["_hparams_/session_start_info"].session_start_info.hparams
    assert start["vae.z_dim"].number_value == cfg.vae.z_dim
    assert start["env.name"].string_value == cfg.env.name
    assert not any(isinstance(v, list) for k, v in C.flatten(cfg.to_dict()).items() if k in start)  # scalars only
    metrics = [m.name.tag for m in hp["_hparams_/experiment"].experiment.metric_infos]
    assert metrics == ["vae/loss", "vae/kl"]  # the last finite value of each: kl's NaN at step 9 is not final
    final = {v.tag: (step, v.simple_value) for step, v in tb_values(folder / "hparams") if v.tag.startswith("vae/")}
    assert final == {"vae/loss": (9, 2.5), "vae/kl": (9, 1.0)}


def test_a_stages_own_hparams_are_not_logged_twice(tmp_path):
    _, run = _run(tmp_path)
    with make_logger(run, "train-mdnrnn", console=False) as log:
        log.scalars(3, {"mdnrnn/nll": 1.5})
        log.hparams({"mdnrnn": {"hidden": 8, "sizes": [1, 2]}, "note": None}, {"mdnrnn/nll": 1.25, "bad": float("inf")})
    hp = hparams_data(run.tb_dir / "mdnrnn" / "hparams")
    assert dict(hp["_hparams_/session_start_info"].session_start_info.hparams).keys() == {"mdnrnn.hidden"}
    assert [m.name.tag for m in hp["_hparams_/experiment"].experiment.metric_infos] == ["mdnrnn/nll"]
    starts = [v for _, v in tb_values(run.tb_dir / "mdnrnn" / "hparams") if v.tag == "_hparams_/session_start_info"]
    assert len(starts) == 1


def test_a_failed_stage_logs_no_hparams(tmp_path):
    _, run = _run(tmp_path)
    with pytest.raises(RuntimeError), make_logger(run, "train-vae", console=False) as log:
        log.scalars(1, {"vae/loss": 9.0})
        raise RuntimeError("boom")
    assert (run.tb_dir / "vae").is_dir() and not (run.tb_dir / "vae" / "hparams").exists()


def test_a_misshapen_image_is_one_line_error(tmp_path):
    _, run = _run(tmp_path)
    with make_logger(run, "train-vae", console=False) as log:
        with pytest.raises(WMError, match=r"expected an \(H, W, 3\) picture, got an array of shape \(4, 64, 64, 3\)") as e:
            log.image("vae/reconstructions", np.zeros((4, 64, 64, 3), np.uint8))
        assert "\n" not in str(e.value)


def test_the_logger_imports_no_tensorflow(tmp_path, repo_root):
    _, run = _run(tmp_path)
    code = (
        "import sys, numpy as np\n"
        "from wm.core.metrics import make_logger\n"
        "from wm.core.rundir import RunDir\n"
        "with make_logger(RunDir(sys.argv[1]), 'train-vae', console=False) as log:\n"
        "    log.scalars(1, {'vae/loss': 1.0})\n"
        "    log.image('vae/reconstructions', np.zeros((4, 4, 3), np.uint8))\n"
        "print([m for m in ('tensorflow', 'keras', 'torch') if m in sys.modules])\n"
    )
    res = subprocess.run([sys.executable, "-c", code, str(run.path)], capture_output=True, text=True, cwd=repo_root)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip().splitlines()[-1] == "[]"
    assert hparams_data(run.tb_dir / "vae" / "hparams")  # the hparams were written too, TF-free
