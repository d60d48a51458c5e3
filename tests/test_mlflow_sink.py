"""MLflow as an optional metrics sink, against a local file tracking store."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("mlflow")

from tests.helpers import tiny_cfg, tiny_run_at  # noqa: E402
from wm.core.metrics import make_logger  # noqa: E402
from wm.core.rundir import RunDir  # noqa: E402


def _run(tmp_path, sinks: str) -> RunDir:
    return tiny_run_at(tmp_path / "run", f"metrics.sinks={sinks}", "run.seed=7")


def test_one_mlflow_run_per_run_dir_with_params_metrics_and_media(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    run = _run(tmp_path, "[tensorboard, mlflow]")
    with make_logger(run, "train-vae", console=False) as log:
        log.scalars(1, {"vae/loss": 50.0, "vae/kl": float("nan")})
        log.scalars(2, {"vae/loss": 40.0})
        run.stage_dir("train-vae").mkdir()
        (run.stage_dir("train-vae") / "reconstructions.png").write_bytes(b"\x89PNG fake")
        (run.stage_dir("train-vae") / "vae.weights.h5").write_bytes(b"not media")
    # a later stage with another store in the environment: the run's MLflow run stays in the store that made it
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nosuchscheme://elsewhere")
    with make_logger(run, "evaluate", console=False) as log:
        log.scalars(0, {"eval/mean": 300.0})
        (run.eval_dir("real")).mkdir(parents=True)
        (run.eval_dir("real") / "episode_000.gif").write_bytes(b"GIF89a fake")

    info = json.loads((run.path / "mlflow_run.json").read_text())
    client = MlflowClient(info["tracking_uri"])
    assert info["tracking_uri"].startswith("file:") and (run.path / "mlruns").is_dir()
    got = client.get_run(info["run_id"])
    assert got.data.params["run.seed"] == "7" and got.data.params["vae.z_dim"] == "64"
    assert {"stage.train-vae", "stage.evaluate"} <= set(got.data.tags)  # both stages went to the same MLflow run
    assert [(m.step, m.value) for m in client.get_metric_history(info["run_id"], "vae/loss")] == [(1, 50.0), (2, 40.0)]
    assert client.get_metric_history(info["run_id"], "vae/kl") == []  # NaN kept out (the JSONL has it as a string)
    assert client.get_metric_history(info["run_id"], "eval/mean")[0].value == 300.0
    assert [a.path for a in client.list_artifacts(info["run_id"], "vae")] == ["vae/reconstructions.png"]
    assert [a.path for a in client.list_artifacts(info["run_id"], "eval/real")] == ["eval/real/episode_000.gif"]
    assert (run.tb_dir / "vae").is_dir()  # TensorBoard too


def test_off_by_default_and_a_broken_sink_only_warns(tmp_path, capsys, monkeypatch):
    run = _run(tmp_path / "a", "[tensorboard]")
    with make_logger(run, "train-vae", console=False) as log:
        log.scalars(1, {"vae/loss": 1.0})
    assert not (run.path / "mlruns").exists() and not (run.path / "mlflow_run.json").exists()

    bad = RunDir(tmp_path / "b" / "run")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nosuchscheme://x")  # a server only ever comes from the environment
    bad.bind_config(tiny_cfg("metrics.sinks=[mlflow]"))
    with make_logger(bad, "train-vae") as log:  # the stage goes on; one warning line names the sink
        log.scalars(1, {"vae/loss": 1.0})
    out = capsys.readouterr().out
    assert out.count("MLflow sink off") == 1
    assert json.loads(bad.metrics_path("train-vae").read_text().splitlines()[0])["vae/loss"] == 1.0
    assert not (bad.tb_dir / "vae").exists()  # sinks: [mlflow] only
