"""What the TUI's pilot tests share (tests/test_tui*.py): the fixture run, the app on it with a fake stage command,
and reading the run screen's stage table."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from wm.tui.app import WMApp
from wm.tui.screens.run import RunScreen

from tests.helpers import tiny_cfg
from wm.core import config as C
from wm.core.rundir import RunDir

FIXTURES = Path(__file__).parent / "fixtures"
FAKE = [sys.executable, str(FIXTURES / "fake_stage.py")]


async def wait_until(pilot, cond, timeout: float = 15.0) -> None:
    """Pause the app until `cond()` holds (polling; no wall-clock assertion, just a generous cap)."""
    for _ in range(int(timeout / 0.05)):
        if cond():
            return
        await pilot.pause(0.05)
    raise AssertionError("condition not reached")


def make_run(tmp_path: Path) -> RunDir:
    """collect done (3 episodes), train-vae resumable (a checkpoint and 2 metrics records), the rest not started."""
    run = RunDir(tmp_path / "runs" / "demo")
    run.path.mkdir(parents=True)
    run.config_path.write_text(tiny_cfg().to_yaml())
    eps = run.stage_dir("collect")
    eps.mkdir()
    for i in range(3):
        (eps / f"ep_{i:06d}.npz").write_bytes(b"")  # the ep_NNNNNN.npz names collect writes
    run.mark_done("collect", {"episodes": 3})
    run.log_path("collect").parent.mkdir()
    run.log_path("collect").write_text(
        "2025-01-01 00:00:00 INFO collected episode 0\n2025-01-01 00:00:01 INFO collect finished\n"
    )
    run.stage_dir("train-vae").mkdir()
    (run.stage_dir("train-vae") / "ckpt.weights.h5").write_bytes(b"x")
    run.metrics_path("train-vae").parent.mkdir()
    with open(run.metrics_path("train-vae"), "w") as f:
        for step, loss in ((10, 50.0), (20, 40.0)):
            f.write(json.dumps({"step": step, "time": 0.0, "vae/loss": loss, "vae/frames_per_s": 300.0}) + "\n")
    return run


def app_for(run: RunDir, **kw) -> WMApp:
    env = dict(os.environ, FAKE_LINES=kw.pop("lines", "5"), FAKE_DELAY=kw.pop("delay", "0.05"), **kw.pop("env", {}))
    return WMApp(run.path, python=FAKE, poll_interval=0.1, env=env, **kw)


def screen(app: WMApp) -> RunScreen:
    assert isinstance(app.screen, RunScreen), app.screen
    return app.screen


def cells(app: WMApp, verb: str) -> list[str]:
    return [str(c) for c in screen(app).query_one("#stages").get_row(verb)]


def rounds_cfg():
    return C.update(tiny_cfg(), {"iterate.check_episodes": 3, "iterate.final_check": 2}, source="t")
