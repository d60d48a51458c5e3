"""The terminal UI against a fixture run directory and a fake stage command (App.run_test + Pilot).

pytest-asyncio/anyio are not installed, so each test drives its coroutine with `asyncio.run`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pilot import FAKE, FIXTURES, app_for, cells, make_run, rounds_cfg, screen, wait_until
from wm.tui.app import WMApp
from wm.tui.model import MetricsTail, Series, config_excerpt, find_runs, read_rounds, run_labels
from wm.tui.process import MAX_RANKS, build_command, default_ranks, pipeline_command
from wm.tui.screens.dialogs import ConfirmScreen, QuitScreen
from wm.tui.screens.launch import LaunchRequest, LaunchScreen
from wm.tui.screens.picker import PickerScreen
from wm.tui.screens.run import RunScreen
from wm.tui.screens.tools import ToolsScreen
from wm.tui.widgets.plot import LinePlot, braille

from tests.helpers import tiny_cfg
from wm.core import config as C
from wm.core.atomic import atomic_write_json
from wm.core.launcher import Launcher, add_launcher_args, from_args
from wm.core.registry import STAGES
from wm.core.rundir import RunDir
from wm.rounds.iterate import PassCheck
from wm.rounds.record import write_rounds
from wm.tools import status

SIZE = (80, 24)


# A fake stage that runs until it is stopped: a line (and a metrics record) every 0.25 s. Each line redraws the log
# and the plots, so at 20 lines a second the app under the pilot took most of a core (these four tests: 28.5 s of CPU
# in 40 s, 15–19 s in 21–26 s at this pace).
RUNS_ON = {"lines": "100000", "delay": "0.25"}


def screen_lines(app: WMApp) -> list[str]:
    """The text of each line of the terminal as the app draws it now (the active screen's compositor)."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie child of ours counts as gone once reaped; check /proc state
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_stage_statuses_and_key_figures(tmp_path):
    run = make_run(tmp_path)

    async def main():
        app = app_for(run)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            await wait_until(pilot, lambda: cells(app, "collect")[2] != "")  # the poll worker's first snapshot
            assert cells(app, "collect")[1:3] == ["collect", "done"]
            assert "episodes 3" in cells(app, "collect")[3]
            assert cells(app, "train-vae")[2] == "resumable"
            assert "loss 40" in cells(app, "train-vae")[3]
            assert [cells(app, v)[2] for v in ("encode", "train-mdnrnn", "train-controller", "evaluate")] == [
                "not started"
            ] * 4
            # a live LOCK makes a stage "running" on the next poll
            lock = run.stage_dir("encode") / "LOCK"
            lock.parent.mkdir()
            lock.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
            await wait_until(pilot, lambda: cells(app, "encode")[2] == "running")
            # earlier stage's log file is viewable
            await pilot.press("g")
            await wait_until(pilot, lambda: "collect finished" in "\n".join(screen(app).query_one("#file-log").lines))

    asyncio.run(main())


def test_key_figures_column_grows_to_its_figures(tmp_path):
    """The key figures column is as wide as its longest figures, not its header: at 80 columns a done evaluate's
    whole score shows on its row, and train-vae's losses on theirs."""
    run = make_run(tmp_path)
    with open(run.metrics_path("train-vae"), "a") as f:
        f.write(json.dumps({"step": 30, "vae/epoch": 1, "vae/loss": 38.25, "vae/val_loss": 39.5}) + "\n")
    run.stage_dir("train-vae").joinpath("ckpt.weights.h5").unlink()
    run.mark_done("train-vae", {})
    run.eval_summary().parent.mkdir(parents=True, exist_ok=True)  # the evaluate stage's folder
    atomic_write_json(run.eval_summary(), {"episodes": 10, "mean": 209.0, "std": 62.19})
    run.mark_done("evaluate", {})

    async def main():
        app = app_for(run)
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: cells(app, "evaluate")[2] == "done")
            shown = {verb: cells(app, verb)[3] for verb in ("evaluate", "train-vae")}
            assert "mean 209" in shown["evaluate"] and "std 62.19" in shown["evaluate"], shown
            assert "val_loss 39.5" in shown["train-vae"], shown

            def row(verb: str) -> str:
                return next(ln for ln in screen_lines(app) if f" {verb} " in ln)

            await wait_until(pilot, lambda: all(figs in row(verb) for verb, figs in shown.items()))
            assert "key figures" in next(ln for ln in screen_lines(app) if " stage " in ln)

    asyncio.run(main())


def test_footer_fits_80_columns(tmp_path):
    """At 80x24 every key the footer shows fits, esc/q/? among them; it shows the keys that act on the selected
    stage (r for a resumable one, s for a running one, not l then); S while the pipeline runs is checked by
    test_pipeline_launch_form_runs_streams_and_stops."""
    run = make_run(tmp_path)

    async def main():
        app = app_for(run)
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: cells(app, "train-vae")[2] == "resumable")
            # the footer is drawn after the table: under load a fixed pause saw it still blank
            await wait_until(pilot, lambda: "q Quit" in screen_lines(app)[-1])

            def footer() -> str:
                text = screen_lines(app)[-1]
                assert "q Quit" in text and "? Help" in text, text
                keys = list(screen(app).query("FooterKey"))
                assert keys and all(k.region.right <= SIZE[0] for k in keys), [(str(k.render()), k.region) for k in keys]
                return text

            text = footer()  # collect (done) selected
            for label in ("l Launch", "P Pipeline", "p Play", "esc Runs"):
                assert label in text, text
            assert "Resume" not in text and "Stop" not in text, text
            await pilot.press("down")  # train-vae: resumable
            await wait_until(pilot, lambda: "r Resume" in screen_lines(app)[-1])
            text = footer()
            assert "l Launch" in text, text
            # a running stage: s, not l or r
            lock = run.stage_dir("train-vae") / "LOCK"
            lock.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
            await wait_until(pilot, lambda: "s Stop" in screen_lines(app)[-1])
            text = footer()
            assert "Launch" not in text and "Resume" not in text, text
            await pilot.press("l", "r")  # hidden keys do nothing
            await pilot.pause(0.2)
            assert isinstance(app.screen, RunScreen)

    asyncio.run(main())


