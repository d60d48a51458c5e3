""" "nothing silently wrong": bad data files are named, counted and refused past a share; a refused command
changes nothing on disk; a failed write (full disk) is one line and a rerun resumes; a rerun removes its stage's
temporaries; a learning rate changed on resume is applied and said."""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import socket
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from vae_data import make_run

from tests.helpers import stage_run, train_vae
from wm import cli
from wm.core import config as C
from wm.core import registry
from wm.core.atomic import atomic_write_bytes
from wm.core.bounded import read_jsonl
from wm.core.errors import WMError
from wm.core.rundir import RunDir
from wm.data.episodes import episode_name, list_episodes, read_episode, write_episode

VAE_SETS = [
    "vae.batch_size=20",
    "vae.epochs=1",
    "vae.shuffle_buffer=100",
    "vae.checkpoint_every=2",
    "vae.val_fraction=0.2",
    "vae.val_max_frames=0",
]


def _rewrite(path: Path, **changes) -> None:
    d = read_episode(path)
    d.update(changes)
    write_episode(path, **d)


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _files(root: Path) -> dict[str, bytes]:
    """Every file and folder under root (folders map to b"<dir>"), to compare a tree before and after a command."""
    return {str(p.relative_to(root)): (b"<dir>" if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))}


# ---------------------------------------------------------------- 1, 2: one validation path, named and counted


@pytest.mark.parametrize(
    "defect, expect",
    [
        ("obs_shape", r"ep_000000\.npz: obs must be uint8 \(T, 64, 64, 3\), got uint8 \(8, 32, 32, 3\)"),
        ("obs_dtype", r"obs must be uint8 \(T, 64, 64, 3\), got float32 \(8, 64, 64, 3\)"),
        ("length", r"arrays disagree on length \{'obs': 8, 'action': 7, 'reward': 8, 'done': 8\}"),
        ("missing", r"missing arrays \['reward'\]"),
        ("action", r"action must be float \(T, 1\), got float32 \(8, 3\)"),
        ("empty", r"holds no steps"),
        ("truncated", r"unreadable episode file \(BadZipFile"),
    ],
)
def test_check_file_names_what_is_wrong(tmp_path, defect, expect):
    from wm.data.episodes import check_file

    t = 0 if defect == "empty" else 8
    ep = {
        "obs": np.zeros((t, 64, 64, 3), np.uint8),
        "action": np.zeros((t, 1), np.float32),
        "reward": np.zeros(t, np.float32),
        "done": np.zeros(t, bool),
        "seed": np.int64(0),
    }
    if defect == "obs_shape":
        ep["obs"] = np.zeros((t, 32, 32, 3), np.uint8)
    elif defect == "obs_dtype":
        ep["obs"] = ep["obs"].astype(np.float32)
    elif defect == "length":
        ep["action"] = ep["action"][:-1]
    elif defect == "missing":
        del ep["reward"]
    elif defect == "action":
        ep["action"] = np.zeros((t, 3), np.float32)
    path = tmp_path / episode_name(0)
    write_episode(path, **ep)
    if defect == "truncated":
        _truncate(path)
    with pytest.raises(WMError, match=expect):
        check_file(path, frame_size=64, action_dim=1)


def test_check_file_series_against_z_dim(tmp_path):
    from wm.data.episodes import check_file

    path = tmp_path / episode_name(0)
    write_episode(
        path,
        mu=np.zeros((5, 8), np.float16),
        logvar=np.zeros((5, 8), np.float16),
        action=np.zeros((5, 1), np.float32),
        reward=np.zeros(5, np.float32),
        done=np.zeros(5, bool),
    )
    assert check_file(path, "series", z_dim=8, action_dim=1) == 5
    with pytest.raises(WMError, match=r"mu must be float \(T, 4\), got float16 \(5, 8\)"):
        check_file(path, "series", z_dim=4)
    write_episode(
        path,
        mu=np.zeros((5, 8), np.float16),
        logvar=np.zeros((5, 7), np.float16),
        action=np.zeros((5, 1), np.float32),
        reward=np.zeros(5, np.float32),
        done=np.zeros(5, bool),
    )
    with pytest.raises(WMError, match=r"logvar must be float \(5, 8\) like mu, got float16 \(5, 7\)"):
        check_file(path, "series", z_dim=8)


