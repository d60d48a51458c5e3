"""`wm agents`: the shipped agents listed with the one score each ships with, and copied out to run on."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

from wm import cli
from wm.core.rundir import RunDir
from wm.tools.agents import AGENTS_DIR, shipped


def test_the_list_gives_each_agent_its_own_evaluations_score(capsys):
    assert set(shipped()) == {"doom_small_s2", "carracing_small_s0"}
    assert cli.main(["agents"]) == 0
    out = capsys.readouterr().out
    for name, path in shipped().items():
        s = json.loads((path / "eval" / "summary.json").read_text())
        line = next(ln for ln in out.splitlines() if ln.startswith(name))
        assert f"{s['mean']:.1f} ± {s['std']:.1f} over {s['episodes']} episodes" in line


def test_a_copy_from_another_directory_is_a_finished_writable_run(tmp_path, repo_root):
    env = {**os.environ, "PYTHONPATH": str(repo_root)}
    dest = tmp_path / "deep" / "er" / "agent"  # parents created
    p = subprocess.run(
        [sys.executable, "-m", "wm", "agents", "copy", "doom_small_s2", str(dest)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
    )
    assert p.returncode == 0, p.stderr
    run = RunDir(dest)
    assert run.state("evaluate") == "done" and run.state("train-controller") == "done"
    assert (dest / "eval" / "summary.json").read_bytes() == (
        AGENTS_DIR / "doom_small_s2" / "eval" / "summary.json"
    ).read_bytes()
    mode = stat.S_IMODE((dest / "config.yaml").stat().st_mode)
    assert mode & stat.S_IWUSR  # writable whatever the installed files' modes
    st = subprocess.run([sys.executable, "-m", "wm", "status", "--run", str(dest)], capture_output=True, text=True, env=env)
    assert "mean 830.4" in st.stdout and "trained" not in st.stdout  # one score: the agent's own evaluation


def test_a_copy_never_overwrites_and_a_typo_is_named(tmp_path, capsys):
    (tmp_path / "taken").mkdir()
    assert cli.main(["agents", "copy", "doom_small_s2", str(tmp_path / "taken")]) == 2
    assert "exists" in capsys.readouterr().err
    assert cli.main(["agents", "copy", "doom_smal_s2", str(tmp_path / "x")]) == 2
    assert "did you mean 'doom_small_s2'?" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