def test_launch_streams_output_and_finishes(tmp_path):
    run = make_run(tmp_path)

    async def main():
        app = app_for(run)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("down", "down")  # encode
            await wait_until(pilot, lambda: screen(app).verb == "encode")
            await pilot.press("l")
            await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen))
            app.screen.query_one("#sets").value = "encode.initial_z=5"
            await pilot.press("enter")
            await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
            await wait_until(pilot, lambda: app.process(run.path, "encode") is not None)  # the app got the Launch message
            proc = app.process(run.path, "encode")
            assert proc is not None
            assert proc.argv == [*FAKE, "-m", "wm", "encode", "--run", str(run.path), "--set", "encode.initial_z=5"]
            log = screen(app).query_one("#output-log")
            await wait_until(pilot, lambda: "fake done" in log.lines)
            assert [ln for ln in log.lines if ln.startswith("fake encode line")] == [f"fake encode line {i}" for i in range(5)]
            assert await proc.wait(10) == 0
            await wait_until(pilot, lambda: cells(app, "encode")[2] == "resumable")  # started, no DONE
            assert (run.path / "logs" / "encode.console").read_text().count("fake encode line") == 5

    asyncio.run(main())


def test_stop_kills_process_group(tmp_path):
    run = make_run(tmp_path)
    child_file = tmp_path / "child.pid"

    async def main():
        app = app_for(run, **RUNS_ON, env={"FAKE_CHILD": str(child_file)})
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("down", "down", "l")  # encode
            await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen))
            await pilot.press("ctrl+l")
            await wait_until(pilot, lambda: app.process(run.path, "encode") is not None)
            proc = app.process(run.path, "encode")
            log = screen(app).query_one("#output-log")
            await wait_until(pilot, lambda: "fake encode line 2" in log.lines and child_file.exists())
            await wait_until(pilot, lambda: cells(app, "encode")[2] == "running" and cells(app, "encode")[0] == "▶")
            child = int(child_file.read_text())
            await pilot.press("s")  # asks first: no keeps it running
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("n")
            await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
            await pilot.pause(0.3)
            assert proc.running and not proc.stopping
            await pilot.press("s")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("y")  # yes: SIGTERM to the group
            assert await proc.wait(10) == 143
            await wait_until(pilot, lambda: "checkpoint saved" in log.lines)
            assert gone(proc.pid)
            await wait_until(pilot, lambda: gone(child), timeout=5)  # the grandchild got SIGTERM too
            await wait_until(pilot, lambda: cells(app, "encode")[2].startswith("resumable"))  # started, not done

    asyncio.run(main())


def test_metrics_plot_and_table_follow_the_jsonl(tmp_path):
    run = make_run(tmp_path)

    async def main():
        app = app_for(run)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("down", "m")
            await wait_until(pilot, lambda: screen(app).verb == "train-vae")
            plot = screen(app).query_one("#plot", LinePlot)
            await wait_until(pilot, lambda: dict(plot.series).get("loss") == [(10.0, 50.0), (20.0, 40.0)])
            with open(run.metrics_path("train-vae"), "a") as f:
                f.write(json.dumps({"step": 30, "time": 0.0, "vae/loss": 35.5, "vae/frames_per_s": 310.0}) + "\n")
                f.write('{"step": 40, "vae/lo')  # torn line: waits for its end
            await wait_until(pilot, lambda: len(dict(plot.series)["loss"]) == 3)
            assert dict(plot.series)["loss"][-1] == (30.0, 35.5)
            latest = screen(app).query_one("#latest")
            rows = {str(latest.get_row_at(i)[0]): str(latest.get_row_at(i)[1]) for i in range(latest.row_count)}
            assert rows["loss"] == "35.5" and rows["frames_per_s"] == "310" and rows["step"] == "30"
            with open(run.metrics_path("train-vae"), "a") as f:
                f.write('ss": 30.25}\n')
            await wait_until(pilot, lambda: dict(plot.series)["loss"][-1] == (40.0, 30.25))
            assert screen(app).query_one("#rate").data == [300.0, 300.0, 310.0]
            rendered = "".join(str(seg.text) for seg in plot.render_lines(plot.region.reset_offset)[0])
            assert "loss 30.25" in rendered  # the legend shows the latest value

    asyncio.run(main())


def test_mpi_ranks_build_the_mpirun_command(tmp_path):
    run = make_run(tmp_path)
    fake_mpirun = str(FIXTURES / "fake_mpirun.py")

    async def main():
        app = app_for(run, launcher=Launcher("mpirun", fake_mpirun))
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("down", "down", "down", "down")
            await wait_until(pilot, lambda: screen(app).verb == "train-controller")
            await pilot.press("l")
            await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen))
            form = app.screen
            form.query_one("#ranks").value = "3"
            form.query_one("#sets").value = "es.popsize=8"
            await pilot.pause()
            assert "mpirun.py -n 3" in str(form.query_one("#command").render())
            await pilot.press("ctrl+l")
            await wait_until(pilot, lambda: app.process(run.path, "train-controller") is not None)
            proc = app.process(run.path, "train-controller")
            assert proc.argv == [
                fake_mpirun,
                "-n",
                "3",
                *FAKE,
                "-m",
                "wm",
                "train-controller",
                "--run",
                str(run.path),
                "--set",
                "es.popsize=8",
            ]
            log = screen(app).query_one("#output-log")
            await wait_until(pilot, lambda: any(ln.startswith("mpirun argv: -n 3") for ln in log.lines))

    asyncio.run(main())
    assert build_command(
        "train-controller", "runs/x", ["tiny"], ranks=3, python=["py"], launcher=Launcher(program="mpirun")
    ) == [
        "mpirun",
        "-n",
        "3",
        "py",
        "-m",
        "wm",
        "train-controller",
        "--run",
        "runs/x",
        "--configs",
        "tiny",
    ]
    assert build_command("collect", "runs/x", python=["py"]) == ["py", "-m", "wm", "collect", "--run", "runs/x"]
    with pytest.raises(ValueError):
        build_command("train-vae", "runs/x", ranks=2)


