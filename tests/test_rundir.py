"""Run directory: conflicting reruns, atomic writes, sentinels, status."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.helpers import tiny_cfg
from wm.core import config as C
from wm.core import runlock as RL
from wm.core.atomic import atomic_path, atomic_savez, atomic_write_json
from wm.core.bounded import read_jsonl
from wm.core.errors import WMError
from wm.core.rundir import RunDir


def test_config_written_at_creation_and_conflicts_refused(tmp_path):
    run = RunDir(tmp_path / "r")
    cfg = tiny_cfg()
    run.bind_config(cfg, "collect")
    assert C.Config(__import__("yaml").safe_load(run.config_path.read_text())).to_dict() == cfg.to_dict()
    (run.stage_dir("collect")).mkdir()
    (run.stage_dir("collect") / "ep_000000.npz").write_bytes(b"x")  # collect has started
    # train-vae may change its own section …
    cfg2 = C.update(cfg, {"vae": {"epochs": 5}})
    assert run.bind_config(cfg2, "train-vae").vae.epochs == 5
    assert run.load_config().vae.epochs == 5
    # … but not collect's (started upstream) or env (global)
    with pytest.raises(WMError, match=r"collect.episodes: 12 -> 99"):
        run.bind_config(C.update(cfg2, {"collect": {"episodes": 99}}), "train-vae")
    with pytest.raises(WMError, match=r"env.max_steps"):
        run.bind_config(C.update(cfg2, {"env": {"max_steps": 10}}), "train-vae")
    # a stage that has not started may still be reconfigured from an upstream command
    assert run.bind_config(C.update(cfg2, {"es": {"popsize": 4}}), "train-vae").es.popsize == 4
    assert run.load_config().collect.episodes == 12  # refused commands changed nothing
    # a key that a later version added to base.yaml is not a conflict for an existing run
    stored = run.load_config().to_dict()
    del stored["env"]["frame_size"]
    run.config_path.write_text(__import__("yaml").safe_dump(stored))
    assert run.bind_config(cfg2, "evaluate").env.frame_size == cfg2.env.frame_size


def test_atomic_write_survives_a_crash(tmp_path):
    target = tmp_path / "a.json"
    atomic_write_json(target, {"v": 1})
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text('{"v": 2, "half')  # crash mid-write
            raise RuntimeError("boom")
    assert json.loads(target.read_text()) == {"v": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]  # no temp file left behind


def test_atomic_write_killed_process_leaves_no_half_file(tmp_path):
    # A process killed while writing (SIGKILL, no cleanup) must leave the target absent, not half-written.
    target = tmp_path / "big.npz"
    code = (
        "import os, signal, numpy as np\n"
        "from wm.core.atomic import atomic_path\n"
        f"with atomic_path({str(target)!r}) as tmp:\n"
        "    f = open(tmp, 'wb'); f.write(b'PK' * 1000); f.flush()\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(os.path.dirname(__file__)))
    assert not target.exists()
    assert all(p.name.startswith(".tmp-") for p in tmp_path.iterdir())  # readers ignore .tmp-*


def test_savez_roundtrip(tmp_path):
    atomic_savez(tmp_path / "x.npz", a=np.arange(3))
    assert np.load(tmp_path / "x.npz")["a"].tolist() == [0, 1, 2]


def test_states_and_lock(tmp_path):
    run = RunDir(tmp_path)
    assert run.state("collect") == "not started"
    run.stage_dir("collect").mkdir()
    (run.stage_dir("collect") / "ep_000000.npz").write_bytes(b"x")
    assert run.state("collect") == "resumable"
    with run.lock("collect"):
        assert run.state("collect") == "running"
    assert run.state("collect") == "resumable"
    run.mark_done("collect", {"episodes": 1})
    assert run.state("collect") == "done"
    # a stale lock of a dead process is not "running"
    atomic_write_json(run.stage_dir("train-vae") / "LOCK", {"pid": 2**22 + 12345, "host": os.uname().nodename})
    assert run.state("train-vae") == "resumable"


def test_read_jsonl_ignores_torn_line(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"step": 1}\n{"step": 2}\n{"step": ')
    assert [r["step"] for r in read_jsonl(p)] == [1, 2]


def test_stored_config_gets_the_defaults_of_keys_added_since(tmp_path):
    """A run made before a key existed (here: all but run.seed) loads with the key's default, so newer code can
    resume or evaluate it; a stored key base.yaml no longer has is named, with the file."""
    from wm.core.config import defaults
    from wm.core.errors import WMError

    run = RunDir(tmp_path / "old")
    run.path.mkdir()
    run.config_path.write_text("run:\n  seed: 3\nmdnrnn:\n  hidden: 64\n")
    cfg = run.load_config()
    assert cfg.run.seed == 3 and cfg.mdnrnn.hidden == 64
    assert cfg.mdnrnn.dropout == defaults().mdnrnn.dropout and cfg.vae.jit_compile == defaults().vae.jit_compile
    run.config_path.write_text("mdnrnn:\n  hidden: 64\n  retired_knob: 1\n")
    with pytest.raises(WMError, match=r"unknown config key 'mdnrnn.retired_knob' in .*config.yaml"):
        run.load_config()


def _foreign_lock(run: RunDir, verb: str, age: float) -> None:
    """A LOCK written by a job on another host, last refreshed `age` seconds ago."""
    lock = run.stage_dir(verb) / "LOCK"
    atomic_write_json(lock, {"pid": 4242, "host": "node17", "started": time.time() - age - 60})
    os.utime(lock, (time.time() - age, time.time() - age))


def test_a_fresh_lock_from_another_host_is_held_naming_host_and_pid(tmp_path):
    run = RunDir(tmp_path)
    _foreign_lock(run, "collect", age=5)
    assert run.state("collect") == "running" and run.lock_info("collect").host == "node17"
    with pytest.raises(
        WMError,
        match=r"already running in this run dir \(pid 4242 on node17, since .*, refreshed 5 s ago\);"
        r" if that job is gone, its LOCK is stale after 600 s without a refresh, or rerun with --break-lock",
    ):
        with run.lock("collect"):
            pass
    assert json.loads((run.stage_dir("collect") / "LOCK").read_text())["host"] == "node17"  # untouched


def test_taking_a_foreign_lock_over_reads_its_age_on_the_file_servers_clock(tmp_path, monkeypatch):
    """This host's clock an hour ahead of the file server's: another host's LOCK refreshed just now still holds (its
    age is measured against a file written beside it, not against this clock), and the refusal writes nothing."""
    run = RunDir(tmp_path)
    _foreign_lock(run, "collect", age=5)
    before = sorted(p.name for p in run.stage_dir("collect").iterdir())
    ahead = time.time() + 3600
    monkeypatch.setattr(RL.time, "time", lambda: ahead)
    assert run.state("collect") == "resumable"  # a reader, on this host's clock, thinks it stale
    with pytest.raises(WMError, match=r"already running in this run dir \(pid 4242 on node17"):
        with run.lock("collect"):
            pass
    assert sorted(p.name for p in run.stage_dir("collect").iterdir()) == before  # no temporary left
    assert json.loads((run.stage_dir("collect") / "LOCK").read_text())["host"] == "node17"


def test_a_stale_or_broken_lock_from_another_host_is_taken_over_in_one_line(tmp_path, capsys):
    import socket

    run = RunDir(tmp_path)
    _foreign_lock(run, "collect", age=RL.LOCK_STALE_S + 1)  # before: a LOCK from another host held for good
    assert run.state("collect") == "resumable"  # its folder holds the stale LOCK
    with run.lock("collect"):
        assert run.lock_info("collect").host == socket.gethostname() and run.state("collect") == "running"
    err = capsys.readouterr().err
    assert re.fullmatch(
        r"collect: took over the LOCK of pid 4242 on node17, since [-\d: ]+, refreshed \d+ s ago: stale\n", err
    )
    _foreign_lock(run, "train-vae", age=5)
    with run.lock("train-vae", break_lock=True):
        assert run.lock_owner("train-vae") == os.getpid()
    assert capsys.readouterr().err.endswith(": broken by --break-lock\n")
    assert not (run.stage_dir("train-vae") / "LOCK").exists()


def test_a_held_lock_is_refreshed_while_its_stage_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(RL, "LOCK_REFRESH_S", 0.05)
    run = RunDir(tmp_path)
    with run.lock("collect"):
        lock = run.stage_dir("collect") / "LOCK"
        first = json.loads(lock.read_text())
        os.utime(lock, (time.time() - 1000, time.time() - 1000))  # as if long unrefreshed
        deadline = time.time() + 10
        while time.time() - lock.stat().st_mtime > 100 and time.time() < deadline:
            time.sleep(0.02)
        assert time.time() - lock.stat().st_mtime < 100  # rewritten
        assert json.loads(lock.read_text()) == first  # the same owner and start time
    assert not lock.exists() and not list(run.stage_dir("collect").glob(".tmp-LOCK-*"))


def test_break_lock_on_the_command_line_takes_over_a_fresh_foreign_lock(tiny_run, capsys):
    from wm import cli

    run = tiny_run
    _foreign_lock(run, "train-vae", age=5)
    assert cli.main(["train-vae", "--run", str(run.path)]) == 2
    assert "(pid 4242 on node17, since" in capsys.readouterr().err
    # taken over at once, then refused for what it lacks (no episodes): the refusal leaves no LOCK of its own
    assert cli.main(["train-vae", "--run", str(run.path), "--break-lock"]) == 2
    err = capsys.readouterr().err
    assert "took over the LOCK of pid 4242 on node17" in err and "broken by --break-lock" in err
