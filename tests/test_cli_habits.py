"""What a user meets first: the order of --configs blocks, value ranges, a typo'd --run, a refused command that
writes nothing, file modes under the umask, exit codes, --version and a closed pipe."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from vae_data import make_run

from tests.helpers import tiny_cfg, tiny_run_at
from wm import __version__, cli
from wm.core import commands
from wm.core import config as C
from wm.core.atomic import atomic_write_text
from wm.core.errors import WMError
from wm.core.rundir import RunDir
from wm.data.episodes import episode_name, read_episode, write_episode


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every file's bytes and every folder (None) under root: a refusal must leave this unchanged."""
    return {str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))}


def _status(run: RunDir) -> list[str]:
    return [run.state(v) for v in ("collect", "train-vae", "encode", "train-mdnrnn", "train-controller", "evaluate")]


def test_env_block_applies_first_whatever_the_order():
    a, b = C.load(["small", "doom_takecover"]), C.load(["doom_takecover", "small"])
    assert a.to_dict() == b.to_dict()
    assert (a.collect.episodes, a.mdnrnn.hidden, a.es.generations) == (1000, 256, 25)  # small's, not the paper's
    with pytest.raises(WMError, match="'carracing', 'doom_takecover' each choose the env"):
        C.load(["carracing", "small", "doom_takecover"])


@pytest.mark.parametrize(
    "setting, message",
    [
        ("es.popsize=-4", "'es.popsize' must be >= 2, got -4"),
        ("es.fitness=bogus", "'es.fitness' must be dream | real | toy, got 'bogus'"),
        ("dream.temperature=0", "'dream.temperature' must be > 0"),
        ("data.max_bad_share=1.5", r"'data.max_bad_share' must be \[0, 1\]"),
        ("collect.episodes=0", "'collect.episodes' must be >= 1"),
        ("evaluate.temperatures=[1.0, -1]", "'evaluate.temperatures' must be > 0"),
    ],
)
def test_ranges_and_choices_are_checked_once_for_every_key(setting, message):
    with pytest.raises(WMError, match=message):
        C.load(["doom_takecover", "tiny"], [setting])
    with pytest.raises(WMError, match=message):  # a config the code builds (a round's, a scoring one) is checked too
        C.update(tiny_cfg(), C.parse_set([setting]), source="code")


def test_every_preset_fits_the_rules():
    for names in (["doom_takecover", "tiny"], ["doom_takecover", "small"], ["carracing", "small", "dream"], ["carracing"]):
        C.load(names)
    for key in C.RULES:  # a rule names a real key
        assert key in C.flatten(C.defaults().to_dict()), key


def test_a_refused_value_on_a_stored_run_leaves_config_yaml_byte_identical(tmp_path, tiny_run, capsys):
    run = tiny_run
    before = _tree(tmp_path)
    for bad in ("es.fitness=bogus", "es.device=tpu", "es.popsize=-4"):
        assert cli.main(["train-controller", "--run", str(run.path), "--set", bad]) == 2
        assert capsys.readouterr().err.count("\n") == 1
        assert _tree(tmp_path) == before, bad


