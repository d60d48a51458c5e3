"""The Textual app: owns the launched stage (and pipeline) processes and the screen stack (run picker → run screen)."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from pathlib import Path

from textual.app import App
from textual.binding import Binding
from wm.tui.model import is_run
from wm.tui.process import PIPELINE, StageProcess, process_group, signal_group
from wm.tui.screens.dialogs import HelpScreen, QuitScreen
from wm.tui.screens.launch import LaunchRequest, request_command
from wm.tui.screens.picker import PickerScreen
from wm.tui.screens.run import RunScreen

from wm.core.launcher import Launcher
from wm.core.rundir import RunDir


class WMApp(App[None]):
    """`python -m tui [RUN_DIR]`: pick a run, watch its stages, launch/stop/resume them.

    Args:
        path: a run directory (opened directly) or a directory of runs (default `runs`).
        python: interpreter prefix of stage commands (default `[sys.executable]`); tests inject a fake stage.
        launcher: what starts a ranked stage's or the pipeline's ranks (a `wm.core.launcher.Launcher`; default: the
            mpirun next to sys.executable). `python -m tui` passes the one of --launcher or WM_LAUNCHER.
        poll_interval: seconds between reads of the run directory.
        env: environment of stage processes (default: this process's).
    """

    CSS_PATH = "app.tcss"
    TITLE = "World Models"
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
    ]

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        python: Sequence[str] | None = None,
        launcher: Launcher | None = None,
        poll_interval: float = 1.0,
        env: dict[str, str] | None = None,
    ):
        super().__init__()
        self.path = Path(path) if path is not None else Path("runs")
        self.python = list(python) if python else None
        self.launcher = launcher
        self.poll_interval = poll_interval
        self.env = env
        self.processes: dict[tuple[str, str], StageProcess] = {}

    def on_mount(self) -> None:
        if is_run(self.path) and not (self.path / "runs").is_dir():
            self.push_screen(PickerScreen(self.path.parent))
            self.open_run(self.path)
        else:
            self.push_screen(PickerScreen(self.path))

    def open_run(self, path: Path) -> None:
        """Show the stages of run directory `path` (it need not exist yet)."""
        self.push_screen(RunScreen(path))

    # ------------------------------------------------------------------ messages from the screens
    def on_picker_screen_open_run(self, message: PickerScreen.OpenRun) -> None:
        self.open_run(message.path)

    def on_run_screen_launch(self, message: RunScreen.Launch) -> None:
        """Launch the request; tell the screen, which shows the output."""
        req = message.request
        try:
            proc = self.launch(message.run, req, message.output)
        except (OSError, ValueError) as e:
            self.notify(f"cannot launch {req.verb}: {e}", severity="error")
            return
        self.notify(f"launched {req.verb} (pid {proc.pid})")
        if message.screen.is_attached:
            message.screen.launched(req.verb)

    def on_run_screen_stop(self, message: RunScreen.Stop) -> None:
        """SIGTERM the stage's process group: ours, or the LOCK holder's (a stage left running by an earlier UI)."""
        verb = message.verb
        proc = self.process(message.run, verb)
        if proc is not None and proc.running:
            proc.stop()
            self.notify(f"sent SIGTERM to {verb} (process group {proc.pid})")
        elif verb == PIPELINE:  # no LOCK of its own: only a pipeline launched here is known by its pid
            self.notify(
                "the pipeline is not running from this UI: s on its running stage stops the stage's process group "
                "(a pipeline's stage shares the pipeline's)",
                severity="warning",
            )
        else:
            info = RunDir(message.run).lock_info(verb)
            if info is not None and info.held and info.host != socket.gethostname():
                # a pid of another host's job means nothing here: never signal it
                self.notify(f"{verb} runs on {info.host} (pid {info.pid}): stop it there", severity="warning")
                return
            pid = info.pid if info is not None and info.held else None
            pgid = process_group(pid) if pid else None
            if pgid is not None and signal_group(pgid):
                self.notify(f"sent SIGTERM to {verb} (process group {pgid}, not launched from this UI)")
            else:
                self.notify(f"{verb} is not running", severity="warning")
        if message.screen.is_attached:
            message.screen.poll()

    # ------------------------------------------------------------------ processes
    def process(self, run: Path, verb: str) -> StageProcess | None:
        """The last process this UI launched for `verb` (a stage, or "pipeline") in `run`, if any."""
        return self.processes.get((str(run), verb))

    def command(self, run: Path, req: LaunchRequest) -> list[str]:
        """The argv for a launch request (the launcher's prefix for a stage with ranks > 1; for the pipeline its
        `--mpi N` and the launcher's flags)."""
        return request_command(run, req, python=self.python, launcher=self.launcher)

    def launch(self, run: Path, req: LaunchRequest, output: Path) -> StageProcess:
        """Start `req` in its own process group, output appended to `output`; returns the process."""
        old = self.process(run, req.verb)
        if old is not None and old.running:
            raise ValueError(f"{req.verb} is already running (pid {old.pid})")
        proc = StageProcess(req.verb, self.command(run, req), output, env=self.env)
        proc.start()
        self.processes[(str(run), req.verb)] = proc
        return proc

    def running(self) -> list[StageProcess]:
        return [p for p in self.processes.values() if p.running]

    # ------------------------------------------------------------------ actions
    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    async def action_quit(self) -> None:
        """Quit; if stages launched here still run, ask whether to stop them or leave them running."""
        running = self.running()
        if not running:
            self.exit()
            return

        async def answer(choice: str | None) -> None:
            if choice == "stop":
                await self.stop_all()
            if choice in ("stop", "leave"):
                self.exit()

        self.push_screen(QuitScreen([p.verb for p in running]), answer)

    async def stop_all(self, timeout: float = 10.0) -> None:
        """SIGTERM every running stage's process group and wait for them to checkpoint and exit."""
        procs = self.running()
        for p in procs:
            p.stop()
        for p in procs:
            if await p.wait(timeout) is None:
                import signal

                p.signal(signal.SIGKILL)