def test_a_stage_config_excerpt_shows_the_blocks_its_input_holds():
    """The Config pane and the launch form show what the stage receives (its own sections, `Stage.uses`, `run` and
    `env`), in that order, and no other block: train-vae reads `data`, not `mdnrnn`."""
    cfg = tiny_cfg()
    for rec in STAGES:
        shown = [line[:-1] for line in config_excerpt(cfg, rec.verb).splitlines() if line and line[0] != " "]
        assert shown == [*rec.sections, *rec.uses, "run", "env"], rec.verb
    text = config_excerpt(cfg, "train-vae")
    assert "data:" in text and "mdnrnn:" not in text


def test_form_shows_resolved_config_and_wrong_key_error(tmp_path):
    run = make_run(tmp_path)

    async def main():
        app = app_for(run)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("down")
            await wait_until(pilot, lambda: screen(app).verb == "train-vae")
            await wait_until(pilot, lambda: cells(app, "train-vae")[2] == "resumable")  # states read
            await pilot.press("r")  # train-vae is resumable: the form offers Resume
            await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen))
            form = app.screen
            assert form.resume and "Resume" in str(form.query_one("#go").label)
            assert "batch_size: 50" in str(form.query_one("#resolved").render())  # tiny's vae.batch_size, stored
            form.query_one("#sets").value = "vae.batch_size=64"
            await pilot.pause()
            assert "batch_size: 64" in str(form.query_one("#resolved").render())
            form.query_one("#sets").value = "vae.epoch=3"
            await pilot.pause()
            assert form.query_one("#go").disabled
            assert "unknown config key 'vae.epoch'" in str(form.query_one("#launch-error").render())
            form.query_one("#sets").value = "vae.epochs=[1]"  # brackets in the message are shown, not parsed as markup
            await pilot.pause()
            assert "value [1] is not of type int" in str(form.query_one("#launch-error").render())
            await pilot.press("enter")  # refused: still on the form, nothing launched
            assert isinstance(app.screen, LaunchScreen) and app.process(run.path, "train-vae") is None
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
            await pilot.press("up", "r")  # collect is done: nothing to resume
            await pilot.pause()
            assert isinstance(app.screen, RunScreen)

    asyncio.run(main())


def test_quit_asks_and_can_leave_stage_running(tmp_path):
    run = make_run(tmp_path)

    async def main():
        app = app_for(run, **RUNS_ON)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("down", "down", "l")  # encode
            await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen))
            await pilot.press("ctrl+l")
            await wait_until(pilot, lambda: app.process(run.path, "encode") is not None)
            await pilot.press("q")
            await wait_until(pilot, lambda: isinstance(app.screen, QuitScreen))
            await pilot.press("escape")  # cancel: stay
            await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
            await pilot.press("q")
            await wait_until(pilot, lambda: isinstance(app.screen, QuitScreen))
            await pilot.press("l")  # leave running
        return app.process(run.path, "encode")

    proc = asyncio.run(main())
    try:
        assert proc.running  # outlived the UI

        # a second UI session sees it as running (LOCK) and stops it through the LOCK owner's process group
        async def again():
            app = app_for(run)
            async with app.run_test(size=SIZE) as pilot:
                await pilot.press("down", "down")
                await wait_until(pilot, lambda: cells(app, "encode")[2] == "running")
                await wait_until(pilot, lambda: "fake encode line 1" in screen(app).query_one("#output-log").lines)
                await pilot.press("s")
                await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
                await pilot.press("y")
                await wait_until(pilot, lambda: not proc.running)

        asyncio.run(again())
    finally:
        proc.signal(9)


def test_plot_rasterises_endpoints_and_metrics_tail(tmp_path):
    bits, owner, (xmin, xmax, ymin, ymax) = braille([[(0.0, 0.0), (1.0, 1.0)]], cols=1, rows=1)
    assert (xmin, xmax, ymin, ymax) == (0.0, 1.0, 0.0, 1.0)
    assert bits[0][0] & 0x40 and bits[0][0] & 0x08  # bottom-left and top-right dots of the 2x4 cell
    assert owner == [[0]]
    path = tmp_path / "m.jsonl"
    tail = MetricsTail(path)
    assert tail.read() == []
    path.write_text('{"step": 1, "a/x": 1}\n{"step": 2, "a/')
    assert tail.read() == [{"step": 1, "a/x": 1}]
    with open(path, "a") as f:
        f.write('x": 2}\n')
    s = Series()
    s.add([{"step": 1, "a/x": 1}, *tail.read()])
    assert s.points["a/x"] == [(1.0, 1.0), (2.0, 2.0)] and s.latest == {"a/x": 2, "step": 2}


