"""`mpirun -n 3 python -m wm train-controller` with the toy fitness: same history as the serial run, faults
(a task raising once, a task hanging past the timeout) absorbed and logged, SIGTERM → checkpoint, every rank
gone, and the rerun resumes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import TIMING, tiny_cfg
from wm.core.bounded import read_jsonl
from wm.core.rundir import RunDir

pytestmark = pytest.mark.mpi

MPIRUN = str(Path(sys.executable).with_name("mpirun"))


def cmd(run: Path, *sets: str, ranks: int = 3) -> list[str]:
    base = [
        sys.executable,
        "-m",
        "wm",
        "train-controller",
        "--configs",
        "doom_takecover",
        "tiny",
        "--run",
        str(run),
        "--set",
        "es.fitness=toy",
        "es.chunk=2",
        "es.generations=3",
        "es.eval_every=2",
        *sets,
    ]
    return [MPIRUN, "-n", str(ranks), *base] if ranks > 1 else base


def history(run: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in read_jsonl(RunDir(run).metrics_path("train-controller"))]


def session_pids(sid: int) -> list[int]:
    out = subprocess.run(["ps", "-eo", "pid=,sid="], capture_output=True, text=True).stdout.split()
    return [int(p) for p, s in zip(out[::2], out[1::2], strict=True) if int(s) == sid]


@pytest.fixture(scope="module")
def serial(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("serial") / "run"
    subprocess.run(cmd(run, ranks=1), check=True, capture_output=True, timeout=120)
    return run


def test_three_ranks_match_the_serial_run(tmp_path, repo_root, serial):
    run = tmp_path / "mpi"
    p = subprocess.run(cmd(run), capture_output=True, text=True, timeout=120, cwd=repo_root)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "MPI pool: 2 worker ranks ready" in p.stdout
    assert history(run) == history(serial) and len(history(run)) == 3
    assert RunDir(run).is_done("train-controller")


def test_ranks_over_two_hosts_of_a_hostfile_match_the_serial_run(tmp_path, repo_root, serial):
    """A job whose hostfile names two hosts (this machine under two names, started with Hydra's fork launcher as a
    cluster's would start them over ssh), through the pipeline's launcher template: the same history as one process."""
    import socket

    hosts = tmp_path / "hosts"
    hosts.write_text(f"localhost:2\n{socket.gethostname()}:1\n")
    run = tmp_path / "two-hosts"
    argv = cmd(run, ranks=1)  # the python command; the launcher goes in front of it as the pipeline puts it
    from wm.core.launcher import Launcher

    launcher = Launcher.parse(f"{MPIRUN} -launcher fork -f {hosts} -n {{n}}")
    p = subprocess.run([*launcher.prefix(3), *argv], capture_output=True, text=True, timeout=120, cwd=repo_root)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "MPI pool: 2 worker ranks ready" in p.stdout
    assert history(run) == history(serial) and RunDir(run).is_done("train-controller")


def test_draws_and_the_real_pick_over_ranks_match_the_serial_run(tmp_path, repo_root):
    """Two draws then the pick: the worker ranks get a new context for the pick (`MPIPool.reinit`) and play the
    same episodes the serial run plays; the same checks, real results and best.npz."""
    import numpy as np

    sets = ("es.draws=2", "es.pick_real=3")
    runs = {n: tmp_path / f"r{n}" for n in (1, 3)}
    for n, run in runs.items():
        p = subprocess.run(cmd(run, *sets, ranks=n), capture_output=True, text=True, timeout=120, cwd=repo_root)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "MPI pool: 2 worker ranks ready with a new context" in p.stdout
    assert history(runs[3]) == history(runs[1]) and len(history(runs[3])) == 6
    files = sorted(p.name for p in (runs[1] / "controller" / "checks").iterdir())
    assert files == ["gen_0002.npz", "gen_0003.npz", "gen_0005.npz", "gen_0006.npz"]
    for name in [*files, "../best.npz"]:
        with np.load(runs[1] / "controller" / "checks" / name) as a, np.load(runs[3] / "controller" / "checks" / name) as b:
            assert a.files == b.files and "real" in a.files
            for k in a.files:
                np.testing.assert_array_equal(a[k], b[k])


def test_raising_and_hanging_tasks(tmp_path, repo_root, serial):
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "raise-1").write_text("")
    (faults / "hang-4").write_text("4")  # sleeps 4 s once; the timeout is 1 s
    run = tmp_path / "mpi"
    env = {**os.environ, "WM_TOY_FAULTS": str(faults)}
    p = subprocess.run(cmd(run, "es.task_timeout=1.0"), capture_output=True, text=True, timeout=120, cwd=repo_root, env=env)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    log = RunDir(run).log_path("train-controller").read_text()
    assert re.search(r"task 0 raised on rank \d \(attempt 1/3\): RuntimeError: injected fault for member 1 .*; retrying", log)
    assert re.search(r"task 2 on rank \d exceeded the 1 s timeout; re-dispatched to another rank", log)
    assert not list(faults.iterdir())
    assert history(run) == history(serial)  # the faults changed nothing but the time taken


def test_sigterm_checkpoints_stops_every_rank_and_resumes(tmp_path, repo_root):
    run = tmp_path / "mpi"
    proc = subprocess.Popen(
        cmd(run, "es.generations=100000", "es.eval_every=1000"),
        cwd=repo_root,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    metrics = RunDir(run).metrics_path("train-controller")
    deadline = time.time() + 60
    while time.time() < deadline and len(read_jsonl(metrics)) < 3:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)  # Hydra forwards it to every rank
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0
    deadline = time.time() + 10
    while session_pids(proc.pid) and time.time() < deadline:
        time.sleep(0.2)
    assert session_pids(proc.pid) == [], "orphan processes left"
    log = RunDir(run).log_path("train-controller").read_text()
    assert "stopped at generation" in log, out[-2000:]
    done = len(history(run))
    assert (run / "controller" / "es_state.npz").exists() and not RunDir(run).is_done("train-controller")

    p = subprocess.run(
        cmd(run, f"es.generations={done + 2}", "es.eval_every=1000"),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=repo_root,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert [r["es/generation"] for r in history(run)] == list(range(1, done + 3))


def test_backoff_grows_with_the_wait_and_stays_bounded(monkeypatch):
    from wm.mpi import pool

    clock, naps = [0.0], []
    monkeypatch.setattr(pool.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(pool.time, "sleep", lambda s: (naps.append(s), clock.__setitem__(0, clock[0] + s)))
    b = pool.Backoff(least=0.001, most=0.02, share=0.1)
    while clock[0] < 1.0:
        b.sleep()
    assert naps[0] == 0.001 and max(naps) == 0.02 and naps == sorted(naps)
    assert len(naps) < 100  # a 1 s wait: ~70 polls, not the 1000 of a fixed 1 ms
    b.reset()
    b.sleep()
    assert naps[-1] == 0.001  # a message starts the wait afresh


def test_stop_check_is_installed_and_restored():
    from wm.mpi import StopFlag, set_stop_check, should_stop
    from wm.mpi.pool import PROCESS

    before = PROCESS.stop_check
    try:
        set_stop_check(lambda: False)
        with StopFlag() as flag:
            assert not should_stop()
            flag.set()
            assert should_stop()
        assert not should_stop()
    finally:
        set_stop_check(before)


NAP = """
import json, sys, time
from wm.mpi import launched_rank
from wm.mpi.pool_mpi import MPIPool, serve

def nap(ctx, s):
    time.sleep(s)
    return s

if launched_rank() > 0:
    raise SystemExit(serve())
pool = MPIPool()
t0, c0 = time.monotonic(), time.process_time()
assert pool.map(nap, [2.0]) == [2.0]  # one rank sleeps, the other idles
print(json.dumps({"wall": time.monotonic() - t0, "cpu": time.process_time() - c0}))
pool.close()
"""


def test_the_master_does_not_burn_cpu_while_it_waits(tmp_path, repo_root):
    script = tmp_path / "nap.py"
    script.write_text(NAP)
    p = subprocess.run(
        [MPIRUN, "-n", "3", sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=repo_root,
        env={**os.environ, "PYTHONPATH": str(repo_root)},
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert 2.0 <= got["wall"] < 2.5  # the result is picked up promptly
    assert got["cpu"] < 0.03 * got["wall"], got  # polling every 1 ms took ~7 %


def test_a_refused_start_releases_the_workers(tmp_path, repo_root):
    """Rank 0 refuses the run (no M to dream in) before any pool exists: `release_workers` stops the waiting
    workers at once (they would otherwise give up only after WM_MPI_INIT_TIMEOUT)."""
    argv = [
        MPIRUN,
        "-n",
        "3",
        sys.executable,
        "-m",
        "wm",
        "train-controller",
        "--configs",
        "doom_takecover",
        "tiny",
        "--run",
        str(tmp_path / "run"),
    ]
    t0 = time.monotonic()
    p = subprocess.run(
        argv, capture_output=True, text=True, timeout=240, cwd=repo_root, env={**os.environ, "WM_MPI_INIT_TIMEOUT": "200"}
    )
    assert p.returncode == 2 and "run train-mdnrnn first" in p.stderr, p.stdout[-2000:] + p.stderr[-2000:]
    assert time.monotonic() - t0 < 100


def _run_wm(args: list[str], repo_root: Path, ranks: int = 1) -> subprocess.CompletedProcess:
    prefix = [MPIRUN, "-n", str(ranks)] if ranks > 1 else []
    p = subprocess.run(
        [*prefix, sys.executable, "-m", "wm", *args], cwd=repo_root, capture_output=True, text=True, timeout=600
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    return p


@pytest.mark.env
def test_collect_and_evaluate_over_three_ranks_equal_the_serial_runs(tmp_path, repo_root):
    """collect and evaluate spread over MPI ranks (rank 0 dispatches, ranks 1-2 play): the same episode files and the
    same scores as one process with its worker processes (before: both ran on one machine's processes only)."""
    from wm.data.episodes import list_episodes, read_episode

    sets = ["--set", "collect.episodes=6", "env.max_steps=120", "collect.workers=2"]
    runs = {n: tmp_path / f"r{n}" for n in (1, 3)}
    for n, run in runs.items():
        _run_wm(["collect", "--configs", "doom_takecover", "tiny", "--run", str(run), *sets], repo_root, ranks=n)
        _run_wm(["evaluate", "--run", str(run), "--random", "--episodes", "5", "--gifs", "0"], repo_root, ranks=n)
    serial, ranked = (list_episodes(runs[n] / "episodes") for n in (1, 3))
    assert [p.name for p in serial] == [p.name for p in ranked] == [f"ep_{i:06d}.npz" for i in range(6)]
    for a, b in zip(serial, ranked, strict=True):
        x, y = read_episode(a), read_episode(b)
        assert all(np.array_equal(x[k], y[k]) for k in x), a.name
    scores = [json.loads((runs[n] / "eval" / "random" / "episodes.jsonl").read_text().splitlines()[0]) for n in (1, 3)]
    assert scores[0] == scores[1]
    summaries = [json.loads((runs[n] / "eval" / "random" / "summary.json").read_text()) for n in (1, 3)]
    assert [s["mean"] for s in summaries] == [summaries[0]["mean"]] * 2 and summaries[0]["seeds"] == summaries[1]["seeds"]
    assert RunDir(runs[3]).done_info("collect")["collect/workers"] == 2  # the two playing ranks


@pytest.mark.env
def test_round_controls_real_check_over_three_ranks_equals_the_serial_one(tmp_path, repo_root, monkeypatch):
    """Round control's checks run `evaluate` under the pipeline's `--mpi` ranks (`control.checks_over`): the random
    policy's check (`eval/check-random`, round control's yardstick) over `mpirun -n 3` plays the same episodes, to the
    step, as the one process of `--mpi 1`."""
    from wm.rounds import control

    monkeypatch.chdir(repo_root)
    cfg = tiny_cfg("iterate.check_episodes=4", "env.max_steps=120", "iterate.target_ratio=2")
    runs = {n: RunDir(tmp_path / f"r{n}") for n in (1, 3)}
    means = {}
    for n, run in runs.items():
        run.bind_config(cfg, None)
        with control.checks_over(n):
            means[n] = control.random_check(run, cfg)
    episodes = [(runs[n].path / "eval" / "check-random" / "episodes.jsonl").read_text() for n in (1, 3)]
    assert len(episodes[0].splitlines()) == 4 and episodes[0] == episodes[1]
    assert means[1] == means[3] == json.loads(runs[3].eval_summary("check-random").read_text())["mean"]
    log = runs[3].log_path("evaluate").read_text()
    assert "MPI pool: 2 worker ranks ready" in log and "MPI pool" not in runs[1].log_path("evaluate").read_text()
