"""The kill campaign: every stage of the tiny pipeline killed (SIGKILL, its whole process group) at a random moment,
then rerun, must end with what an unbroken run wrote.

The moments are drawn from a seeded generator (`CAMPAIGN_SEED`, printed with every kill), so a failure reproduces:
`WM_KILL_SEED=<seed> pytest tests/test_kill_campaign.py`. A moment is a fraction of the stage's unbroken wall time;
when the stage has already finished at that moment, a shorter one is drawn. The comparison is of what the stage
leaves for the next one: every array of its npz and HDF5 files, every value of its JSON and JSONL files and of its
DONE, except the fields that measure time (`_timed`), bit for bit.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from wm.core.rundir import STAGES, RunDir

pytestmark = [pytest.mark.slow, pytest.mark.env]

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGN_SEED = int(os.environ.get("WM_KILL_SEED", "1"))
CONFIG = ["--configs", "doom_takecover", "tiny"]
SETS = ["--set", "collect.episodes=8", "env.max_steps=200", "vae.checkpoint_every=10", "mdnrnn.checkpoint_every=10"]
SETS += ["es.generations=3", "evaluate.episodes=4"]
# a measure of time, not of what was computed: wall times, rates, dates; and the metrics file's length at a checkpoint
# (a byte offset into lines that carry times)
TIMED = re.compile(r"(^|/)(time|elapsed|seconds|wall|started|finished|metrics_bytes)|(_s|per_s|_per_sec|_rate|_time|_at|/s)$")


def _stage(verb: str, run: Path, first: bool = False) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "wm", verb, "--run", str(run)]
    cmd += CONFIG + SETS if first else []
    log = open(run.parent / f"{run.name}-{verb}.log", "a")  # a file, not a pipe: a child cannot hold the test on EOF
    return subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _finish(proc: subprocess.Popen, what: str, timeout: float = 600) -> None:
    assert proc.wait(timeout=timeout) == 0, f"{what} failed; see its log beside the run"


def _timed(key: str) -> bool:
    return bool(TIMED.search(key))


def _plain(value, root: Path):
    """A JSON value without its time fields, the run's own path written `<run>`."""
    if isinstance(value, dict):
        return {k: _plain(v, root) for k, v in value.items() if not _timed(str(k))}
    if isinstance(value, list):
        return [_plain(v, root) for v in value]
    return value.replace(str(root), "<run>") if isinstance(value, str) else value


def _arrays(path: Path, root: Path) -> dict[str, object]:
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as f:
            # a JSON document stored as a string array (the ES state's plain values) is compared as values
            return {k: _plain(json.loads(str(f[k][()])), root) if f[k].dtype.kind == "U" else f[k] for k in f.files}
    import h5py

    out: dict[str, np.ndarray] = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
    return out


def _contents(folder: Path, root: Path) -> dict[str, object]:
    """What a stage's folder holds for the next stage: arrays and values, not bytes (an npz's zip headers carry
    the time of writing; a log line carries the time it was written)."""
    out: dict[str, object] = {}
    for p in sorted(folder.rglob("*")):
        name = str(p.relative_to(folder))
        if not p.is_file() or p.name == "LOCK" or p.name.startswith(".tmp-"):
            continue
        if p.suffix in (".npz", ".h5"):
            out[name] = _arrays(p, root)
        elif p.suffix == ".json" or p.name == "DONE":
            out[name] = _plain(json.loads(p.read_text()), root)
        elif p.suffix == ".jsonl":
            out[name] = [_plain(json.loads(line), root) for line in p.read_text().splitlines()]
        elif p.suffix in (".gif", ".png", ".txt", ".yaml"):
            out[name] = p.read_bytes()
    return out


def _same(a: dict[str, object], b: dict[str, object], where: str) -> None:
    assert sorted(a) == sorted(b), f"{where}: files differ: {sorted(set(a) ^ set(b))}"
    for name in a:
        x, y = a[name], b[name]
        if isinstance(x, dict) and name.endswith((".npz", ".h5")):
            assert sorted(x) == sorted(y), f"{where}/{name}: arrays differ: {sorted(set(x) ^ set(y))}"
            for k in x:
                same = np.array_equal(x[k], y[k]) if isinstance(x[k], np.ndarray) else x[k] == y[k]
                assert same, f"{where}/{name}: {k} differs after the kill and rerun"
        else:
            assert x == y, f"{where}/{name} differs after the kill and rerun"


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory) -> tuple[Path, dict[str, float], dict[str, Path]]:
    """The tiny pipeline's stages one by one, unbroken: (run, each stage's wall seconds, a copy of the run as it was
    before each stage)."""
    base = tmp_path_factory.mktemp("campaign")
    run = base / "unbroken"
    seconds: dict[str, float] = {}
    before: dict[str, Path] = {}
    for i, st in enumerate(STAGES):
        if i:
            before[st.verb] = base / f"before-{st.verb}"
            shutil.copytree(run, before[st.verb], symlinks=True)
        t0 = time.time()
        _finish(_stage(st.verb, run, first=i == 0), f"unbroken {st.verb}")
        seconds[st.verb] = time.time() - t0
    return run, seconds, before


@pytest.mark.parametrize("verb", [st.verb for st in STAGES])
def test_a_stage_killed_at_a_random_moment_reruns_to_the_unbroken_result(verb, unbroken, tmp_path):
    run0, seconds, before = unbroken
    run = tmp_path / "killed"
    if verb in before:
        shutil.copytree(before[verb], run, symlinks=True)
    rng = random.Random(f"{CAMPAIGN_SEED}/{verb}")
    fraction = rng.uniform(0.3, 0.9)
    for _ in range(5):
        proc = _stage(verb, run, first=verb not in before)
        try:
            rc = proc.wait(timeout=fraction * seconds[verb])
            assert rc == 0, f"{verb} failed before the kill (exit {rc}); see {run.parent / f'{run.name}-{verb}.log'}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the stage and every process it started, mid-way
            proc.wait()
            if not RunDir(run).is_done(verb):
                break
        # done before the moment (this machine was faster now), or killed after its DONE while it exited: again
        # from the same start, sooner
        shutil.rmtree(run)
        if verb in before:
            shutil.copytree(before[verb], run, symlinks=True)
        fraction *= 0.6
    else:
        pytest.fail(f"{verb} always finished before the kill (seed {CAMPAIGN_SEED}, last fraction {fraction:.2f})")
    print(f"{verb}: killed at {fraction:.2f} of its {seconds[verb]:.1f} s (WM_KILL_SEED={CAMPAIGN_SEED})")
    _finish(_stage(verb, run), f"{verb} rerun after the kill")
    folder = RunDir(run).stage_dir(verb)
    want, got = _contents(RunDir(run0).stage_dir(verb), run0), _contents(folder, run)
    _same(want, got, f"{verb} (seed {CAMPAIGN_SEED})")