def test_tui_import_does_not_import_tensorflow():
    heavy = ["tensorflow", "keras", "tensorflow_probability", "gymnasium", "vizdoom", "cma", "mpi4py", "matplotlib"]
    code = (  # and what the poll worker imports as it reads a run (its stage rows, its rounds)
        "import sys, tui.app, tui.__main__, tui.screens.run, tui.screens.launch, wm.tools.status, wm.rounds.record; "
        f"bad = [m for m in {heavy!r} if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    assert r.returncode == 0, r.stdout + r.stderr


def test_picker_lists_runs_and_opens_one(tmp_path):
    run = make_run(tmp_path)
    (tmp_path / "runs" / "empty-dir").mkdir()  # not a run: not listed

    async def main():
        app = WMApp(tmp_path / "runs", python=FAKE, poll_interval=0.1)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            options = app.screen.query_one("#runs")
            assert options.option_count == 1 and "1/6 done" in str(options.get_option_at_index(0).prompt)
            await pilot.press("enter")
            await wait_until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.run.path == run.path)
            await pilot.press("escape", "n", *"fresh", "enter")
            await wait_until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.run.path.name == "fresh")
            await wait_until(pilot, lambda: cells(app, "collect")[2] != "")  # the poll worker's first snapshot
            assert cells(app, "collect")[2] == "not started"

    asyncio.run(main())


def test_find_runs_lists_iteration_rounds_after_their_run(tmp_path):
    for rel in ("b", "a", "a/round10", "a/round2", "a/roundup", "a/notes"):
        (tmp_path / rel).mkdir(parents=True)
        if rel != "a/notes":
            (tmp_path / rel / "config.yaml").write_text("{}\n")
    found = find_runs(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in found] == ["a", "a/round2", "a/round10", "b"]
    # the picker groups a run's rounds under it, the last one closing the group
    assert run_labels(tmp_path, found) == ["a", "  ├ round2", "  └ round10", "b"]


def test_run_dir_is_polled_by_one_worker_thread_through_messages(tmp_path, monkeypatch):
    """States are read off the UI thread, one read at a time (ticks skipped while one is slow), and reach the
    table through RunScreen.Polled messages; the reads stop with the screen."""
    run = make_run(tmp_path)
    main_thread = threading.main_thread().ident
    real_rows = status.stage_rows
    gate = threading.Event()
    gate.set()
    lock = threading.Lock()
    calls: list[int] = []  # thread ident of every stage_rows call (the picker's run summaries read on the UI thread)
    inflight, most = 0, 0

    def slow_rows(rundir):
        nonlocal inflight, most
        with lock:
            calls.append(threading.get_ident())
            inflight += 1
            most = max(most, inflight)
        try:
            if threading.get_ident() != main_thread:  # never block the UI thread itself: a broken poll fails, not hangs
                gate.wait(20)
            return real_rows(rundir)
        finally:
            with lock:
                inflight -= 1

    monkeypatch.setattr(status, "stage_rows", slow_rows)
    polled: list[RunScreen.Polled] = []

    def hook(message):
        if isinstance(message, RunScreen.Polled):
            polled.append(message)

    async def main():
        app = app_for(run)
        async with app.run_test(size=SIZE, message_hook=hook) as pilot:
            try:
                await checks(app, pilot)
            finally:
                gate.set()  # a failed check must not leave a reader blocked

    async def checks(app, pilot):
        await wait_until(pilot, lambda: cells(app, "encode")[2] == "not started")
        assert polled and polled[-1].snapshot.rows is not None
        run_screen = screen(app)
        # a slow file system: the next read blocks; the UI stays live and no tick starts a second read
        await wait_until(pilot, lambda: not run_screen.polling)
        gate.clear()  # no await since the check: no read is past the gate, the next one blocks
        await wait_until(pilot, lambda: inflight == 1)
        started = len(calls)
        assert calls[-1] != main_thread
        run.mark_done("encode", {"episodes": 3})
        await pilot.pause(0.6)  # 6 poll intervals
        assert len(calls) == started and inflight == 1 and most == 1
        assert cells(app, "encode")[2] == "not started"  # nothing read the DONE yet: rows change only by a poll
        await pilot.press("down")  # selecting a stage asks for a read: deferred until the slow one is done
        await wait_until(pilot, lambda: run_screen.verb == "train-vae")
        assert len(calls) == started and run_screen.series.records == 0
        gate.set()
        await wait_until(pilot, lambda: cells(app, "encode")[2] == "done")
        assert any(("encode", "done") in [(v, st) for v, st, _ in m.snapshot.rows or ()] for m in polled)
        await wait_until(pilot, lambda: run_screen.series.records == 2)  # the deferred read, for train-vae's metrics
        assert most == 1 and main_thread not in calls[started - 1 :]
        # leaving the run screen stops its polling
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, PickerScreen) and not run_screen.is_running)
        await wait_until(pilot, lambda: inflight == 0)
        worker_reads = sum(t != main_thread for t in calls)
        await pilot.pause(0.5)
        assert sum(t != main_thread for t in calls) == worker_reads

    asyncio.run(main())
    assert inflight == 0


