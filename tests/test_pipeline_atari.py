"""The tiny Atari pipeline (Boxing, through ale-py) end to end: a gymnasium env by config only; Freeway's own settings
(3 actions, its crop, the random-agent data policy) through collect and a real evaluation, the rest of its path being
Boxing's with another action count."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from wm.core.rundir import STAGES, RunDir

pytestmark = [pytest.mark.env]


@pytest.mark.slow
@pytest.mark.mpi
def test_tiny_atari_pipeline(tmp_path, repo_root):
    pytest.importorskip("ale_py")
    block, actions = "atari_boxing", 18
    run = RunDir(tmp_path / block)
    cmd = [sys.executable, "-m", "wm", "pipeline", "--configs", block, "tiny", "--run", str(run.path), "--mpi", "3"]
    # V's XLA step: on an AVX2 CPU the tiny V takes 20 s instead of 65 (the Doom pipeline test keeps `auto`). The
    # tiny preset's path at a third of its size: 4 bouts of 100 steps (the code is the same; the suite's time is not)
    cmd += ["--demo", "--set", "vae.jit_compile=true", "collect.episodes=4", "env.max_steps=100", "dream.max_steps=100"]
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
    # the cap set above (a bout lasts 1786 steps, a Freeway game 2048)
    assert summary["episodes"] == 4 and summary["len_mean"] == 100


def test_freeways_data_and_real_game_under_its_block(tmp_path, repo_root):
    """`--configs atari_freeway tiny`: collect with the random-agent policy plays 3-action games whose one-hot choices
    M would see, at the block's crop; the random policy's real evaluation reads Freeway's scores."""
    pytest.importorskip("ale_py")
    from wm.core.config import load
    from wm.data.episodes import read_episode
    from wm.envs import action_dim

    run = RunDir(tmp_path / "freeway")
    wm = [sys.executable, "-m", "wm"]
    sets = ["--set", "collect.episodes=2", "env.max_steps=40", "collect.workers=1"]
    for argv in (
        ["collect", "--configs", "atari_freeway", "tiny", "--run", str(run.path), *sets],
        ["evaluate", "--run", str(run.path), "--random", "--episodes", "2", "--gifs", "0"],
    ):
        done = subprocess.run([*wm, *argv], cwd=repo_root, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    cfg = run.load_config()
    assert cfg.collect.policy == "random_agent" and action_dim(cfg) == action_dim(load(["atari_freeway"])) == 3
    for i in range(2):
        ep = read_episode(run.stage_dir("collect") / f"ep_{i:06d}.npz", ("action", "obs"))
        assert ep["action"].shape == (40, 3) and set(ep["action"].sum(axis=1)) == {1.0}
        assert ep["obs"].shape[1:] == (64, 64, 3)
    summary = json.loads(run.eval_summary("random").read_text())
    assert summary["episodes"] == 2 and summary["len_mean"] == 40 and summary["mode"] == "real-random"
