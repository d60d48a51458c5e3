"""The tiny CarRacing pipeline end to end: collect with the fast renderer → V → encode → M (with a reward
head) → C in the real env under `mpirun -n 3` with the curriculum and the no-progress stop → evaluate with the
official renderer; then C trained in the dream on M's predicted rewards in a copy of the run.

With JAX installed (the `[jax]` extra, in requirements-dev.txt) the pipeline runs under `KERAS_BACKEND=jax`
(`run.backend: auto`): V and M train on JAX, and encode, M's dream preview (in its child on TensorFlow), C's real
and dream training and the evaluation load their weights on TensorFlow. One pipeline covers both: the backend path
through every stage, the env's through the rest (the Doom and Atari pipelines train V and M on TensorFlow).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wm.core.bounded import read_jsonl
from wm.core.rundir import STAGES, RunDir

pytestmark = [pytest.mark.slow, pytest.mark.env, pytest.mark.mpi]


def test_tiny_carracing_pipeline(tmp_path, repo_root):
    run = RunDir(tmp_path / "car")
    sets = ["env.renderer=fast", "es.curriculum=[50, 25]", "es.no_progress_steps=60", "mdnrnn.predict_reward=true"]
    sets.append("mdnrnn.predict_done=true")  # the dream recipe's M: episodes cut at the car's first termination
    sets += ["collect.episodes=4", "env.max_steps=150", "dream.max_steps=150"]  # the tiny path at half its size
    cmd = [sys.executable, "-m", "wm", "pipeline", "--configs", "carracing", "tiny", "--run", str(run.path), "--mpi", "3"]
    on_jax = importlib.util.find_spec("jax") is not None
    env = {**os.environ, **({"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"} if on_jax else {})}
    done = subprocess.run([*cmd, "--set", *sets], cwd=repo_root, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    for st in STAGES:
        assert run.is_done(st.verb), st.verb
    assert run.load_config().env.renderer == "fast"
    if on_jax:  # V and M trained on JAX; M's preview drawn by its child on TensorFlow, sent to the stage's TensorBoard
        from tests.helpers import tb_values

        for stage in ("train-vae", "train-mdnrnn"):
            assert json.loads((run.stage_dir(stage) / "DONE").read_text())["backend"] == "jax", stage
        assert "step: JAX (jax backend)" in run.log_path("train-vae").read_text()
        assert run.artifact("dream_preview").stat().st_size > 0
        images = [v.tag for _, v in tb_values(run.tb_dir / "mdnrnn") if v.HasField("image")]
        assert images == ["mdnrnn/dream_preview"], images

    # C trained in the real env: the population's episodes started capped at 50 steps and the cap only rose
    hist = [r for r in read_jsonl(run.metrics_path("train-controller")) if "es/generation" in r]
    caps = [int(r["es/episode_cap"]) for r in hist]
    assert caps[0] == 50 and caps == sorted(caps) and all(c <= 150 for c in caps)
    assert max(r["es/len_max"] for r in hist) <= caps[-1]
    assert "es/eval_mean" in hist[-1]

    # scored with the official renderer on full episodes: the 150 steps set above unless a lap ends sooner
    summary = json.loads(run.eval_summary("real").read_text())
    assert summary["episodes"] == 4 and -100 < summary["mean"] < 1000
    assert 1 <= summary["len_mean"] <= 150
    # its recording plays in the game's time: CarRacing's 50 steps a second (Doom's 35 made it play at 0.7×)
    from PIL import Image

    first = json.loads((run.eval_dir("real") / "episodes.jsonl").read_text().splitlines()[0])
    with Image.open(run.eval_dir("real") / "episode_000.gif") as im:
        total = sum(im.seek(i) or int(im.info["duration"]) for i in range(im.n_frames))
    assert abs(total - first["length"] / 50 * 1000) <= 10, (total, first["length"])

    # M learned the reward too; C trained in its dream is paid M's predicted rewards, not +1 per step
    assert any("mdnrnn/reward_loss" in r for r in read_jsonl(run.metrics_path("train-mdnrnn")))
    assert "end by termination" in (run.path / "logs" / "mdnrnn.log").read_text()
    dream = RunDir(tmp_path / "car-dream")
    shutil.copytree(run.path, dream.path)
    sets = ["es.fitness=dream", "es.curriculum=[]", "es.no_progress_steps=0"]  # the budgets are real-env ones
    sets += ["es.draws=2", "es.pick_real=2"]  # two draws, then every check plays 2 real tracks: the pick
    mpirun = str(Path(sys.executable).with_name("mpirun"))
    cmd = [mpirun, "-n", "3", sys.executable, "-m", "wm", "train-controller", "--run", str(dream.path), "--force"]
    done = subprocess.run([*cmd, "--set", *sets], cwd=repo_root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "fitness dream" in done.stdout + done.stderr
    hist = [r for r in read_jsonl(dream.metrics_path("train-controller")) if "es/generation" in r]
    assert hist[-1]["es/mean"] != hist[-1]["es/len_mean"]  # +1 per step would make them equal
    assert [r["es/draw"] for r in hist] == [1, 1, 2, 2]

    # the pick: the ranks swapped their dream for real CarRacing; each check's real score is what the same
    # params score on the same tracks played apart (the engine's own pool, one process)
    from wm.rollouts.engine import EvalSpec, evaluate_seeds
    from wm.stages.train_controller import pick_seeds

    cfg = dream.load_config()
    seeds = [int(x) for x in pick_seeds(cfg)]
    checks = sorted((dream.path / "controller" / "checks").glob("gen_*.npz"))
    assert [c.name for c in checks] == ["gen_0002.npz", "gen_0004.npz"]
    real = []
    for c in checks:
        with np.load(c) as z:
            spec = EvalSpec.of("real", cfg, str(dream.path))
            returns, *_ = evaluate_seeds(spec, z["params"], seeds, z["params"].size)
            assert int(z["real_episodes"]) == 2 and float(z["real"]) == pytest.approx(returns.mean(), abs=1e-6)
            real.append((float(z["real"]), z["params"]))
    with np.load(dream.params("best")) as b:
        np.testing.assert_array_equal(b["params"], max(real, key=lambda r: r[0])[1])