def test_screen_actions_reach_the_app_as_messages(tmp_path):
    """Open run, launch and stop are messages posted by the screens and handled by the app."""
    run = make_run(tmp_path)
    seen: list = []

    def hook(message):
        if isinstance(message, (PickerScreen.OpenRun, RunScreen.Launch, RunScreen.Stop)) and not any(
            message is m for m in seen
        ):
            seen.append(message)

    async def main():
        app = app_for(run, **RUNS_ON)
        async with app.run_test(size=SIZE, message_hook=hook) as pilot:
            await pilot.press("escape")  # back to the picker, then open the run from it
            await wait_until(pilot, lambda: isinstance(app.screen, PickerScreen))
            await pilot.press("enter")
            await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
            await pilot.press("down", "down", "l")  # encode
            await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen))
            await pilot.press("ctrl+l")
            await wait_until(pilot, lambda: app.process(run.path, "encode") is not None)
            first = app.process(run.path, "encode")
            console = screen(app).console_path("encode")
            await wait_until(pilot, lambda: "fake encode line 1" in console.read_text()[first.offset :])  # SIGTERM handler set
            await pilot.press("s")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("y")
            assert await first.wait(10) == 143
            assert [type(m) for m in seen] == [PickerScreen.OpenRun, RunScreen.Launch, RunScreen.Stop]
            assert seen[0].path == run.path and seen[1].request.verb == "encode" and seen[2].verb == "encode"
            # the same messages posted by hand (no key, no form) are handled by the app
            rs = screen(app)
            rs.post_message(
                RunScreen.Launch(rs, LaunchRequest("encode", sets=["encode.initial_z=5"]), rs.console_path("encode"))
            )
            await wait_until(pilot, lambda: app.process(run.path, "encode") is not first)
            second = app.process(run.path, "encode")
            assert second.argv[-2:] == ["--set", "encode.initial_z=5"]
            await wait_until(
                pilot, lambda: cells(app, "encode")[0] == "▶" and "fake encode line 1" in console.read_text()[second.offset :]
            )
            rs.post_message(RunScreen.Stop(rs, "encode"))
            assert await second.wait(10) == 143
            await wait_until(pilot, lambda: cells(app, "encode")[2].startswith("resumable"))

    asyncio.run(main())


def test_stop_never_signals_the_pid_of_another_hosts_job(tmp_path, monkeypatch):
    """A stage running on another node (its LOCK fresh on a shared file system): the UI says where it runs and sends
    no signal (before: the other host's pid was signalled here, whatever process has it on this machine)."""
    import time

    from wm.core.atomic import atomic_write_json

    run = make_run(tmp_path)
    atomic_write_json(run.stage_dir("encode") / "LOCK", {"pid": os.getpid(), "host": "node17", "started": time.time()})
    sent: list = []
    monkeypatch.setattr("wm.tui.app.signal_group", lambda pgid: sent.append(pgid) or True)
    notes: list = []

    async def main():
        app = app_for(run)
        monkeypatch.setattr(app, "notify", lambda text, **kw: notes.append(text))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: isinstance(app.screen, RunScreen))
            rs = screen(app)
            rs.post_message(RunScreen.Stop(rs, "encode"))
            await wait_until(pilot, lambda: notes)

    asyncio.run(main())
    assert sent == [] and notes == [f"encode runs on node17 (pid {os.getpid()}): stop it there"]


def test_rounds_view_follows_rounds_json(tmp_path):
    """The Rounds pane (R): for a run without rounds its single pass and why; then each pass's dream and real check side
    by side, the final check, "exploits the dream", the result marked, the random check and why the rounds stopped;
    it follows rounds.json."""
    run = make_run(tmp_path)
    cfg = rounds_cfg()

    async def main():
        app = app_for(run)
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: cells(app, "collect")[2] != "")
            rs = screen(app)
            await wait_until(pilot, lambda: rs.rounds is not None)
            assert rs.check_action("tab", ("rounds",)) is True
            await pilot.press("R")  # no rounds: the pane says why, beside the single pass
            await wait_until(pilot, lambda: rs.query_one("#panes").active == "rounds")
            assert "this run has no rounds" in str(rs.query_one("#rounds-note").render())
            assert [str(c) for c in rs.query_one("#rounds-table").get_row("single pass")][1] == "single pass"
            (run.path / "round1").mkdir()
            write_rounds(
                run,
                cfg,
                [
                    PassCheck("first pass", str(run.path), real=300.0, dream=900.0, final=310.0, final_episodes=2),
                    PassCheck("round1", str(run.path / "round1"), real=500.0, dream=520.0, final=480.5, final_episodes=2),
                ],
                None,
                random=120.0,
            )
            await wait_until(pilot, lambda: rs.rounds is not None and rs.rounds.source == "rounds.json")
            assert not rs.query_one("#panes").get_tab("rounds").has_class("-hidden")
            await pilot.press("R")
            await wait_until(pilot, lambda: rs.query_one("#panes").active == "rounds")
            table = rs.query_one("#rounds-table")
            row = lambda name: [str(c) for c in table.get_row(name)]  # noqa: E731
            assert row("first pass") == ["", "first pass", "900", "300", "310", "exploits the dream"]
            assert row("round1") == ["★", "round1", "520", "500", "480.5", "the result"]
            note = str(rs.query_one("#rounds-note").render())
            assert "random policy's check 120" in note and "rounds still going" in note
            # a new round prepared: listed before its check; then its check and the stop land in rounds.json
            (run.path / "round2").mkdir()
            await wait_until(pilot, lambda: table.row_count == 3)
            assert row("round2")[-1] == "not checked yet"
            write_rounds(
                run,
                cfg,
                [
                    PassCheck("first pass", str(run.path), real=300.0, dream=900.0),
                    PassCheck("round1", str(run.path / "round1"), real=500.0, dream=520.0),
                    PassCheck("round2", str(run.path / "round2"), real=650.0, dream=1400.0),
                ],
                "no better pass in 1 round",
                random=120.0,
            )
            await wait_until(pilot, lambda: row("round2")[2:4] == ["1400", "650"])
            assert row("round2") == ["★", "round2", "1400", "650", "", "the result, exploits the dream"]
            assert row("round1")[0] == "" and row("round1")[-1] == ""
            assert "stopped: no better pass in 1 round" in str(rs.query_one("#rounds-note").render())

    asyncio.run(main())


