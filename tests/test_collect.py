"""The collect stage: deterministic seeds, identical datasets across runs and worker counts, resume after a kill,
corrupt files, and `data check`. Doom with short caps keeps it quick."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import stage_run, tiny_cfg
from wm.core.rundir import RunDir
from wm.data.episodes import EPISODE_KEYS, list_episodes, read_episode
from wm.stages import collect
from wm.tools import data_check

ROOT = Path(__file__).resolve().parent.parent
SETS = ["env.max_steps=80", "collect.min_length=30", "collect.workers=2"]


def _cfg(*extra: str):
    return tiny_cfg(*SETS, *extra)


def _collect(path: Path, cfg, workers: int | None = None) -> RunDir:
    run = RunDir(path)
    run.bind_config(cfg, "collect")
    stage_run("collect", cfg, run, workers=workers)
    return run


def _dataset(run: RunDir) -> dict[str, dict[str, np.ndarray]]:
    return {p.name: read_episode(p) for p in list_episodes(run.stage_dir("collect"))}


def test_episode_seeds_deterministic_and_distinct():
    a = [collect.episode_seeds(0, k, 0)[0] for k in range(50)]
    assert a == [collect.episode_seeds(0, k, 0)[0] for k in range(50)]
    assert len(set(a)) == 50 and collect.episode_seeds(1, 0, 0)[0] != a[0] and collect.episode_seeds(0, 0, 1)[0] != a[0]
    g1, g2 = collect.episode_seeds(0, 3, 0)[1], collect.episode_seeds(0, 3, 0)[1]
    assert g1.integers(1 << 30) == g2.integers(1 << 30)


def test_min_length_must_be_reachable(tmp_path):
    from wm.core.errors import WMError

    with pytest.raises(WMError, match="min_length"):
        _collect(tmp_path / "r", _cfg("collect.min_length=80"))


@pytest.mark.env
def test_collection_is_deterministic_and_well_formed(tmp_path):
    cfg = _cfg("collect.episodes=4")
    a = _dataset(_collect(tmp_path / "a", cfg, workers=2))
    b = _dataset(_collect(tmp_path / "b", cfg, workers=1))
    assert sorted(a) == [f"ep_{i:06d}.npz" for i in range(4)] == sorted(b)
    for name, ep in a.items():
        for k in EPISODE_KEYS:
            np.testing.assert_array_equal(ep[k], b[name][k])
        T = len(ep["done"])
        assert 30 < T <= 80  # kept only above min_length, capped at max_steps
        assert ep["obs"].shape == (T, 64, 64, 3) and ep["obs"].dtype == np.uint8
        assert ep["action"].shape == (T, 1) and ep["action"].dtype == np.float32 and np.all(np.abs(ep["action"]) <= 1)
        assert ep["reward"].dtype == np.float32 and ep["done"].dtype == bool and ep["seed"].dtype == np.int64
        assert not ep["done"][:-1].any() and (ep["done"][-1] or T == 80)  # done only on a death, at the end
    # the stored seed replays the episode's first frame
    from wm.envs import make_env

    env = make_env(cfg)
    first = env.reset(seed=int(a["ep_000002.npz"]["seed"]))[0]
    env.close()
    np.testing.assert_array_equal(first, a["ep_000002.npz"]["obs"][0])
    run = RunDir(tmp_path / "a")
    assert run.is_done("collect")
    recs = [r for r in __import__("wm.core.bounded", fromlist=["read_jsonl"]).read_jsonl(run.metrics_path("collect"))]
    assert recs[-1]["collect/episodes"] == 4 and recs[-1]["collect/frames"] == sum(len(e["done"]) for e in a.values())
    assert recs[-1]["collect/steps_per_s"] > 0


@pytest.mark.env
def test_resume_after_kill_keeps_finished_files(tmp_path):
    path = tmp_path / "run"
    argv = [
        sys.executable,
        "-m",
        "wm",
        "collect",
        "--configs",
        "doom_takecover",
        "tiny",
        "--run",
        str(path),
        "--set",
        "env.max_steps=300",
        "collect.min_length=30",
        "collect.episodes=10",
        "collect.workers=1",
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    folder = path / "episodes"
    deadline = time.time() + 60
    try:
        while time.time() < deadline and len(list_episodes(folder)) < 2:
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI and its worker, mid-way
        proc.wait()
    before = {p.name: p.stat().st_mtime_ns for p in list_episodes(folder)}
    assert 2 <= len(before) < 10, "the run should have been killed mid-way"
    assert not (folder / "DONE").exists()
    with open(tmp_path / "rerun.log", "w") as log:  # a file, not a pipe: no child can hold the test on EOF
        code = subprocess.run(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=120).returncode
    assert code == 0, (tmp_path / "rerun.log").read_text()
    files = list_episodes(folder)
    assert [p.name for p in files] == [f"ep_{i:06d}.npz" for i in range(10)] and (folder / "DONE").exists()
    assert all(p.stat().st_mtime_ns == before[p.name] for p in files if p.name in before)  # not redone
    assert not list(folder.glob(".tmp-*"))
    # resumed episodes equal what a fresh collection produces for those slots
    cfg = RunDir(path).load_config()
    from wm.envs import make_env
    from wm.stages.contract import stage_input

    env_ = make_env(cfg)
    last = collect.collect_slot(stage_input(cfg, "collect"), env_, 9)[0]
    env_.close()
    np.testing.assert_array_equal(read_episode(files[9])["obs"], last["obs"])


@pytest.mark.env
def test_corrupt_files_reported_and_regenerated(tmp_path, capsys):
    cfg = _cfg("collect.episodes=3")
    run = _collect(tmp_path / "r", cfg, workers=1)
    folder = run.stage_dir("collect")
    good = read_episode(folder / "ep_000001.npz")
    data = (folder / "ep_000001.npz").read_bytes()
    (folder / "ep_000001.npz").write_bytes(data[: len(data) // 2])  # truncated, in range
    (folder / "ep_000007.npz").write_bytes(b"not a zip")  # garbage, out of range

    code = data_check.main(argparse.Namespace(run=str(run.path), full=False, json=False))
    out = capsys.readouterr().out
    assert code == 1 and "ep_000001.npz" in out and "ep_000007.npz" in out and "2 episodes" in out
    s = data_check.summarise(run, full=True)
    assert s["episodes"] == 2 and {b["file"] for b in s["bad_files"]} == {"ep_000001.npz", "ep_000007.npz"}

    stage_run("collect", cfg, run, workers=1)  # rerun: the in-range bad file is rewritten
    log = (run.path / "logs" / "collect.log").read_text()
    assert "ep_000001.npz" in log and "ep_000007.npz" in log
    again = read_episode(folder / "ep_000001.npz")
    for k in EPISODE_KEYS:
        np.testing.assert_array_equal(again[k], good[k])
    s = data_check.summarise(run)
    lengths = [len(read_episode(folder / f"ep_{i:06d}.npz")["done"]) for i in range(3)]
    assert s["episodes"] == 3 and s["frames"] == sum(lengths) and s["length_min"] == min(lengths)
    assert s["length_max"] == max(lengths) and s["length_median"] == float(np.median(lengths))
    assert [b["file"] for b in s["bad_files"]] == ["ep_000007.npz"]


class _OffField:
    """A stand-in env whose episode 'terminates' from step 3 on, every step, as CarRacing does off the playfield."""

    def reset(self, seed=None):
        self.t = 0
        return np.zeros((64, 64, 3), np.uint8), {}

    def step(self, a):
        self.t += 1
        off = self.t >= 3
        return np.full((64, 64, 3), self.t, np.uint8), (-100.0 if off else 1.0), off, self.t >= 8, {}


class _Zero:
    def reset(self):
        pass

    def act(self, obs):
        return np.zeros(1, np.float32)


def test_ignore_done_plays_on_but_records_the_termination():
    """`collect.ignore_done` (CarRacing, §1a) keeps stepping to the cap, and the done flags say where the real game
    ended, so M's loader can cut the episode there; without it the episode ends at the first termination."""
    on = collect.rollout(_OffField(), _Zero(), "none", 0, ignore_done=True)
    assert len(on["done"]) == 8 and list(np.flatnonzero(on["done"])) == [2, 3, 4, 5, 6, 7]
    off = collect.rollout(_OffField(), _Zero(), "none", 0)
    assert len(off["done"]) == 3 and list(off["done"]) == [False, False, True]
