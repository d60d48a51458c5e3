"""`wm export` and the agent shipped with the suite."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from tests.helpers import tiny_cfg  # noqa: E402
from wm.core.atomic import atomic_savez, atomic_write_json  # noqa: E402
from wm.core.errors import WMError  # noqa: E402
from wm.core.rundir import RunDir  # noqa: E402
from wm.envs.setup import setup  # noqa: E402
from wm.tools.export import AGENT_FILE, export  # noqa: E402

SHIPPED = "wm/agents/doom_small_s2"
CAR = "wm/agents/carracing_small_s0"  # the `carracing small` preset, seed 0


def _trained(tmp_path) -> RunDir:
    """A run holding random-weight V (z 32), M (LSTM 16, done head), dream starts, C and a real evaluation."""
    import keras

    from wm.envs.setup import setup
    from wm.models.mdnrnn import MDNRNN, config_path, save_config
    from wm.models.vae import ConvVAE

    cfg = tiny_cfg("vae.z_dim=32", "mdnrnn.hidden=16")
    run = RunDir(tmp_path / "run")
    run.bind_config(cfg)
    keras.utils.set_random_seed(0)
    for verb in ("train-vae", "train-mdnrnn", "encode", "train-controller"):
        run.stage_dir(verb).mkdir(parents=True, exist_ok=True)
    ConvVAE(32).save_weights(str(run.vae_weights))
    m = MDNRNN(32, 1, 16, 5, predict_done=True)
    m.save_weights(str(run.mdnrnn_weights))
    save_config(m, config_path(run.mdnrnn_weights))
    atomic_savez(run.initial_z, mu=np.zeros((3, 32), np.float32), logvar=np.zeros((3, 32), np.float32))
    n = setup(cfg).n_params
    atomic_savez(run.params("best"), params=np.linspace(-1, 1, n))
    played = {"params_file": str(run.params("best").resolve()), "seeds": [1000, 1001]}  # as `evaluate` names it
    real = {"episodes": 2, "mean": 300.0, "std": 50.0, "median": 300.0, "min": 250.0, "max": 350.0, **played}
    for tag, summary in (("real", real), ("random", {**real, "mean": 20.0, "params_file": None})):
        run.eval_dir(tag).mkdir(parents=True)
        atomic_write_json(run.eval_summary(tag), summary)
        run.eval_summary(tag).with_name("episodes.jsonl").write_text(
            '{"seed": 1000, "return": 250.0}\n{"seed": 1001, "return": 350.0}\n'
        )
    atomic_write_json(run.eval_summary(), real)  # the default evaluation, as `evaluate` writes it
    run.mark_done("evaluate", {"eval/episodes": 2, "eval/mean": 300.0, "params_file": played["params_file"]})
    return run


def test_export_writes_a_half_size_run_that_loads(tmp_path, repo_root):
    """float16 V and M (half the bytes, within float16 rounding of the originals), C and dream starts as they were,
    a DONE per stage, the recorded score with its first episodes; a run dir `load_world` opens unchanged."""
    import h5py

    from wm.rollouts.world import load_world

    run = _trained(tmp_path)
    out = tmp_path / "agent"
    info = export(run, out, note="made by a test")
    assert info["real"]["mean"] == 300.0 and info["real"]["first_episodes"] == [[1000, 250.0], [1001, 350.0]]
    here = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=repo_root)
    if here.returncode == 0:  # exported from a checkout: the suite's commit is recorded
        assert info["exported_at_commit"] == here.stdout.strip()
    assert json.loads((out / AGENT_FILE).read_text()) == info and "made by a test" in (out / "AGENT.md").read_text()
    agent = RunDir(out)
    for weights in ("vae_weights", "mdnrnn_weights"):
        src, dst = getattr(run, weights), getattr(agent, weights)
        assert dst.stat().st_size < 0.6 * src.stat().st_size  # half the data, plus the HDF5 headers
        with h5py.File(dst) as f:
            found: list = []
            f.visititems(lambda _, o, found=found: found.append(o) if isinstance(o, h5py.Dataset) else None)
            assert {o.dtype for o in found} == {np.dtype(np.float16)}
            # stored without loss through HDF5's shuffle and gzip filters (the shipped agents' 20 MB)
            big = {(o.compression, o.shuffle) for o in found if o.size >= 65536}
            assert big == {("gzip", True)} if weights == "vae_weights" else big <= {("gzip", True)}, big
    for verb in ("train-vae", "train-mdnrnn", "encode", "train-controller"):
        assert agent.is_done(verb)
    cfg = agent.load_config()
    need = ("vae", "mdnrnn", "params")
    a, b = (load_world(setup(cfg), r, need, r.params("best")) for r in (run, agent))
    for x, y in zip(a.vae.get_weights() + a.mdnrnn.get_weights(), b.vae.get_weights() + b.mdnrnn.get_weights(), strict=True):
        assert y.dtype == np.float32
        np.testing.assert_allclose(y, x, rtol=1e-3, atol=1e-4)
    np.testing.assert_array_equal(b.params, a.params)
    # its evaluations come along as a run's (what status and results read), naming the agent's own C
    assert agent.is_done("evaluate") and agent.done_info("evaluate")["params_file"] == "controller/best.npz"
    for tag in ("real", "random", None):
        summary = json.loads(agent.eval_summary(tag).read_text())
        assert summary["mean"] == (20.0 if tag == "random" else 300.0)
        assert summary["params_file"] == (None if tag == "random" else "controller/best.npz")
    for tag in ("real", "random"):
        assert agent.eval_summary(tag).with_name("episodes.jsonl").read_text().count("return") == 2
    # the mean's C was never scored by eval/real (evaluate.params: best): no score is attributed to it
    run.params("best").rename(run.params("mean"))
    info = export(run, tmp_path / "mean-agent", params="mean")
    assert info["real"] is None and info["random"]["mean"] == 20.0
    mean_agent = RunDir(tmp_path / "mean-agent")
    assert not mean_agent.is_done("evaluate") and not mean_agent.eval_dir("real").exists()
    assert mean_agent.eval_summary("random").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_export_refuses_without_touching_anything(tmp_path):
    run = _trained(tmp_path)
    out = tmp_path / "agent"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    with pytest.raises(WMError, match="exists; choose another --out or pass --force"):
        export(run, out)
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    run.params("best").unlink()
    with pytest.raises(WMError, match=r"no trained agent to export: missing C \(.*best.npz\)"):
        export(run, tmp_path / "other")
    assert not (tmp_path / "other").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_the_shipped_agents_fit_20_mb_together(repo_root):
    agents = [p for p in (repo_root / "wm" / "agents").iterdir() if p.is_dir()]
    assert sorted(p.name for p in agents) == ["carracing_small_s0", "doom_small_s2"]
    assert sum(f.stat().st_size for p in agents for f in p.rglob("*") if f.is_file()) <= 20e6


@pytest.mark.slow
@pytest.mark.env
@pytest.mark.parametrize("shipped", [SHIPPED, CAR])
def test_shipped_agent_replays_its_recorded_episodes(tmp_path, repo_root, shipped):
    """Each agent in wm/agents (float16 V and M) plays its recorded first real episode again, step for step, in one
    process (a second episode would start a pool of two, each loading TF and the world for one episode)."""
    info = json.loads((repo_root / shipped / AGENT_FILE).read_text())
    random = info["random"]["mean"]
    assert info["real"]["mean"] > (3 * random if random > 0 else 500)  # CarRacing's random policy scores below 0
    run = tmp_path / "agent"
    shutil.copytree(repo_root / shipped, run)
    # its own evaluation (`eval/real`, played as shipped: float16 V and M)
    shipped_rows = (repo_root / shipped / "eval" / "real" / "episodes.jsonl").read_text().splitlines()
    first = [[r["seed"], r["return"]] for r in map(json.loads, shipped_rows[:1])]
    cmd = [sys.executable, "-m", "wm", "evaluate", "--run", str(run), "--episodes", "1", "--gifs", "0", "--force"]
    done = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    rows = [json.loads(line) for line in (run / "eval" / "real" / "episodes.jsonl").read_text().splitlines()]
    assert [[r["seed"], r["return"]] for r in rows] == first


@pytest.mark.parametrize(
    ("shipped", "status", "row"),
    [
        (SHIPPED, "mean 830.4  std 477.1", "| 100 | 830.4 ± 477.1 | 746.5 |"),
        (CAR, "mean 891.4  std 36", "| 100 | 891.4 ± 36.0 | 904.5 |"),
    ],
)
def test_shipped_agent_opens_as_a_finished_run_and_refuses_writes(tmp_path, repo_root, shipped, status, row):
    """status shows its score, results reads it, a writing verb refuses inside the package, and nothing shipped holds
    an absolute path or a path to a run that is not shipped."""
    agent = repo_root / shipped
    wm = [sys.executable, "-m", "wm"]
    st = subprocess.run([*wm, "status", "--run", str(agent)], capture_output=True, text=True, cwd=repo_root)
    assert st.returncode == 0, st.stderr
    assert "an exported agent" in st.stdout and f"evaluate          done         episodes 100  {status}" in st.stdout
    res = subprocess.run(
        [*wm, "results", "--runs", str(agent), "--out", str(tmp_path / "r")], capture_output=True, text=True, cwd=repo_root
    )
    assert res.returncode == 0 and row in res.stdout, res.stderr
    before = {p: p.read_bytes() for p in agent.rglob("*") if p.is_file()}
    for verb in (
        ["evaluate", "--run", str(agent)],
        ["report", "--run", str(agent)],
        ["train-controller", "--run", str(agent)],
    ):
        p = subprocess.run([*wm, *verb], capture_output=True, text=True, cwd=repo_root)
        assert p.returncode == 2 and "shipped agents (read-only): copy it out first" in p.stderr, p.stderr
    assert {p: p.read_bytes() for p in agent.rglob("*") if p.is_file()} == before
    for p in agent.rglob("*"):
        if p.is_file() and p.suffix in (".json", ".jsonl", ".md", ".yaml", ""):
            text = p.read_text()
            assert "/work" not in text and "/home" not in text and "/tmp" not in text and "../" not in text, p
            # the C an evaluation played is named inside the agent, not in the run it was exported from
            for m in re.finditer(r'"params_file": "([^"]*)"', text):
                assert (agent / m.group(1)).is_file(), (p, m.group(1))