def test_rounds_without_rounds_json_show_the_passes_evaluations(tmp_path):
    run = make_run(tmp_path)
    alone = read_rounds(run)  # no rounds: the single pass, and why
    assert alone.rows == [("single pass", "—", "—", "", "the result")] and "no rounds" in alone.notes[0]
    r1 = RunDir(run.path / "round1")
    for where, tag, mean in ((run, "real", 300.0), (r1, "real", 450.0), (r1, "dream", 800.0)):
        where.eval_dir(tag).mkdir(parents=True, exist_ok=True)
        summary = {"mean": mean, "std": 12.5, "episodes": 100}
        atomic_write_json(where.eval_summary(tag), summary)
        if tag == "real":
            atomic_write_json(where.eval_summary(), summary)
    table = read_rounds(run)
    assert table is not None and table.source == "eval" and table.result == "round1"
    assert table.rows == [
        ("first pass", "—", "300 ± 12.5 (100)", "", ""),
        ("round1", "800 ± 12.5 (100)", "450 ± 12.5 (100)", "", "the result"),
    ]


def test_pipeline_launch_form_runs_streams_and_stops(tmp_path):
    """P: the launch form for `python -m wm pipeline --run … --mpi N …` (the same command preview); it runs as a
    process of its own whose output (logs/pipeline.console) streams into the Pipeline pane; S stops it, asking first."""
    run = make_run(tmp_path)
    fake_mpirun = str(FIXTURES / "fake_mpirun.py")

    async def main():
        app = app_for(run, launcher=Launcher("mpirun", fake_mpirun), **RUNS_ON)
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: cells(app, "collect")[2] != "")
            await pilot.press("S")  # nothing launched: nothing to stop, no question
            await pilot.pause()
            assert isinstance(app.screen, RunScreen)
            await pilot.press("P")
            await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen))
            form = app.screen
            assert form.verb == "pipeline"
            assert form.query_one("#ranks").value == str(default_ranks(tiny_cfg()))
            form.query_one("#ranks").value = "3"
            form.query_one("#sets").value = "vae.epochs=1"
            form.query_one("#demo").value = True
            await pilot.pause()
            preview = str(form.query_one("#command").render())
            tail = f"-m wm pipeline --run {run.path} --set vae.epochs=1 --mpi 3 --launcher {fake_mpirun} --demo"
            assert preview.endswith(tail), preview
            assert "iterate:" in str(form.query_one("#resolved").render())  # the whole config, rounds first
            await pilot.press("ctrl+l")
            await wait_until(pilot, lambda: app.process(run.path, "pipeline") is not None)
            proc = app.process(run.path, "pipeline")
            assert proc.argv == [*FAKE, *tail.split()]
            assert proc.output == run.path / "logs" / "pipeline.console"
            rs = screen(app)
            log = rs.query_one("#pipeline-log")
            await wait_until(pilot, lambda: rs.query_one("#panes").active == "pipeline")
            await wait_until(pilot, lambda: "fake pipeline line 2" in log.lines)
            assert any(ln.startswith("fake argv: -m wm pipeline --run") for ln in log.lines)
            await wait_until(pilot, lambda: "running" in str(rs.query_one("#pipeline-status").render()))
            await wait_until(pilot, lambda: "S Stop pipeline" in screen_lines(app)[-1])  # the footer: S, not P
            assert "P Pipeline" not in screen_lines(app)[-1] and "? Help" in screen_lines(app)[-1]
            await pilot.press("P")  # running already: no second form
            await pilot.pause()
            assert isinstance(app.screen, RunScreen)
            await pilot.press("S")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("n")
            await pilot.pause(0.3)
            assert proc.running
            await pilot.press("S")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("y")
            assert await proc.wait(10) == 143
            await wait_until(pilot, lambda: "pipeline stopped" in log.lines)
            await wait_until(pilot, lambda: "pipeline stopped" in str(rs.query_one("#pipeline-status").render()))
            assert "fake pipeline line 0" in (run.path / "logs" / "pipeline.console").read_text()

    asyncio.run(main())


def test_pipeline_command_argv():
    assert pipeline_command("runs/x", python=["py"]) == ["py", "-m", "wm", "pipeline", "--run", "runs/x"]
    srun = Launcher("srun", "srun", ("--mpi=pmi2",))
    argv = pipeline_command("runs/x", ["tiny"], ["a.b=1"], 4, force=True, demo=True, python=["py"], launcher=srun)
    assert argv == [
        *("py", "-m", "wm", "pipeline", "--run", "runs/x", "--configs", "tiny", "--set", "a.b=1", "--force"),
        *("--mpi", "4", "--launcher", "srun", "--launcher-args=--mpi=pmi2", "--demo"),
    ]
    assert pipeline_command("runs/x", mpi=1, python=["py"], launcher=srun)[-1] == "runs/x"  # 1 rank: no MPI flags
    with pytest.raises(ValueError):
        pipeline_command("runs/x", mpi=0)
    # the launcher's flags parse back into the same launcher in the pipeline
    for launcher in (
        Launcher(),
        srun,
        Launcher("mpirun", "/opt/my mpi/mpirun", ("-f", "hosts")),
        Launcher("template", "x -n {n}"),
    ):
        p = argparse.ArgumentParser()
        p.add_argument("--mpi")
        add_launcher_args(p)
        flags = pipeline_command("r", mpi=2, python=["py"], launcher=launcher)[6:]  # from --mpi on
        assert from_args(p.parse_args(flags), environ={}) == launcher, flags
    tiny = tiny_cfg()  # es.popsize 8: at most 8 players and the dispatcher
    assert [default_ranks(tiny, cores=n) for n in (1, 2, 4, 16)] == [1, 3, 5, 9]
    assert default_ranks(None, cores=500) == MAX_RANKS
    # a ranked stage's form: no more players than there is work at once (tiny: 8 candidates, 4 evaluation episodes)
    assert [default_ranks(tiny, cores=16, verb=v) for v in ("train-controller", "evaluate")] == [9, 5]
    assert default_ranks(tiny, cores=16, verb="collect") == min(17, tiny.collect.episodes + 1)


