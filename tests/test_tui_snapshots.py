"""SVG snapshots of the TUI's main screens (pytest-textual-snapshot's `snap_compare`; the SVGs are committed under
tests/__snapshots__/test_tui_snapshots/). After a deliberate change to what a screen shows, look at the failing
test's diff (snapshot_report.html) and accept it with `pytest tests/test_tui_snapshots.py --snapshot-update`
(docs/contributing.md).

What would vary from machine to machine or run to run is pinned: the run is opened by a relative path from a
chdir to tmp_path (no tmp path on screen), stage commands show a plain `python` (not this venv's interpreter), the
pipeline form's default --mpi is computed for 4 cores, and the form's input cursors do not blink. The rest of what
they show comes from the fixture run of tests/pilot.py (make_run), whose files carry fixed timestamps.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import pytest_textual_snapshot
from pilot import app_for, cells, make_run, rounds_cfg, screen, wait_until
from textual.widgets import Input
from wm.tui.process import default_ranks
from wm.tui.screens import run_actions as run_screen
from wm.tui.screens.launch import LaunchScreen

from wm.core.atomic import atomic_write_json
from wm.core.rundir import RunDir
from wm.rounds.iterate import PassCheck
from wm.rounds.record import write_rounds

# pytest-textual-snapshot 1.0.0 names its SVG files by `_file_extension`, which syrupy >= 5 (the first for pytest 9)
# reads as `file_extension`: without this they would be stored as .raw (same content).
pytest_textual_snapshot.SVGImageExtension.file_extension = "svg"

BIG = (120, 36)
SMALL = (80, 24)


@pytest.fixture
def run(tmp_path, monkeypatch) -> RunDir:
    """make_run's run (collect done, train-vae resumable), seen as `runs/demo` from tmp_path."""
    make_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run_screen, "default_ranks", lambda cfg: default_ranks(cfg, cores=4))
    return RunDir(Path("runs") / "demo")


def finish(run: RunDir) -> None:
    """Every stage done, each with its key figures (read from files and from the last metrics record)."""
    records = {
        "train-vae": {"step": 30, "vae/epoch": 1, "vae/loss": 38.25, "vae/val_loss": 39.5},
        "encode": {"step": 3, "encode/episodes": 3},
        "train-mdnrnn": {"step": 200, "mdnrnn/step": 200, "mdnrnn/nll": 1.125, "mdnrnn/done_loss": 0.0625},
        "train-controller": {"step": 4, "es/generation": 4, "es/mean": 210.5, "es/best": 402.0, "es/eval_best": 380.0},
    }
    for verb, rec in records.items():
        run.metrics_path(verb).parent.mkdir(exist_ok=True)
        with open(run.metrics_path(verb), "a") as f:
            f.write(json.dumps(rec) + "\n")
    run.series_dir.mkdir(parents=True)
    for i in range(3):
        (run.series_dir / f"ep_{i:06d}.npz").write_bytes(b"")
    run.eval_summary().parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(run.eval_summary(), {"episodes": 10, "mean": 355.5, "std": 41.25})
    for verb in ("train-vae", "encode", "train-mdnrnn", "train-controller", "evaluate"):
        run.stage_dir(verb).mkdir(exist_ok=True)
        run.mark_done(verb, {"pick/generation": 4, "pick/real": 371.0} if verb == "train-controller" else {})


def snap_app(run: RunDir):
    """The app of tests/pilot.py (app_for) on `run`, its stage commands shown as `python -m wm ...`."""
    app = app_for(run)
    app.python = ["python"]
    return app


async def polled(pilot) -> None:
    """Wait for the poll worker's first snapshot (the stage table's states)."""
    await wait_until(pilot, lambda: cells(pilot.app, "evaluate")[2] != "")
    await wait_until(pilot, lambda: any("collect finished" in ln for ln in screen(pilot.app).query_one("#output-log").lines))


async def polled_whole(pilot) -> None:
    """`polled`, then the finished run's figures drawn whole: DataTable widens the figures column on a later refresh,
    so under load a snapshot could catch the new text cut at the old width."""
    await polled(pilot)
    await wait_until(pilot, lambda: "val_loss" in pilot.app.export_screenshot())


def test_run_screen_stage_table(run, snap_compare):
    finish(run)
    assert snap_compare(snap_app(run), terminal_size=BIG, run_before=polled_whole)


def test_run_screen_stage_table_80x24(run, snap_compare):
    """The smallest terminal the layout is made for: the footer's keys fit in 80 columns."""
    finish(run)
    assert snap_compare(snap_app(run), terminal_size=SMALL, run_before=polled_whole)


def test_rounds_view(run, snap_compare):
    """R over a run with rounds.json (the passes of tests/test_tui.py's rounds test, stopped)."""
    (run.path / "round1").mkdir()
    write_rounds(
        run,
        rounds_cfg(),
        [
            PassCheck("first pass", str(run.path), real=300.0, dream=900.0, final=310.0, final_episodes=2),
            PassCheck("round1", str(run.path / "round1"), real=500.0, dream=520.0, final=480.5, final_episodes=2),
        ],
        "no better pass in 1 round",
        random=120.0,
    )

    async def rounds(pilot) -> None:
        await polled(pilot)
        await wait_until(pilot, lambda: screen(pilot.app).rounds is not None)
        await pilot.press("R")
        await wait_until(pilot, lambda: screen(pilot.app).query_one("#panes").active == "rounds")

    assert snap_compare(snap_app(run), terminal_size=BIG, run_before=rounds)


def test_pipeline_launch_form(run, snap_compare):
    """P: the pipeline's launch form (blocks, --set, --mpi, the resolved config and the command)."""

    async def form(pilot) -> None:
        await polled(pilot)
        await pilot.press("P")
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, LaunchScreen))
        for field in pilot.app.screen.query(Input):
            field.cursor_blink = False

    assert snap_compare(snap_app(run), terminal_size=BIG, run_before=form)