def test_data_check_names_a_misshapen_file_without_full(tmp_path, capsys):
    from wm.tools import data_check

    _, run = make_run(tmp_path, episodes=3, t=10)
    _rewrite(run.stage_dir("collect") / episode_name(1), obs=np.zeros((10, 32, 32, 3), np.uint8))
    code = data_check.main(argparse.Namespace(run=str(run.path), full=False, json=False))
    out = capsys.readouterr().out
    assert code == 1 and "2 episodes" in out
    assert "ep_000001.npz: obs must be uint8 (T, 64, 64, 3), got uint8 (10, 32, 32, 3)" in out


def test_series_reader_skips_counts_and_refuses(tmp_path):
    from wm.data.sequences import load_series

    def series(i, z=4, n=6):
        write_episode(
            tmp_path / episode_name(i),
            mu=np.zeros((n, z), np.float16),
            logvar=np.zeros((n, z), np.float16),
            action=np.zeros((n, 1), np.float32),
            reward=np.zeros(n, np.float32),
            done=np.zeros(n, bool),
        )

    for i in range(10):
        series(i)
    series(3, z=5)  # another z size
    s = load_series(tmp_path, 4, 1, max_bad_share=0.1)
    assert s.n_episodes == 9 and s.bad_files == 1
    _truncate(tmp_path / episode_name(5))
    with pytest.raises(WMError, match=r"2 of 10 series files in .* are bad, more than data\.max_bad_share=0\.1"):
        load_series(tmp_path, 4, 1, max_bad_share=0.1)


def test_train_vae_skips_and_counts_a_misshapen_file(tmp_path):
    pytest.importorskip("tensorflow")
    cfg, run = make_run(tmp_path, episodes=10, t=20, sets=VAE_SETS)
    _rewrite(run.stage_dir("collect") / episode_name(3), obs=np.zeros((20, 32, 32, 3), np.uint8))
    info = train_vae(cfg, run)  # before the fix: a 31-line InvalidArgumentError from inside tf.data
    assert info["bad_files"] == 1 and info["train_episodes"] + info["val_episodes"] == 9
    recs = [r for r in read_jsonl(run.metrics_path("train-vae")) if "vae/bad_files" in r]
    assert recs and recs[-1]["vae/bad_files"] == 1
    assert (
        "ep_000003.npz: obs must be uint8 (T, 64, 64, 3), got uint8 (20, 32, 32, 3)" in run.log_path("train-vae").read_text()
    )


def test_train_vae_counts_damage_found_inside_the_frames(tmp_path):
    """A file whose headers are fine but whose frames do not decompress is found by the stream, named and counted."""
    pytest.importorskip("tensorflow")
    from wm.data.episodes import check_file

    cfg, run = make_run(tmp_path, episodes=10, t=20, sets=VAE_SETS)
    path = run.stage_dir("collect") / episode_name(2)
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 64] = bytes(64)  # inside obs's deflate stream: the zip index and the .npy headers are intact
    path.write_bytes(bytes(data))
    check_file(path, frame_size=64, action_dim=1)  # the cheap check cannot see it
    info = train_vae(cfg, run)
    assert info["bad_files"] == 1
    assert "ep_000002.npz" in run.log_path("train-vae").read_text()


def test_train_vae_refuses_when_too_many_files_are_bad(tmp_path):
    cfg, run = make_run(tmp_path, episodes=5, t=20, sets=VAE_SETS)
    folder = run.stage_dir("collect")
    _truncate(folder / episode_name(1))
    _rewrite(folder / episode_name(3), action=np.zeros((19, 1), np.float32))
    with pytest.raises(WMError, match=r"2 of 5 episode files in .* are bad, more than data\.max_bad_share=0\.1 "):
        train_vae(cfg, run)
    assert not list(run.stage_dir("train-vae").glob("*"))


