"""The run screen's launch, resume and stop actions (`RunActions`, a mixin of `tui.screens.run.RunScreen`).

`l`, `r`, `P` and `T` open a form (`tui.screens.launch`, `tui.screens.tools`) whose answer goes up to the app, which
owns the processes, as a `RunScreen.Launch` message; `s` and `S` ask first, then send `RunScreen.Stop`. The app
calls the screen's `launched` once a launch has started.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wm.tui.model import resolve
from wm.tui.process import PIPELINE, TOOLS, StageProcess, default_ranks
from wm.tui.screens.dialogs import ConfirmScreen
from wm.tui.screens.launch import CommandForm, LaunchRequest, LaunchScreen
from wm.tui.screens.tools import ToolsScreen
from wm.tui.widgets.stages import BUSY, StageTable

from wm.core.registry import ranked

if TYPE_CHECKING:
    from wm.tui.app import WMApp

    from wm.core.rundir import RunDir


class RunActions:
    """The actions of `RunScreen` that launch and stop: the selected stage (`verb`), the pipeline, a tool. Besides
    what is declared here they use the screen's `Launch` and `Stop` messages, `console_path`, `action_tab` and
    `notify`."""

    app: WMApp  # declarations only: the screen's
    run: RunDir
    verb: str
    table: StageTable  # the stage table: its states

    def running(self, verb: str) -> StageProcess | None:
        """The process this UI launched for `verb` on this run, while it runs."""
        proc = self.app.process(self.run.path, verb)
        return proc if proc is not None and proc.running else None

    def action_launch(self) -> None:
        self.open_form(resume=False)

    def action_resume(self) -> None:
        state = self.table.states.get(self.verb)
        if state is None:
            self.notify("reading the run directory: try again in a moment", severity="warning")
        elif state != "resumable":
            self.notify(f"{self.verb} is {state}: nothing to resume (l launches)", severity="warning")
        else:
            self.open_form(resume=True)

    def open_form(self, resume: bool) -> None:
        if self.table.states.get(self.verb) in BUSY:
            self.notify(f"{self.verb} is already running", severity="warning")
            return
        names = self.config_blocks()
        if names is None:
            return
        ranks = 1
        if ranked(self.verb):
            try:  # the stored config (or the defaults) caps the ranks: the ES's candidates, the episodes to play
                ranks = default_ranks(resolve(self.run.path, [], []), verb=self.verb)
            except Exception:
                ranks = default_ranks(verb=self.verb)  # the form shows the config's error line itself
        self.push_form(LaunchScreen(self.run.path, self.verb, names, resume, self.command, ranks))

    def action_pipeline(self) -> None:
        """The launch form for the whole pipeline (`python -m wm pipeline --run … --mpi N …`)."""
        if (proc := self.running(PIPELINE)) is not None:
            self.notify(f"the pipeline is already running (pid {proc.pid}): S stops it", severity="warning")
            self.action_tab("pipeline")
            return
        names = self.config_blocks()
        if names is None:
            return
        try:
            cfg = resolve(self.run.path, [], [])  # the stored config (or the defaults): its es.popsize caps --mpi
        except Exception:
            cfg = None  # the form shows the error line itself
        self.push_form(LaunchScreen(self.run.path, PIPELINE, names, False, self.command, default_ranks(cfg)))

    def action_tools(self) -> None:
        """The tools form: the run's report, or the result table (`results --runs … --out … --plot`)."""
        running = [t for t in TOOLS if self.running(t) is not None]
        if running:
            self.notify(f"{running[0]} is still running: its output is in the Tool pane", severity="warning")
            self.action_tab("tool")
            return
        self.push_form(ToolsScreen(self.run.path, self.command))

    def config_blocks(self) -> list[str] | None:
        """The config blocks the launch forms offer (configs/), or None after saying why they cannot be read."""
        from wm.core.config import blocks

        try:
            return list(blocks())
        except Exception as e:
            self.notify(f"cannot read configs/: {e}", severity="error")
            return None

    def command(self, req: LaunchRequest) -> list[str]:
        """The argv the app will run for `req` (the forms show it)."""
        return self.app.command(self.run.path, req)

    def push_form(self, form: CommandForm) -> None:
        """Open a launch form; its answer goes up to the app (which owns the processes) as `Launch`."""

        def answered(req: LaunchRequest | None) -> None:
            if req is not None:  # the app launches, then calls the screen's `launched`
                self.post_message(self.Launch(self, req, self.console_path(req.verb)))

        self.app.push_screen(form, answered)

    def confirm_stop(self, verb: str, question: str, detail: str) -> None:
        """Ask first; on yes, the app SIGTERMs `verb`'s process group (`Stop`)."""

        def answered(yes: bool | None) -> None:
            if yes:
                self.post_message(self.Stop(self, verb))

        self.app.push_screen(ConfirmScreen(question, detail, yes="Stop", no="Keep running"), answered)

    def action_stop(self) -> None:
        """After a yes, the app SIGTERMs the selected stage's process group: ours, or the LOCK holder's (a stage left
        running, or run by a shell's pipeline)."""
        verb = self.verb
        ours = self.running(verb) is not None
        if not ours and self.table.states.get(verb) not in BUSY:
            self.notify(f"{verb} is not running", severity="warning")
            return
        detail = "SIGTERM to its process group: it checkpoints, and r resumes it later."
        if not ours and self.running(PIPELINE) is not None:
            detail = "It runs under the pipeline launched here: the SIGTERM stops the pipeline too (P resumes both)."
        self.confirm_stop(verb, f"Stop {verb}?", detail)

    def action_stop_pipeline(self) -> None:
        """After a yes, the app SIGTERMs the pipeline launched from here (its process group: it and its stage)."""
        if self.running(PIPELINE) is None:
            self.notify("no pipeline launched from this UI is running on this run", severity="warning")
            return
        self.confirm_stop(
            PIPELINE,
            "Stop the pipeline?",
            "SIGTERM to its process group: its running stage checkpoints; P launches it again and it resumes.",
        )