def test_output_pane_follows_the_log_of_a_stage_run_from_a_shell(tmp_path):
    """A stage the UI did not launch (its logs/<stage>.log, or a running LOCK): the Output pane follows the log."""
    run = make_run(tmp_path)  # collect ran from a shell: a log, no console

    async def main():
        app = app_for(run)
        async with app.run_test(size=SIZE) as pilot:
            log = screen(app).query_one("#output-log")
            await wait_until(pilot, lambda: any("collect finished" in ln for ln in log.lines))
            assert "not launched from this UI" in log.lines[0]
            with open(run.log_path("collect"), "a") as f:
                f.write("2025-01-01 00:00:02 INFO one more line\n")
            await wait_until(pilot, lambda: any("one more line" in ln for ln in log.lines))
            # encode starts from a shell (a LOCK, no log yet): its log is followed as it appears
            await pilot.press("down", "down")
            await wait_until(pilot, lambda: screen(app).verb == "encode")
            lock = run.stage_dir("encode") / "LOCK"
            lock.parent.mkdir()
            lock.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
            await wait_until(pilot, lambda: screen(app).output_followed == run.log_path("encode"))
            run.log_path("encode").write_text("2025-01-01 00:00:03 INFO encoded 1 episode\n")
            await wait_until(pilot, lambda: any("encoded 1 episode" in ln for ln in log.lines))

    asyncio.run(main())


def test_evaluate_form_launches_its_variants_over_ranks(tmp_path):
    """Evaluate's form: ranks default from the config and the machine (a ranked stage), a variant (the dream, the
    random policy, the τ sweep) and --episodes go on the command line, shown before it runs; a bad count is one line."""
    run = make_run(tmp_path)
    fake_mpirun = str(FIXTURES / "fake_mpirun.py")

    async def main():
        app = app_for(run, launcher=Launcher("mpirun", fake_mpirun))
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: cells(app, "collect")[2] != "")
            await pilot.press("down", "down", "down", "down", "down")
            await wait_until(pilot, lambda: screen(app).verb == "evaluate")
            await pilot.press("l")
            await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen))
            form = app.screen
            tiny = tiny_cfg()
            assert form.query_one("#ranks").value == str(default_ranks(tiny, verb="evaluate"))
            form.query_one("#ranks").value = "3"
            form.query_one("#mode").value = "--random"
            form.query_one("#episodes").value = "0"
            await pilot.pause()
            assert "--episodes must be a whole number >= 1" in str(form.query_one("#launch-error").render())
            form.query_one("#episodes").value = "6"
            await pilot.pause()
            tail = f"-m wm evaluate --run {run.path} --random --episodes 6"
            preview = str(form.query_one("#command").render())
            assert preview.endswith(tail) and "mpirun.py -n 3" in preview, preview
            await pilot.press("ctrl+l")
            await wait_until(pilot, lambda: app.process(run.path, "evaluate") is not None)
            argv = app.process(run.path, "evaluate").argv
            assert argv == [fake_mpirun, "-n", "3", *FAKE, *tail.split()]
            await wait_until(pilot, lambda: app.process(run.path, "evaluate").poll() is not None)
            # l acts again once a read finds it no longer starting (the fake mpirun only prints: it stays not started)
            await wait_until(pilot, lambda: cells(app, "evaluate")[2] == "not started")

            await pilot.press("l")  # again: the dream, the config's episodes
            await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen))
            app.screen.query_one("#ranks").value = "1"
            app.screen.query_one("#mode").value = "--dream"
            await pilot.pause()
            await pilot.press("ctrl+l")
            await wait_until(pilot, lambda: app.process(run.path, "evaluate").argv[-1] == "--dream")
            assert app.process(run.path, "evaluate").argv == [*FAKE, "-m", "wm", "evaluate", "--run", str(run.path), "--dream"]

    asyncio.run(main())


def test_tools_form_launches_report_and_results_and_shows_their_output(tmp_path):
    """T: the run's report, or the result table over this run and others (with --plot); the command shows before it
    runs, its output in the Tool pane (U), a bad quote is one line."""
    run = make_run(tmp_path)
    other = tmp_path / "runs" / "seed 1"

    async def main():
        app = app_for(run)
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: cells(app, "collect")[2] != "")
            assert screen(app).check_action("tab", ("tool",)) is False  # no Tool pane before a tool ran
            await pilot.press("T")
            await wait_until(pilot, lambda: isinstance(app.screen, ToolsScreen))
            form = app.screen
            assert str(form.query_one("#tools-command").render()).endswith(f"-m wm report --run {run.path}")
            assert form.query_one("#results-opts").display is False  # report has no options
            await pilot.press("ctrl+l")
            await wait_until(pilot, lambda: isinstance(app.screen, RunScreen) and app.process(run.path, "report"))
            assert app.process(run.path, "report").argv == [*FAKE, "-m", "wm", "report", "--run", str(run.path)]
            log = screen(app).query_one("#tool-log")
            await wait_until(pilot, lambda: "fake report done" in log.lines)
            assert screen(app).query_one("#panes").active == "tool"
            assert (run.path / "logs" / "report.console").read_text().count("fake report done") == 1
            await wait_until(pilot, lambda: app.process(run.path, "report").poll() is not None)  # T waits for it

            await pilot.press("T")
            await wait_until(pilot, lambda: isinstance(app.screen, ToolsScreen))
            form = app.screen
            form.query_one("#tool-choice").query("RadioButton")[1].value = True  # results
            await pilot.pause()
            assert form.query_one("#results-opts").display is True
            form.query_one("#tool-runs").value = f"{run.path} '{other}"  # an open quote
            await pilot.pause()
            assert "error:" in str(form.query_one("#tools-error").render())
            form.query_one("#tool-runs").value = f"{run.path} '{other}'"
            await pilot.pause()
            await pilot.press("ctrl+l")
            await wait_until(pilot, lambda: isinstance(app.screen, RunScreen) and app.process(run.path, "results"))
            argv = app.process(run.path, "results").argv
            assert argv == [*FAKE, "-m", "wm", "results", "--runs", str(run.path), str(other), "--out",
                            str(run.path / "results"), "--plot"]  # fmt: skip
            await wait_until(pilot, lambda: "fake results done" in screen(app).query_one("#tool-log").lines)
            assert "results" in str(screen(app).query_one("#panes").get_tab("tool").label)

    asyncio.run(main())