def _with_vae(tmp_path, episodes, t):
    from wm.models.training import save_weights
    from wm.models.vae import ConvVAE

    cfg, run = make_run(tmp_path, episodes=episodes, t=t)
    cfg = C.update(cfg, {"encode": {"batch_size": 16, "initial_z": 2}})
    save_weights(ConvVAE(32), run.stage_dir("train-vae") / "vae.weights.h5")
    run.mark_done("train-vae", {"z_dim": 32})
    return cfg, run


def test_encode_validates_before_writing_and_counts(tmp_path):
    pytest.importorskip("tensorflow")

    cfg, run = _with_vae(tmp_path / "a", episodes=10, t=12)
    _rewrite(run.stage_dir("collect") / episode_name(4), obs=np.zeros((12, 32, 32, 3), np.uint8))
    stage_run("encode", cfg, run)  # before the fix: a TF traceback after writing series 0..3
    series = run.stage_dir("encode")
    assert [p.name for p in list_episodes(series)] == [episode_name(i) for i in range(10) if i != 4]
    info = json.loads((series / "DONE").read_text())
    assert info["bad_files"] == 1 and info["episodes"] == 9
    assert [r["encode/bad_files"] for r in read_jsonl(run.metrics_path("encode")) if "encode/bad_files" in r][-1] == 1

    cfg, run = _with_vae(tmp_path / "b", episodes=4, t=12)
    _rewrite(run.stage_dir("collect") / episode_name(2), obs=np.zeros((12, 32, 32, 3), np.uint8))
    with pytest.raises(WMError, match=r"1 of 4 episode files .* are bad, more than data\.max_bad_share=0\.1"):
        stage_run("encode", cfg, run)
    assert not list(run.stage_dir("encode").glob("*"))


# ---------------------------------------------------------------- 3: lock first; a refused command changes nothing


def test_refused_command_changes_nothing_on_disk(tmp_path, tiny_run, capsys):
    run = tiny_run
    run.stage_dir("collect").mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (run.stage_dir("collect") / "LOCK").write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname()}))
        before = _files(tmp_path)
        # before the fix: refused ("already running"), but config.yaml already said episodes: 2
        assert cli.main(["collect", "--run", str(run.path), "--set", "collect.episodes=2"]) == 2
        assert "stage collect is already running" in capsys.readouterr().err
        assert _files(tmp_path) == before
    finally:
        holder.kill()
        holder.wait()
    (run.stage_dir("collect") / "LOCK").unlink()
    run.stage_dir("collect").rmdir()
    # a refused config creates no stage folder (the LOCK's) and no run folder
    before = _files(tmp_path)
    assert cli.main(["collect", "--run", str(run.path), "--set", "run.seed=5"]) == 2
    assert "config differs" in capsys.readouterr().err
    assert _files(tmp_path) == before
    assert cli.main(["collect", "--run", str(tmp_path / "new"), "--set", "collect.episodez=2"]) == 2
    assert _files(tmp_path) == before
    # a finished stage is not rerun, so its changed settings are not written either (config.yaml = what ran)
    run.mark_done("collect", {})
    before = _files(tmp_path)
    assert cli.main(["collect", "--run", str(run.path), "--set", "collect.episodes=2"]) == 0
    assert "already done" in capsys.readouterr().out and _files(tmp_path) == before


# ---------------------------------------------------------------- 4: a failed write is one line; a rerun resumes


