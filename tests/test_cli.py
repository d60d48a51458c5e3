"""CLI: fast --help without TensorFlow, status on a fixture run dir, one-line errors."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

from tests.helpers import tiny_run_at
from wm.cli import main
from wm.core.metrics import make_logger
from wm.core.rundir import RunDir


def _wm(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "wm", *args], capture_output=True, text=True, cwd=cwd)


def test_help_lists_verbs_without_importing_heavy_modules(repo_root):
    code = (
        "import sys, contextlib, io\n"
        "from wm.cli import main, available_verbs\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try: main(['--help'])\n"
        "    except SystemExit: pass\n"
        "    for v in available_verbs():\n"
        "        try: main([v.verb, '--help'])\n"
        "        except SystemExit: pass\n"
        "heavy = [m for m in ('tensorflow', 'keras', 'tensorflow_probability', 'gymnasium', 'vizdoom', 'cma', 'mpi4py',"
        " 'matplotlib')"
        " if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo_root)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
    res = _wm("--help", cwd=repo_root)
    assert res.returncode == 0 and "status" in res.stdout


def _fixture_run(tmp_path) -> RunDir:
    run = tiny_run_at(tmp_path / "run")
    run.stage_dir("collect").mkdir()
    for i in range(3):
        (run.stage_dir("collect") / f"ep_{i:06d}.npz").write_bytes(b"x")
    run.mark_done("collect")
    with make_logger(run, "train-vae", console=False) as log:
        log.scalars(10, {"vae/loss": 50.5, "vae/epoch": 0})
        log.scalars(20, {"vae/loss": 42.25, "vae/epoch": 1})
    return run


def test_status_on_fixture(tmp_path, repo_root):
    run = _fixture_run(tmp_path)
    res = _wm("status", "--run", str(run.path), cwd=repo_root)
    assert res.returncode == 0, res.stderr
    lines = {line.split()[0]: line for line in res.stdout.splitlines()[1:]}
    assert "done" in lines["collect"] and "episodes 3" in lines["collect"]
    assert "resumable" in lines["train-vae"] and "loss 42.25" in lines["train-vae"] and "epoch 1" in lines["train-vae"]
    assert "not started" in lines["evaluate"]


def test_missing_run_is_one_line_error(tmp_path, repo_root, capsys):
    res = _wm("status", "--run", str(tmp_path / "nope"), cwd=repo_root)
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "does not exist" in res.stderr
    run = _fixture_run(tmp_path)  # a typo of a run beside it: the line names it
    for verb in ("status", "report"):
        assert main([verb, "--run", str(tmp_path / "runn")]) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"error: run directory {tmp_path / 'runn'} does not exist; did you mean {str(run.path)!r}?"


def test_metrics_jsonl_and_tensorboard(tmp_path):
    run = RunDir(tmp_path)
    with make_logger(run, "train-mdnrnn", console=False) as log:
        log.scalars(1, {"mdnrnn/nll": 1.5})
        log.scalars(2, {"mdnrnn/nll": float("nan")})
    recs = [json.loads(x) for x in run.metrics_path("train-mdnrnn").read_text().splitlines()]
    assert [r["step"] for r in recs] == [1, 2] and recs[0]["mdnrnn/nll"] == 1.5 and recs[1]["mdnrnn/nll"] == "nan"
    assert "mdnrnn" in run.log_path("train-mdnrnn").name
    events = list((run.tb_dir / "mdnrnn").glob("events.out.tfevents.*"))
    assert len(events) == 1
    # Read back without TF: TFRecord framing (u64 length, u32 crc, data, u32 crc) + tensorboardX's Event proto.
    from tensorboardX.proto import event_pb2

    data, pos, scalars = events[0].read_bytes(), 0, []
    while pos < len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        e = event_pb2.Event.FromString(data[pos + 12 : pos + 12 + n])
        scalars += [(e.step, v.tag, v.simple_value) for v in e.summary.value]
        pos += 12 + n + 4
    assert scalars == [(1, "mdnrnn/nll", 1.5)]  # the NaN goes to the JSONL only


def test_tensorboard_events_readable_by_tensorflow(tmp_path):
    # Independent check of the event files the logger writes (tensorboardX): TF's own TFRecord reader and
    # Event proto parser.
    run = RunDir(tmp_path)
    with make_logger(run, "train-vae", console=False) as log:
        log.scalars(7, {"vae/loss": 3.5})
    code = (
        "import sys, tensorflow as tf\n"
        "from tensorflow.core.util import event_pb2\n"
        "out = []\n"
        "for rec in tf.data.TFRecordDataset(sys.argv[1]):\n"
        "    e = event_pb2.Event.FromString(rec.numpy())\n"
        "    out += [(e.step, v.tag, v.simple_value) for v in e.summary.value]\n"
        "print(out)\n"
    )
    path = next((run.tb_dir / "vae").glob("events.out.tfevents.*"))
    res = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip().splitlines()[-1] == "[(7, 'vae/loss', 3.5)]"
