"""spawn_map: results, errors, a dying worker or failing initializer as one WMError (not a hang), early stop;
ProcessPool: the pool interface over it (ordered results, retries, a task given up as TaskFailed)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from wm.core.errors import WMError
from wm.core.procpool import ProcessPool, spawn_map


def _square(x: int) -> int:
    return x * x


def _fail_on_3(x: int) -> int:
    if x == 3:
        raise ValueError("three")
    return x


def _segfault_on_2(x: int) -> int:
    if x == 2:
        os.kill(os.getpid(), signal.SIGSEGV)  # what ViZDoom did when two games raced on ./_vizdoom/
    return x


def _bad_init() -> None:
    raise RuntimeError("no env here")


class _Marker:
    """A worker context whose close() writes <pid>.closed, as collect's worker context closes its env."""

    def __init__(self, folder: str):
        self.path = Path(folder) / f"{os.getpid()}.closed"

    def close(self) -> None:
        self.path.touch()


def _init_marker(folder: str) -> _Marker:
    return _Marker(folder)


def _task(ctx: _Marker, job: tuple[str, str]) -> str:
    """ "meet": wait until two workers are inside a "meet" task; "long": sleep 60 s. Leaves a file when finished."""
    folder, kind = Path(job[0]), job[1]
    if kind == "meet":
        (folder / f"{os.getpid()}.met").touch()
        while len(list(folder.glob("*.met"))) < 2:
            time.sleep(0.01)
    else:
        time.sleep(60)
    (folder / f"{kind}-{os.getpid()}.finished").touch()
    return kind


def test_results_in_any_order_and_errors_reraised():
    assert sorted(spawn_map(_square, range(7), 2, "test")) == [x * x for x in range(7)]
    with pytest.raises(ValueError, match="three"):
        list(spawn_map(_fail_on_3, range(6), 2, "test"))


@pytest.mark.timeout(120)
def test_dead_worker_is_one_error_not_a_hang():
    with pytest.raises(WMError, match=r"^collect: a worker process died .*rerun to resume$"):
        list(spawn_map(_segfault_on_2, range(5), 2, "collect"))


@pytest.mark.timeout(120)
def test_failing_initializer_is_one_error_not_a_respawn_loop():
    with pytest.raises(WMError, match="^evaluate: a worker process died"):
        list(spawn_map(_square, range(3), 2, "evaluate", _bad_init))


@pytest.mark.timeout(120)
def test_stopping_early_runs_the_workers_cleanups(tmp_path):
    jobs = [(str(tmp_path), k) for k in ("meet", "meet", "long", "long", "long")]
    it = spawn_map(_task, jobs, 2, "test", _init_marker, (str(tmp_path),))
    assert [next(it), next(it)] == ["meet", "meet"]  # both workers are up; now each starts a 60 s task
    it.close()  # stopped by SIGTERM, not waited for
    assert sorted(p.name.split("-")[0] for p in tmp_path.glob("*.finished")) == ["meet", "meet"]
    assert len(list(tmp_path.glob("*.closed"))) == 2  # both workers ran their cleanups


def _init_a_child_then_stall(folder: str) -> str:
    """The second worker to start spawns a child (as a Doom env spawns its game) and stalls with SIGTERM blocked, as
    a worker whose handler waits for the C call it is in (ViZDoom's init under load)."""
    import subprocess
    import time

    try:
        os.mkdir(os.path.join(folder, "quick"))  # the first worker starts at once
        return folder
    except FileExistsError:
        pass
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    with open(os.path.join(folder, ".child.pid"), "w") as f:
        f.write(str(child.pid))
    os.rename(os.path.join(folder, ".child.pid"), os.path.join(folder, "child.pid"))
    time.sleep(300)
    return folder


def _fail(folder: str, item: int) -> int:
    """Fails once the other worker is stalled with its child started."""
    end = time.monotonic() + 60
    while not os.path.exists(os.path.join(folder, "child.pid")) and time.monotonic() < end:
        time.sleep(0.05)
    raise RuntimeError("a write failed")


@pytest.mark.timeout(120)
def test_a_worker_killed_while_it_starts_takes_its_child_processes_along(tmp_path, monkeypatch):
    """A worker that does not exit on SIGTERM is killed after the grace, and the processes it started go with it: the
    game process of an env it was starting (which ignores SIGTERM) had outlived it, holding the stage's stdout."""
    from wm.core import procpool

    monkeypatch.setattr(procpool, "STOP_GRACE_S", 1.0)
    with pytest.raises(RuntimeError, match="a write failed"):
        for _ in spawn_map(_fail, [1, 2, 3, 4], 2, "test", _init_a_child_then_stall, (str(tmp_path),)):
            pass
    pid = int((tmp_path / "child.pid").read_text())
    time.sleep(0.2)
    try:  # a killed child not yet reaped shows as a zombie
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("Z", "X", "gone"), f"the stalled worker's child {pid} outlived it (state {state})"


# The parent script imports this module by name (tests/ on its sys.path): spawn_map's workers unpickle `_task` and
# `_init_marker` by module and name, and a function defined in the script's __main__ would not be found there.
_ORPHAN_PARENT = """
import sys
sys.path[:0] = {paths!r}
from test_procpool import _init_marker, _task
from wm.core.procpool import spawn_map
if __name__ == "__main__":
    jobs = [({folder!r}, k) for k in ("meet", "meet", "long", "long")]
    it = spawn_map(_task, jobs, 2, "test", _init_marker, ({folder!r},))
    next(it), next(it)
    print("running", flush=True)
    next(it)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_workers_of_a_killed_parent_clean_up_and_exit(tmp_path, sig):
    """A parent killed outright (no chance to stop its pool) leaves no worker behind holding an env."""
    import subprocess
    import sys

    script = tmp_path / "parent.py"
    paths = [str(Path(__file__).parent), str(Path(__file__).parents[1])]
    script.write_text(_ORPHAN_PARENT.format(paths=paths, folder=str(tmp_path)))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "running"  # both workers are inside 60 s tasks
    proc.send_signal(sig)
    proc.wait()
    while len(list(tmp_path.glob("*.closed"))) < 2:  # each worker ran its cleanups (the test's timeout guards)
        time.sleep(0.1)
    assert not list(tmp_path.glob("long-*.finished"))


def _square_ctx(ctx: int, x: int) -> int:
    return ctx * x * x


def _fail_once(ctx: str, x: int) -> int:
    """Raises the first time it sees x == 2 (a marker file remembers), then succeeds."""
    marker = Path(ctx) / "failed-once"
    if x == 2 and not marker.exists():
        marker.touch()
        raise ValueError("transient")
    if x == 4:
        raise ValueError("always")
    return x


def _ident(x):
    return x


@pytest.mark.timeout(120)
def test_process_pool_orders_results_retries_and_gives_up(tmp_path):
    from wm.mpi.pool import TaskFailed

    seen: list[int] = []
    with ProcessPool(_ident, (3,), workers=2) as pool:
        assert pool.map(_square_ctx, range(6), on_result=lambda i, r: seen.append(i)) == [3 * x * x for x in range(6)]
    assert sorted(seen) == list(range(6))
    out = ProcessPool(_ident, (str(tmp_path),), workers=2, retries=1).map(_fail_once, range(5))
    assert out[:4] == [0, 1, 2, 3]  # x == 2 failed once and was retried
    assert isinstance(out[4], TaskFailed) and "always" in out[4].error and out[4].attempts == 2