def test_failed_write_names_the_file_and_keeps_the_old_one(tmp_path, monkeypatch):
    from wm.core.errors import WriteError

    target = tmp_path / "checkpoint.npz"
    atomic_write_bytes(target, b"old")

    def full(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_bytes", full)
    with pytest.raises(
        WriteError,
        match=r"^cannot write .*checkpoint\.npz: \[Errno 28\] No space left on device; "
        r"nothing was lost: free some space, then rerun the same command to resume$",
    ):
        atomic_write_bytes(target, b"new")
    monkeypatch.undo()
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["checkpoint.npz"]


def test_full_disk_in_train_vae_is_one_line_and_the_rerun_completes(tmp_path, monkeypatch, capsys):
    pytest.importorskip("tensorflow")
    _, run = make_run(tmp_path, episodes=10, t=20, sets=VAE_SETS)
    real = Path.write_bytes

    def full_for_checkpoints(self, data):
        if "checkpoint" in self.name:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", full_for_checkpoints)
    assert cli.main(["train-vae", "--run", str(run.path)]) == 1  # a failed run; before the fix: a 28-line OSError traceback
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot write ") and "checkpoint.npz: [Errno 28]" in err[0], err
    assert not list(run.stage_dir("train-vae").glob(".tmp-*")) and not run.is_done("train-vae")
    monkeypatch.undo()
    assert cli.main(["train-vae", "--run", str(run.path)]) == 0
    assert run.is_done("train-vae")


def test_an_os_error_outside_the_atomic_writes_is_one_line(tmp_path, monkeypatch, capsys):
    _, run = make_run(tmp_path, episodes=1, t=5, done=False)

    def readonly(self, *a, **k):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    monkeypatch.setattr(Path, "mkdir", readonly)
    assert cli.main(["collect", "--run", str(run.path), "--set", "collect.episodes=2"]) == 1  # a failed run, not usage
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "[Errno 30] Read-only file system" in err[0] and "rerun the same command" in err[0], err


def test_full_disk_for_logs_and_metrics_is_one_line_without_logging_tracebacks(tmp_path, monkeypatch, capsys):
    import logging

    pytest.importorskip("tensorflow")
    from wm.core.metrics import Logger

    _, run = make_run(tmp_path, episodes=10, t=20, sets=VAE_SETS)
    real_flush = logging.StreamHandler.flush

    def flush(self):
        if isinstance(self, logging.FileHandler):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # what the log file's flush raises on a full disk
        real_flush(self)

    def scalars(self, *a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # … and the metrics line's flush (no file name)

    monkeypatch.setattr(logging, "raiseExceptions", True)  # restored after the test
    monkeypatch.setattr(logging.StreamHandler, "flush", flush)
    monkeypatch.setattr(Logger, "scalars", scalars)
    assert cli.main(["train-vae", "--run", str(run.path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: cannot write a file in {run.path}: [Errno 28] No space left on device; nothing was lost: "
        "free some space, then rerun the same command to resume"
    ], err


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    try:
        return (
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True).returncode
            == 0
        )
    except OSError:
        return False


@pytest.mark.slow  # two train-vae subprocesses (~30 s); needs root for a real, small tmpfs, else skipped
def test_real_full_disk_in_train_vae_then_rerun_with_space(tmp_path):
    pytest.importorskip("tensorflow")
    disk = tmp_path / "disk"
    if os.geteuid() != 0 or not _mount_tmpfs(disk, "30m"):  # episodes fit; V's 52 MB checkpoint does not
        pytest.skip("no tmpfs (needs root)")
    try:
        _, run = make_run(disk, episodes=10, t=20, sets=VAE_SETS)
        cmd = [sys.executable, "-m", "wm", "train-vae", "--run", str(run.path)]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parents[1])
        err = [line for line in p.stderr.splitlines() if line.startswith(("error", "Traceback", "---"))]
        assert p.returncode == 1 and err == [line for line in err if line.startswith("error: cannot write ")], p.stderr
        assert len(err) == 1 and "vae/checkpoint.npz: [Errno 28] No space left on device" in err[0], p.stderr
        assert not list(disk.rglob(".tmp-*"))
        subprocess.run(["mount", "-o", "remount,size=300m", str(disk)], check=True)
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parents[1])
        assert p.returncode == 0 and run.is_done("train-vae"), p.stderr[-2000:]
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


@pytest.mark.env  # a few seconds of ViZDoom; needs root for a real, small tmpfs, else skipped
def test_real_full_disk_in_collect_is_one_line_then_rerun_with_space(tmp_path):
    disk = tmp_path / "disk"
    if os.geteuid() != 0 or not _mount_tmpfs(disk, "1200k"):  # a tiny episode of 100 steps is ≈ 380 kB: 2–3 fit
        pytest.skip("no tmpfs (needs root)")
    try:
        run = disk / "r"
        cmd = [sys.executable, "-m", "wm", "collect", "--run", str(run), "--configs", "doom_takecover", "tiny"]
        cmd += ["--set", "collect.episodes=6", "collect.workers=2", "env.max_steps=100"]
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
        # every worker's write fails in turn; the stage says so once (before: a worker's line, then the master's)
        assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert re.match(r"error: (collect: )?cannot write .*ep_\d{6}\.npz: \[Errno 28\] No space left", p.stderr)
        assert not list(disk.rglob(".tmp-*"))
        subprocess.run(["mount", "-o", "remount,size=10m", str(disk)], check=True)
        cmd = cmd[: cmd.index("--configs")]  # the rerun reads the stored config
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
        assert p.returncode == 0 and RunDir(run).is_done("collect"), p.stderr[-2000:]
        assert len(list_episodes(run / "episodes")) == 6
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


def _write_into(path: str) -> None:
    atomic_write_bytes(path, b"episode")


def test_a_failed_write_in_a_worker_process_comes_back_as_one_error(tmp_path):
    from wm.core.errors import WriteError
    from wm.core.procpool import spawn_map

    target = tmp_path / "ep_000001.npz"
    (target / "in-the-way").mkdir(parents=True)  # the rename onto it fails in the worker
    with pytest.raises(WriteError, match=r"cannot write .*ep_000001\.npz: \[Errno (21|39)\]"):
        list(spawn_map(_write_into, [str(target)], 1, "test"))


@pytest.mark.env
def test_collect_write_failure_is_one_line_and_the_rerun_completes(tmp_path, capsys):
    run = tmp_path / "r"
    args = [
        "collect",
        "--configs",
        "doom_takecover",
        "tiny",
        "--run",
        str(run),
        "--set",
        "collect.episodes=3",
        "collect.workers=1",
        "env.max_steps=60",
    ]
    (run / "episodes" / episode_name(1) / "in-the-way").mkdir(parents=True)
    assert cli.main(args) == 1  # a failed run; before the fix: a 49-line traceback from the worker process
    err = capsys.readouterr().err.strip().splitlines()
    # the worker's own error, not only the missing file the master finds afterwards (the writer's error was lost when
    # the next episode's put() ran before the failed write had ended, e.g. under load)
    assert len(err) == 1 and re.search(r"cannot write .*ep_000001\.npz: \[Errno (21|39)\]", err[0]), err
    assert "rerun the same command" in err[0], err
    (run / "episodes" / episode_name(1) / "in-the-way").rmdir()
    (run / "episodes" / episode_name(1)).rmdir()
    assert cli.main(args) == 0 and RunDir(run).is_done("collect")


def _episode(n: int = 3) -> dict[str, np.ndarray]:
    return {"obs": np.zeros((n, 64, 64, 3), np.uint8), "done": np.zeros(n, bool)}


def test_a_writers_failed_last_write_is_raised_at_close(tmp_path, capsys):
    from wm.stages.collect import _Writer

    w = _Writer()
    (tmp_path / "ep_000000.npz" / "in-the-way").mkdir(parents=True)
    w.put(tmp_path / "ep_000000.npz", _episode())
    with pytest.raises(WMError, match=r"cannot write .*ep_000000\.npz"):
        w.put(tmp_path / "ep_000001.npz", _episode())  # raises the previous write's error; this one is not queued
    (tmp_path / "ep_000002.npz" / "in-the-way").mkdir(parents=True)
    w.put(tmp_path / "ep_000002.npz", _episode())  # the last: no later put() raises its error
    with pytest.raises(WMError, match=r"cannot write .*ep_000002\.npz: \[Errno (21|39)\]"):
        w.close()  # the worker pool hands it to the stage (spawn_map's strict_close)
    assert capsys.readouterr().err == ""  # raised, not printed: the stage's one line is the only one
    assert not (tmp_path / "ep_000001.npz").exists()


@pytest.mark.env
def test_collect_failure_of_a_workers_last_write_names_its_cause(tmp_path, capfd):
    run = tmp_path / "r"
    args = ["collect", "--configs", "doom_takecover", "tiny", "--run", str(run), "--set", "collect.episodes=3"]
    args += ["collect.workers=1", "env.max_steps=60"]
    (run / "episodes" / episode_name(2) / "in-the-way").mkdir(parents=True)  # the worker's last episode
    assert cli.main(args) == 1  # a failed run
    err = capfd.readouterr().err.strip().splitlines()  # a worker process's own line would reach the same stderr
    # one line, the worker's cause, from the stage (before: the worker's line, then the master's "files missing")
    assert len(err) == 1, err
    assert re.search(r"^error: collect: cannot write .*ep_000002\.npz: \[Errno (21|39)\].*rerun the same command", err[0])
    eps = run / "episodes"
    assert [(eps / episode_name(k)).is_file() for k in range(3)] == [True, True, False]
    assert not RunDir(run).is_done("collect")


# ---------------------------------------------------------------- 5: a rerun removes its stage's temporaries


def test_stage_start_removes_its_own_temporaries(tmp_path):
    from wm.stages import train_mdnrnn

    run = RunDir(tmp_path / "r")
    run.bind_config(C.load([]), None)
    mine = run.stage_dir("train-mdnrnn")
    mine.mkdir()
    (mine / ".tmp-dream_preview-k2j3.gif").write_bytes(b"half")
    (mine / ".tmp-checkpoint-x9.npz").write_bytes(b"half")
    other = run.stage_dir("train-vae")
    other.mkdir()
    (other / ".tmp-vae.weights-a1.h5").write_bytes(b"another stage's")
    seen = []
    mod = types.SimpleNamespace(run=lambda cfg, r, a: seen.append(sorted(p.name for p in mine.iterdir())))
    args = argparse.Namespace(verb="train-mdnrnn", configs=[], run=str(run.path), set=[], force=False)
    p = cli.Plan("train-mdnrnn", mod, train_mdnrnn.Options(), registry.StageHooks(), redo=False, side=False, done=False)
    assert cli._run_stage_here(p, run, args) == 0
    assert seen == [["LOCK"]]  # gone before the stage ran (the LOCK is ours)
    assert (other / ".tmp-vae.weights-a1.h5").exists()


# ---------------------------------------------------------------- 6: a learning rate changed on resume


def test_resumed_v_applies_a_changed_learning_rate_and_says_so(tmp_path):
    """The checkpoint holds Adam's learning-rate variable; restoring it silently kept the old vae.lr."""
    pytest.importorskip("tensorflow")
    sets = ["vae.batch_size=10", "vae.epochs=1", "vae.checkpoint_every=3", "vae.shuffle_buffer=30", "vae.val_fraction=0"]
    cfg, run = make_run(tmp_path, episodes=3, t=30, sets=sets)
    with pytest.raises(KeyboardInterrupt):
        train_vae(cfg, run, stop_at_step=5)
    train_vae(C.update(cfg, {"vae": {"lr": 3e-4}}), run)
    with np.load(run.stage_dir("train-vae") / "checkpoint.npz") as f:
        scalars = [float(f[k]) for k in f.files if k.startswith("o") and f[k].shape == () and f[k].dtype.kind == "f"]
    assert np.isclose(scalars, 3e-4, rtol=1e-6).any() and not np.isclose(scalars, 1e-4, rtol=1e-6).any(), scalars
    assert "vae.lr changed since the checkpoint: 0.0001 -> 0.0003" in run.log_path("train-vae").read_text()
