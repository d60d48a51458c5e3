"""The tiny CarRacing pipeline end to end (issue 15): collect with the fast renderer → V → encode → M (with a reward
head) → C in the real env under `mpirun -n 3` with the curriculum and the no-progress stop → evaluate with the
official renderer; then C trained in the dream on M's predicted rewards (issue 17) in a copy of the run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from wm.rundir import STAGES, RunDir, read_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.env, pytest.mark.mpi]


def test_tiny_carracing_pipeline(tmp_path, repo_root):
    run = RunDir(tmp_path / "car")
    sets = ["env.renderer=fast", "es.curriculum=[50, 25]", "es.no_progress_steps=60", "mdnrnn.predict_reward=true"]
    sets.append("mdnrnn.predict_done=true")  # the dream recipe's M: episodes cut at the car's first termination
    cmd = [sys.executable, "-m", "wm", "pipeline", "--configs", "carracing", "tiny", "--run", str(run.path), "--mpi", "3"]
    done = subprocess.run([*cmd, "--set", *sets], cwd=repo_root, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    for st in STAGES:
        assert run.is_done(st.verb), st.verb
    assert run.load_config().env.renderer == "fast"

    # C trained in the real env: the population's episodes started capped at 50 steps and the cap only rose
    hist = [r for r in read_jsonl(run.metrics_path("train-controller")) if "es/generation" in r]
    caps = [int(r["es/episode_cap"]) for r in hist]
    assert caps[0] == 50 and caps == sorted(caps) and all(c <= 300 for c in caps)
    assert max(r["es/len_max"] for r in hist) <= caps[-1]
    assert "es/eval_mean" in hist[-1]

    # scored with the official renderer on full episodes: the tiny preset's 300 steps unless a lap ends sooner
    summary = json.loads(run.eval_summary("real").read_text())
    assert summary["episodes"] == 4 and -100 < summary["mean"] < 1000
    assert 1 <= summary["len_mean"] <= 300

    # M learned the reward too; C trained in its dream is paid M's predicted rewards, not +1 per step
    assert any("mdnrnn/reward_loss" in r for r in read_jsonl(run.metrics_path("train-mdnrnn")))
    assert "end by termination" in (run.path / "logs" / "mdnrnn.log").read_text()
    dream = RunDir(tmp_path / "car-dream")
    shutil.copytree(run.path, dream.path)
    sets = ["es.fitness=dream", "es.curriculum=[]", "es.no_progress_steps=0"]  # the budgets are real-env ones
    cmd = [sys.executable, "-m", "wm", "train-controller", "--run", str(dream.path), "--force", "--set", *sets]
    done = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "fitness dream" in done.stdout + done.stderr
    last = [r for r in read_jsonl(dream.metrics_path("train-controller")) if "es/generation" in r][-1]
    assert last["es/mean"] != last["es/len_mean"]  # +1 per step would make them equal