def test_a_typo_in_run_is_refused_naming_the_nearest_run_and_creates_nothing(tmp_path, capsys):
    run = tiny_run_at(tmp_path / "doom1")
    before = _tree(tmp_path)
    assert cli.main(["train-vae", "--run", str(tmp_path / "doomm1")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no run in ") and f"did you mean {str(run.path)!r}" in err and err.count("\n") == 1
    assert _tree(tmp_path) == before


def test_a_refused_train_vae_with_too_many_bad_episodes_writes_nothing(tmp_path, capsys):
    pytest.importorskip("tensorflow")
    _, run = make_run(tmp_path, episodes=5, t=20, sets=["vae.batch_size=8", "vae.epochs=1"])
    ep = run.stage_dir("collect") / episode_name(1)
    ep.write_bytes(ep.read_bytes()[:100])  # truncated
    ep3 = run.stage_dir("collect") / episode_name(3)
    write_episode(ep3, **(dict(read_episode(ep3)) | {"action": np.zeros((19, 1), np.float32)}))  # misshapen
    before, status = _tree(tmp_path), _status(run)
    assert cli.main(["train-vae", "--run", str(run.path), "--set", "vae.epochs=2"]) == 2
    err = capsys.readouterr().err
    assert "more than data.max_bad_share" in err and err.count("\n") == 1
    assert _tree(tmp_path) == before and _status(run) == status == ["done", *["not started"] * 5]


def test_a_refused_encode_with_a_v_of_another_z_dim_writes_nothing(tmp_path, capsys):
    pytest.importorskip("tensorflow")
    from wm.models.training import save_weights
    from wm.models.vae import ConvVAE

    _, run = make_run(tmp_path, episodes=3, t=12)
    save_weights(ConvVAE(16), run.stage_dir("train-vae") / "vae.weights.h5")  # the config says z_dim 32
    run.mark_done("train-vae", {"z_dim": 32})
    before, status = _tree(tmp_path), _status(run)
    assert cli.main(["encode", "--run", str(run.path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert _tree(tmp_path) == before and _status(run) == status


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_atomic_writes_honour_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
        plain = tmp_path / "plain.txt"
        plain.write_text("x")
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == mode == plain.stat().st_mode & 0o777


def _wm(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wm", *args], capture_output=True, text=True, **kw)


def test_no_verb_is_a_usage_error_and_version_prints(repo_root):
    res = _wm(cwd=repo_root)
    assert res.returncode == 2 and res.stdout == "" and "usage: wm" in res.stderr and "name a verb" in res.stderr
    res = _wm("--version", cwd=repo_root)
    assert res.returncode == 0 and res.stdout.strip() == f"wm {__version__}"


def test_a_closed_pipe_ends_quietly(tiny_run, repo_root):
    run = tiny_run
    p = subprocess.Popen(
        [sys.executable, "-m", "wm", "status", "--run", str(run.path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=repo_root,
    )
    p.stdout.close()  # the reader is gone before the first line (`wm status | head -0`)
    err = p.stderr.read().decode()
    assert p.wait() == 141 and err == ""


@pytest.mark.env  # a few seconds of ViZDoom
def test_a_stage_run_on_its_own_prints_progress_with_an_eta(tmp_path, capfd):
    run = tmp_path / "r"
    args = ["collect", "--configs", "doom_takecover", "tiny", "--run", str(run), "--progress-every", "0.2"]
    assert cli.main([*args, "--set", "collect.episodes=6", "collect.workers=1", "env.max_steps=150"]) == 0
    lines = [line for line in capfd.readouterr().out.splitlines() if line.startswith("collect: ")]
    # "collect: 33%  elapsed 0m01s  ETA 0m02s" (before: a stage run on its own said nothing of its ETA)
    assert lines and all(re.fullmatch(r"collect: (\d+%|…)  elapsed \S+  ETA \S+", line) for line in lines), lines
    assert any(re.fullmatch(r"collect: \d+%  elapsed \S+  ETA \d\S*", line) for line in lines), lines
    # off with 0, as the pipeline runs its stages (it prints their progress lines itself)
    assert cli.main(["collect", "--run", str(run), "--progress-every", "0", "--force"]) == 0
    assert not [line for line in capfd.readouterr().out.splitlines() if line.startswith("collect: ")]
    assert commands.stage_command("collect", run, progress_every=0)[-2:] == ["--progress-every", "0"]


def test_the_evaluation_line_carries_an_eta(capsys):
    from wm.rollouts.evaluation import Progress

    p = Progress(4, "real")
    p.start -= 10.0  # ten seconds in
    p.update([100.0])
    assert re.search(r"\[eval\] real: 1/4 episodes  mean 100\.0  \(10s, ETA 0m30s\)", capsys.readouterr().out)


def test_workers_zero_means_every_core_this_process_may_use(monkeypatch):
    from wm.core import procpool

    monkeypatch.setattr(procpool.os, "sched_getaffinity", lambda pid: {0, 1, 2, 5}, raising=False)
    assert procpool.worker_count(0) == 4 and procpool.worker_count(3) == 3
    # the paper presets take what the machine or the job has (before: 64 worker processes on any machine)
    assert C.load(["doom_takecover"]).collect.workers == 0 == C.load(["carracing"]).collect.workers
    assert C.load(["doom_takecover"]).evaluate.workers == 0 == C.load(["carracing"]).evaluate.workers
    assert C.load(["doom_takecover", "small"]).collect.workers == 2


@pytest.mark.parametrize("ranks", ["1", "-2"])
def test_pipeline_mpi_needs_two_ranks_or_none(tmp_path, capsys, ranks):
    assert cli.main(["pipeline", "--configs", "doom_takecover", "tiny", "--run", str(tmp_path / "r"), "--mpi", ranks]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --mpi must be 0 (no MPI) or >= 2 (rank 0 dispatches, the others play), got {ranks}\n"
    assert not (tmp_path / "r").exists()