def test_the_launch_form_shows_every_config_block_at_80x24(tmp_path):
    """Every block (the envs and the recipes small, tiny, dream) is in view at 80×24, without a scroll bar."""
    run = make_run(tmp_path)

    async def main():
        app = app_for(run)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("l")
            await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen))
            blocks = app.screen.query_one("#blocks")
            await pilot.pause()
            assert blocks.option_count == len(C.blocks()) >= 7 and blocks.max_scroll_y == 0
            assert app.screen.query_one("#go").region.bottom <= SIZE[1]  # the launch button still on screen

    asyncio.run(main())


def test_a_long_log_line_wraps_in_the_pane_instead_of_being_cut():
    from textual.app import App
    from wm.tui.widgets.follow_log import FollowLog

    class One(App):
        def compose(self):
            yield FollowLog(id="log")

    async def main():
        app = One()
        async with app.run_test(size=SIZE) as pilot:
            log = app.query_one("#log", FollowLog)
            await pilot.pause()
            line = "error: " + " ".join(f"word{i}" for i in range(60))  # ≈ 430 characters
            log.write_line("short")
            log.write_line(line)
            width = log.scrollable_content_region.width
            assert log.lines[0] == "short" and len(log.lines) > 5
            assert all(len(x) < width for x in log.lines) and log.max_scroll_x == 0
            assert " ".join(x.strip() for x in log.lines[1:]) == line

    asyncio.run(main())


def test_the_run_screen_says_where_the_run_stands_against_its_recorded_runs(tmp_path, monkeypatch):
    """Under the stage table, a run of a preset with recorded runs (`wm reference`) reads where it stands."""
    from wm.tools import reference

    refs = tmp_path / "references"
    refs.mkdir()
    doc = {"name": "doom tiny", "blocks": ["doom_takecover", "tiny"], "version": "1", "runs": []}
    doc["runs"] = [{"label": "r", "curves": {"es/mean": {"1": 10.0, "3": 30.0}}, "score": None}]
    (refs / "doom-tiny.json").write_text(json.dumps(doc))
    monkeypatch.setattr(reference, "REFERENCE_DIR", refs)
    run = make_run(tmp_path)
    run.metrics_path("train-controller").write_text(json.dumps({"step": 2, "es/mean": 5.0}) + "\n")

    async def main():
        app = app_for(run)
        async with app.run_test(size=SIZE) as pilot:
            standing = screen(app).query_one("#standing")
            await wait_until(pilot, lambda: standing.display)
            assert "population mean 5 at generation 2: below the recorded run's 20 (worse)" in str(standing.render())

    asyncio.run(main())


def test_the_run_screen_redraws_only_what_a_read_changed(tmp_path, monkeypatch):
    """Every read of the run directory reaches every widget of the run screen (its `snapshot`), and each redraws only
    when its own part changed: reads of a run that does not change redraw nothing; one more metrics record redraws
    the Metrics pane and the one cell of the stage table whose key figures it changes, nothing else."""
    from collections import Counter

    from textual.widgets import DataTable, Static
    from wm.tui.widgets.follow_log import FollowLog

    run = make_run(tmp_path)
    drawn: Counter[str] = Counter()  # "<widget id>.<method>": calls

    def spy(cls, name: str) -> None:
        real = getattr(cls, name)

        def counted(self, *args, **kw):
            drawn[f"{self.id}.{name}"] += 1
            return real(self, *args, **kw)

        monkeypatch.setattr(cls, name, counted)

    for cls, name in ((Static, "update"), (DataTable, "update_cell"), (DataTable, "clear"), (LinePlot, "set_series")):
        spy(cls, name)
    spy(FollowLog, "follow")
    watched = [
        *(f"{i}.update" for i in ("run-title", "standing", "config-text", "rounds-note", "pipeline-status", "rate-label")),
        *("stages.update_cell", "rounds-table.clear", "latest.clear", "plot.set_series"),
        *(f"{i}.follow" for i in ("output-log", "file-log", "pipeline-log", "tool-log")),
    ]
    reads = [0]

    def hook(message):
        if isinstance(message, RunScreen.Polled):
            reads[0] += 1

    async def main():
        app = app_for(run)
        async with app.run_test(size=SIZE, message_hook=hook) as pilot:
            await pilot.press("down")  # train-vae: 2 metrics records
            rs = screen(app)
            await wait_until(pilot, lambda: rs.verb == "train-vae" and rs.series.records == 2 and rs.rounds is not None)

            async def changes() -> dict[str, int]:
                """What 5 more reads redrew (one more, so that the 5th has been handled)."""
                before, start = {k: drawn[k] for k in watched}, reads[0]
                await wait_until(pilot, lambda: reads[0] >= start + 6)
                return {k: drawn[k] - before[k] for k in watched if drawn[k] != before[k]}

            await changes()  # the first reads after the selection
            assert await changes() == {}
            with open(run.metrics_path("train-vae"), "a") as f:
                f.write(json.dumps({"step": 30, "time": 0.0, "vae/loss": 35.5, "vae/frames_per_s": 310.0}) + "\n")
            redrawn = await changes()
            assert rs.series.records == 3 and "loss 35.5" in cells(app, "train-vae")[3]
            assert redrawn == {"stages.update_cell": 1, "rate-label.update": 1, "latest.clear": 1, "plot.set_series": 1}

    asyncio.run(main())
