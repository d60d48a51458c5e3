"""The tiny Atari pipelines (Boxing, Freeway, through ale-py) end to end: a gymnasium env by config only."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from wm.core.rundir import STAGES, RunDir

pytestmark = [pytest.mark.slow, pytest.mark.env, pytest.mark.mpi]


@pytest.mark.parametrize("block,actions", [("atari_boxing", 18), ("atari_freeway", 3)])
def test_tiny_atari_pipeline(tmp_path, repo_root, block, actions):
    pytest.importorskip("ale_py")
    run = RunDir(tmp_path / block)
    cmd = [sys.executable, "-m", "wm", "pipeline", "--configs", block, "tiny", "--run", str(run.path), "--mpi", "3"]
    # V's XLA step: on an AVX2 CPU the tiny V takes 20 s instead of 65 (the Doom pipeline test keeps `auto`)
    cmd += ["--demo", "--set", "vae.jit_compile=true"]
    done = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    for st in STAGES:
        assert run.is_done(st.verb), st.verb
    assert "return         (mean ± std)" in done.stdout  # not Doom's "steps survived"
    with open(run.stage_dir("collect") / "ep_000000.npz", "rb"):
        pass
    from wm.data.episodes import read_episode

    ep = read_episode(run.stage_dir("collect") / "ep_000000.npz", ("action", "obs"))
    assert ep["action"].shape[1] == actions and set(ep["action"].sum(axis=1)) == {1.0}  # one-hot, what M sees
    summary = json.loads(run.eval_summary("real").read_text())
    # the tiny cap (a bout lasts 1786 steps, a Freeway game 2048)
    assert summary["episodes"] == 4 and summary["len_mean"] == 300
