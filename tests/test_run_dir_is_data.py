"""A run directory is data: reading one runs no code, no command reaches outside it, reads are bounded, and no
command loses a run (docs/guide/run-directory.md, "Sharing runs safely"). Each case is an attack or a slip that
used to work."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import tiny_cfg, tiny_run_at
from wm import cli
from wm.core.atomic import atomic_write_json, atomic_write_text
from wm.core.errors import WMError
from wm.core.rundir import RunDir


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every file's bytes and every folder (None) under root, links not followed."""
    out: dict[str, bytes | None] = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(root))] = os.readlink(p).encode()
        else:
            out[str(p.relative_to(root))] = None if p.is_dir() else p.read_bytes()
    return out


def _run(tmp_path: Path, name: str = "r") -> RunDir:
    return tiny_run_at(tmp_path / "runs" / name)


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


# ---------------------------------------------------------------- env ids are data


def test_an_env_id_that_names_a_module_is_refused_and_imports_nothing(tmp_path, capsys, repo_root):
    run = _run(tmp_path)
    marker = tmp_path / "payload-ran"
    (run.path / "payload.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    text = run.config_path.read_text().replace("name: doom_takecover", "name: gym:payload:X-v0")
    run.config_path.write_text(text)
    with pytest.raises(WMError, match="names code to import"):
        run.load_config()
    # the README's own commands, from the run's folder (python -m puts the cwd on sys.path)
    for argv in (["evaluate", "--run", ".", "--random", "--episodes", "1"], ["status", "--run", "."]):
        env = {**os.environ, "PYTHONPATH": str(repo_root)}
        p = subprocess.run([sys.executable, "-m", "wm", *argv], cwd=run.path, capture_output=True, text=True, env=env)
        assert p.returncode == 2 and "names code to import" in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert not marker.exists()
    with pytest.raises(WMError, match="names code to import"):
        tiny_cfg("env.name=gym:payload:X-v0")


def test_a_users_own_env_module_comes_from_the_environment(tmp_path, monkeypatch):
    from wm.envs.gym_env import make_gym

    (tmp_path / "my_envs.py").write_text(
        "import gymnasium as gym\ngym.register(id='MyPixels-v0', entry_point='gymnasium.envs.classic_control:CartPoleEnv')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(WMError, match="cannot make 'MyPixels-v0'"):
        make_gym("MyPixels-v0", {})
    monkeypatch.setenv("WM_GYM_MODULES", "my_envs")
    make_gym("MyPixels-v0", {}).close()
    monkeypatch.setenv("WM_GYM_MODULES", "no_such_module_here")
    with pytest.raises(WMError, match="WM_GYM_MODULES names 'no_such_module_here'"):
        make_gym("MyPixels-v0", {})


def test_a_tracking_server_never_comes_from_a_runs_config(tmp_path, capsys):
    run = _run(tmp_path)
    run.config_path.write_text(run.config_path.read_text().replace("metrics:\n", "metrics:\n  mlflow_uri: http://evil:5000\n"))
    before = _tree(tmp_path)
    assert cli.main(["status", "--run", str(run.path)]) == 2
    assert "$MLFLOW_TRACKING_URI" in _one_error_line(capsys)
    assert _tree(tmp_path) == before
    # an older run's config at the old default still reads
    run.config_path.write_text(run.config_path.read_text().replace("http://evil:5000", "''"))
    assert run.load_config() is not None


def test_a_server_named_only_by_a_runs_mlflow_file_is_never_contacted(tmp_path):
    pytest.importorskip("mlflow")
    from wm.core.metrics import make_logger

    run = tiny_run_at(tmp_path / "r", "metrics.sinks=[mlflow]")
    atomic_write_json(run.path / "mlflow_run.json", {"run_id": "abc", "tracking_uri": "http://127.0.0.1:9/"})
    with make_logger(run, "train-vae", console=False) as log:
        log.scalars(1, {"vae/loss": 1.0})
    info = json.loads((run.path / "mlflow_run.json").read_text())
    assert info["tracking_uri"].startswith("file:") and info["run_id"] != "abc"  # a new MLflow run in the run's store


# ---------------------------------------------------------------- a closed tree


def test_links_that_lead_out_of_a_run_are_refused_before_anything_is_written(tmp_path, capsys):
    run = _run(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.log").write_text("keep me\n")
    (outside / ".tmp-keep").write_text("a temporary of someone else's\n")
    run.stage_dir("collect").mkdir(parents=True, exist_ok=True)
    (run.path / "logs").mkdir(exist_ok=True)
    (run.path / "logs" / "collect.log").symlink_to(outside / "precious.log")
    before = _tree(tmp_path)
    for argv in (
        ["collect", "--run", str(run.path)],
        ["evaluate", "--run", str(run.path), "--random", "--episodes", "1"],
        ["status", "--run", str(run.path)],
    ):
        assert cli.main(argv) == 2, argv
        assert "a link that leads outside it" in _one_error_line(capsys)
        assert _tree(tmp_path) == before
    # a stage folder that is a link (the sweep of temporaries would follow it)
    (run.path / "logs" / "collect.log").unlink()
    run.stage_dir("train-vae").symlink_to(outside, target_is_directory=True)
    from wm.core.bounded import closed_tree

    with pytest.raises(WMError, match="leads outside"):
        closed_tree(run.path)
    assert cli.main(["results", "--runs", str(run.path)]) == 2
    _one_error_line(capsys)
    assert (outside / ".tmp-keep").exists()
    # a link that stays inside the run is harmless
    run.stage_dir("train-vae").unlink()
    (run.path / "alias.yaml").symlink_to("config.yaml")
    closed_tree(run.path)


# ---------------------------------------------------------------- bounded reads


def test_a_yaml_alias_bomb_and_deep_json_are_one_line_in_bounded_time(tmp_path, capsys):
    run = _run(tmp_path)
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    assert len(bomb) < 2500
    run.config_path.write_text(bomb)
    t0 = time.process_time()
    assert cli.main(["status", "--run", str(run.path)]) == 2
    assert "YAML aliases are not allowed" in _one_error_line(capsys)
    assert time.process_time() - t0 < 5  # not a wall-clock bound on the suite: the bomb took minutes before
    from wm.core.bounded import read_json, read_yaml

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(WMError, match="nested more than"):
        read_json(deep)
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (2 << 20))
    with pytest.raises(WMError, match="larger than"):
        read_yaml(big)


def test_malformed_files_give_status_one_line_and_the_tui_a_label(tmp_path, capsys):
    from tui.model import read_snapshot, run_summary

    run = _run(tmp_path)
    run.stage_dir("collect").mkdir(parents=True, exist_ok=True)
    (run.stage_dir("collect") / "DONE").write_text("[" * 100_000)
    (run.path / "agent.json").write_text("{" * 100_000)
    assert cli.main(["status", "--run", str(run.path)]) == 0  # what can be read is shown; the rest is skipped
    assert "Traceback" not in capsys.readouterr().err
    run.config_path.write_text("env: [unclosed\n")
    assert cli.main(["status", "--run", str(run.path)]) == 2
    assert "cannot parse" in _one_error_line(capsys)
    assert run_summary(run.path).startswith("unreadable: cannot parse")
    snap = read_snapshot(run, "collect", None)
    assert "cannot parse" in snap.config_text or "cannot parse" in (snap.error or "")


def test_weights_with_hdf5_external_storage_are_refused(tmp_path):
    import h5py

    from wm.core.bounded import check_h5

    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.arange(16, dtype=np.float32).tobytes())
    bad, good = tmp_path / "bad.weights.h5", tmp_path / "good.weights.h5"
    with h5py.File(bad, "w") as f:
        f.create_dataset("w", shape=(16,), dtype="f4", external=[(str(secret), 0, 64)])
    with h5py.File(good, "w") as f:
        f.create_dataset("w", data=np.zeros(16, np.float32))
    with pytest.raises(WMError, match="uses external storage"):
        check_h5(bad)
    with h5py.File(bad, "a") as f:
        del f["w"]
        f["w"] = h5py.ExternalLink(str(good), "w")
    with pytest.raises(WMError, match="ExternalLink"):
        check_h5(bad)
    check_h5(good)


def test_rounds_json_cannot_point_at_another_directory(tmp_path, capsys):
    from wm.rounds.record import result_pass

    run, other = _run(tmp_path), _run(tmp_path, "other")
    atomic_write_json(run.rounds_path, {"passes": [], "result": {"name": "elsewhere", "path": str(other.path)}})
    with pytest.raises(WMError, match="not a pass of this run"):
        result_pass(run)
    assert cli.main(["export", "--run", str(run.path), "--out", str(tmp_path / "agent")]) == 2
    _one_error_line(capsys)
    assert not (tmp_path / "agent").exists()


# ---------------------------------------------------------------- no command loses a run


def test_export_never_writes_over_or_above_its_run(tmp_path, capsys):
    run = _run(tmp_path, "r1")
    _run(tmp_path, "r2")
    before = _tree(tmp_path)
    for out in (run.path, run.path.parent, tmp_path, run.path / "agent"):
        assert cli.main(["export", "--run", str(run.path), "--out", str(out), "--force"]) == 2, out
        assert "choose a folder outside it" in _one_error_line(capsys)
        assert _tree(tmp_path) == before


def test_a_refused_force_keeps_the_stage_done(tmp_path, capsys):
    run = _run(tmp_path)
    atomic_write_text(run.stage_dir("evaluate") / "summary.json", "{}\n")
    run.mark_done("evaluate", {"eval/mean": 1.0})
    before = _tree(tmp_path)
    assert cli.main(["evaluate", "--run", str(run.path), "--episodes", "-3", "--force"]) == 2
    assert "--episodes must be >= 1" in _one_error_line(capsys)
    assert _tree(tmp_path) == before and run.state("evaluate") == "done"
    # refused by the stage itself, after the CLI cleared DONE for the redo: DONE comes back
    assert cli.main(["evaluate", "--run", str(run.path), "--params", str(tmp_path / "nosuch.npz"), "--force"]) == 2
    _one_error_line(capsys)
    assert _tree(tmp_path) == before and run.state("evaluate") == "done"


@pytest.mark.parametrize("verb", ["collect", "pipeline"])
def test_a_typo_in_run_on_collect_or_pipeline_starts_nothing(tmp_path, capsys, verb):
    run = _run(tmp_path, "doom1")
    before = _tree(tmp_path)
    assert cli.main([verb, "--run", str(run.path.parent / "doomm1")]) == 2
    assert f"did you mean {str(run.path)!r}" in _one_error_line(capsys)
    assert _tree(tmp_path) == before


def test_a_side_run_does_not_rewrite_the_config_of_a_running_stage(tmp_path, capsys):
    run = _run(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        run.stage_dir("collect").mkdir(parents=True, exist_ok=True)
        lock = {"pid": holder.pid, "host": __import__("socket").gethostname(), "started": time.time()}
        (run.stage_dir("collect") / "LOCK").write_text(json.dumps(lock))
        before = _tree(tmp_path)
        argv = ["evaluate", "--run", str(run.path), "--random", "--episodes", "1", "--set", "evaluate.gif_episodes=0"]
        assert cli.main(argv) == 2
        assert "while collect runs" in _one_error_line(capsys)
        assert _tree(tmp_path) == before
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_runs_own_lock_is_reclaimed_silently(tmp_path, capsys):
    run = _run(tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    run.stage_dir("collect").mkdir(parents=True, exist_ok=True)
    lock = {"pid": dead.pid, "host": __import__("socket").gethostname(), "started": time.time()}
    (run.stage_dir("collect") / "LOCK").write_text(json.dumps(lock))
    with run.lock("collect"):
        assert run.lock_owner("collect") == os.getpid()
    assert "took over" not in capsys.readouterr().err


@pytest.mark.parametrize("episodes", ["0", "-3"])
def test_episodes_below_one_are_refused_before_anything_else(tmp_path, capsys, episodes):
    run = _run(tmp_path)
    run.mark_done("evaluate", {})
    before = _tree(tmp_path)
    assert cli.main(["evaluate", "--run", str(run.path), "--episodes", episodes]) == 2  # not "already done"
    assert f"--episodes must be >= 1, got {episodes}" in _one_error_line(capsys)
    assert _tree(tmp_path) == before


def test_play_serve_answers_a_malformed_request_and_serves_on():
    from wm.tools.play import serve

    class Session:
        env_name, real, temperature = "doom_takecover", False, 1.0

        def reset(self, seed=None):
            return self

        def step(self, keys):
            return self

        def to_json(self):
            return {"frame": "ok"}

    lines = ['{"op": "reset", "seed": "x"}', "[1, 2]", '{"op": "step", "keys": 5}', "[[[", '{"op": "step"}', '{"op": "quit"}']
    out = io.StringIO()
    assert serve(Session(), io.StringIO("\n".join(lines) + "\n"), out) == 0
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert replies[0]["ready"] and [("error" in r) for r in replies[1:]] == [True, True, True, True, False]


def test_an_env_that_cannot_be_built_in_evaluates_workers_is_one_line(tmp_path, capfd):
    run = RunDir(tmp_path / "r")
    argv = ["evaluate", "--configs", "doom_takecover", "tiny", "--run", str(run.path), "--random", "--episodes", "2"]
    sets = ["--set", "env.name=gym:NoSuchEnv-v0", "env.actions=discrete:2", "evaluate.workers=2"]
    assert cli.main(argv + sets) == 2
    err = capfd.readouterr().err
    assert "error: gymnasium cannot make 'NoSuchEnv-v0'" in err and "Traceback" not in err, err


def test_a_killed_runs_torn_lock_temporaries_are_removed_a_live_ones_kept(tmp_path):
    import socket

    run = _run(tmp_path)
    folder = run.stage_dir("collect")
    folder.mkdir(parents=True, exist_ok=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for name, pid in (("dead", dead.pid), ("live", live.pid)):
            rec = {"pid": pid, "host": socket.gethostname(), "started": time.time()}
            (folder / f".tmp-LOCK-{name}").write_text(json.dumps(rec))
        assert [p.name for p in run.remove_temporaries("collect")] == [".tmp-LOCK-dead"]  # fresh, but its writer died
        assert (folder / ".tmp-LOCK-live").exists()  # another command's attempt at the LOCK
        (folder / ".tmp-LOCK-dead").write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))
        with run.lock("collect"):
            pass
        assert sorted(p.name for p in folder.iterdir()) == [".tmp-LOCK-live"]  # swept when the stage ends
    finally:
        live.kill()
        live.wait()
