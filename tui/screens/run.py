"""One run: its title, the stage table (live states and key figures) and where the run stands, over tabbed panes
for the selected stage's output, metrics (plot + latest values), media (its pictures), log file and config, then
three of the whole run: its rounds (shown when it has any), the pipeline and the tool launched from here. Launch,
resume and stop act on the selected stage; `P` and `S` launch and stop the pipeline, `T` a tool. A stop asks first.

The widgets are in `tui.widgets.stages` and `tui.widgets.panes`. The screen sets two reactive attributes on each
(attributes down): `verb`, when a stage is selected, and `snapshot`, on each read of the run directory; each widget
redraws what changed of its own part. The run directory is read off the UI thread: a timer starts a thread worker
(at most one in flight; a tick that finds one still reading is skipped) which posts a `Polled` message carrying a
`RunSnapshot`. Launch and stop go up to the app as `Launch` and `Stop` messages.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.reactive import var
from textual.screen import Screen
from textual.widgets import DataTable, Footer, TabbedContent
from wm.tui.model import MetricsTail, RoundsTable, RunSnapshot, Series, console_path, read_snapshot
from wm.tui.process import PIPELINE, TOOLS
from wm.tui.screens.launch import LaunchRequest
from wm.tui.screens.run_actions import RunActions
from wm.tui.widgets.panes import (
    ConfigPane,
    LogFilePane,
    MediaPane,
    MetricsPane,
    OutputPane,
    PipelinePane,
    RoundsPane,
    ToolPane,
)
from wm.tui.widgets.stages import RunTitle, StageTable, Standing

from wm.core.rundir import STAGES, RunDir

if TYPE_CHECKING:
    from wm.tui.app import WMApp


class RunScreen(RunActions, Screen[None]):
    """Stages of one run directory."""

    app: WMApp
    # The footer fits 80 columns: it shows only the keys that act now (check_action: l and r while the selected stage is
    # not running, r only when it is resumable, s while it runs; P while no pipeline launched from here runs, S while one
    # does). The panes' keys are left to the tab bar and the help screen (?).
    BINDINGS = [
        Binding("l", "launch", "Launch"),
        Binding("r", "resume", "Resume"),
        Binding("s", "stop", "Stop"),
        Binding("P", "pipeline", "Pipeline"),
        Binding("S", "stop_pipeline", "Stop pipeline"),
        Binding("T", "tools", "Tools"),
        Binding("p", "play(False)", "Play"),
        Binding("escape", "back", "Runs"),
        Binding("o", "tab('output')", "Output", show=False),
        Binding("m", "tab('metrics')", "Metrics", show=False),
        Binding("i", "tab('media')", "Media", show=False),
        Binding("g", "tab('logfile')", "Log", show=False),
        Binding("c", "tab('config')", "Config", show=False),
        Binding("R", "tab('rounds')", "Rounds", show=False),  # a run without rounds: its single pass and why
        Binding("O", "tab('pipeline')", "Pipeline output", show=False),
        Binding("U", "tab('tool')", "Tool output", show=False),  # once a tool was launched here (check_action)
        Binding("w", "play(True)", "Watch C", show=False),
    ]
    # what check_action decides on: the footer is refreshed when it changes (not on every poll: it recomposes)
    keys: var[tuple[bool, ...]] = var((), init=False, bindings=True)

    class Polled(Message, bubble=False):
        """A snapshot of the run directory, posted by the poll worker's thread to its screen."""

        def __init__(self, snapshot: RunSnapshot):
            super().__init__()
            self.snapshot = snapshot

    class Launch(Message):
        """Launch `request` on `run`, output appended to `output` (handled by the app, which owns the processes)."""

        def __init__(self, screen: RunScreen, request: LaunchRequest, output: Path):
            super().__init__()
            self.screen = screen
            self.run = screen.run.path
            self.request = request
            self.output = output

        @property
        def control(self) -> RunScreen:
            return self.screen

    class Stop(Message):
        """Stop stage `verb` of `run`: SIGTERM to its process group (handled by the app)."""

        def __init__(self, screen: RunScreen, verb: str):
            super().__init__()
            self.screen = screen
            self.run = screen.run.path
            self.verb = verb

        @property
        def control(self) -> RunScreen:
            return self.screen

    def __init__(self, path: Path):
        super().__init__()
        self.run = RunDir(path)
        self.verb = STAGES[0].verb
        self.polling = False  # a read of the run directory is in flight (cleared when its snapshot arrives)
        self.poll_again = False  # something changed while it was: read once more as soon as it is done
        # made here, not in compose, so that check_action can ask them at any time
        self.title_line, self.table, self.standing = RunTitle(self.run), StageTable(self.run), Standing()
        self.output_pane, self.metrics_pane = OutputPane(self.run), MetricsPane(self.run)
        self.rounds_pane, self.pipeline_pane, self.tool_pane = RoundsPane(self.run), PipelinePane(self.run), ToolPane(self.run)
        self.panes = (
            *(self.output_pane, self.metrics_pane, MediaPane(self.run), LogFilePane(self.run), ConfigPane(self.run)),
            *(self.rounds_pane, self.pipeline_pane, self.tool_pane),
        )

    def compose(self) -> ComposeResult:
        yield from (self.title_line, self.table, self.standing)
        with TabbedContent(id="panes", initial="output"):
            yield from self.panes
        yield Footer(show_command_palette=False)  # ctrl+p still opens it (the help screen says so)

    def on_mount(self) -> None:
        tabs = self.query_one("#panes", TabbedContent)
        tabs.hide_tab("rounds")  # until a snapshot finds rounds
        tabs.hide_tab("tool")  # until a tool is launched from here
        self.table.focus()
        self.select(self.verb)  # starts the first read
        self.set_interval(self.app.poll_interval, self.tick)

    @property
    def rounds(self) -> RoundsTable | None:
        """The Rounds pane's view of the run (None: it has none, the pane is hidden)."""
        return self.rounds_pane.rounds

    @property
    def series(self) -> Series:
        """The selected stage's metrics read so far."""
        return self.metrics_pane.series

    @property
    def output_followed(self) -> Path | None:
        """The file the Output pane follows now."""
        return self.output_pane.followed

    # ------------------------------------------------------------------ polling the run dir
    def tick(self) -> None:
        """Timer: read the run directory, unless the last read is still in flight (then this tick is skipped)."""
        if not self.polling:
            self.start_poll()

    def poll(self) -> None:
        """Read the run directory now (after a launch, stop or new selection); if a read is in flight, once more after it."""
        if self.polling:
            self.poll_again = True
        else:
            self.start_poll()

    def start_poll(self) -> None:
        self.polling, self.poll_again = True, False
        self.read_run(self.verb, self.metrics_pane.tail)

    @work(thread=True, group="poll", exit_on_error=False)
    def read_run(self, verb: str, tail: MetricsTail | None) -> None:
        """Thread worker: read a snapshot (blocking file reads) and post it to the screen."""
        try:
            snapshot = read_snapshot(self.run, verb, tail)
        except Exception as e:  # read_snapshot catches what it expects; still always answer, or polling stops
            snapshot = RunSnapshot(verb, tail, error=str(e) or type(e).__name__)
        self.post_message(self.Polled(snapshot))  # dropped if the screen is gone meanwhile

    def on_run_screen_polled(self, message: RunScreen.Polled) -> None:
        self.polling = False
        try:
            for widget in (self.title_line, self.table, self.standing, *self.panes):
                widget.snapshot = message.snapshot  # each redraws what changed of its part
            self.show_keys()
        except Exception as e:  # must not take the UI down; the next tick retries
            self.title_line.failed(str(e))
        if self.poll_again:
            self.start_poll()

    # ------------------------------------------------------------------ selection and keys
    @on(DataTable.RowHighlighted, "#stages")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value and event.row_key.value != self.verb:
            self.select(event.row_key.value)

    def select(self, verb: str) -> None:
        """Show `verb`'s output, metrics, media, log file and config in the panes."""
        self.verb = verb
        for pane in self.panes:
            pane.verb = verb
        self.show_keys()
        self.poll()  # its metrics and config arrive with the next snapshot

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Keys that would not act now are hidden from the footer and do nothing: l and r only while the selected
        stage is not running (r only when it is resumable), s only while it is; P only while no pipeline launched
        from here runs, S only while one does; R (the Rounds pane) once the run has been read, U once a tool ran."""
        if action == "tab" and parameters == ("rounds",):
            return self.rounds is not None
        if action == "tab" and parameters == ("tool",):
            return self.tool_pane.tool is not None
        if action in ("launch", "resume", "stop"):
            busy = self.table.busy(self.verb)
            if action == "stop":
                return busy
            return not busy and (action == "launch" or self.table.states.get(self.verb) == "resumable")
        if action in ("pipeline", "stop_pipeline"):
            return (self.running(PIPELINE) is not None) == (action == "stop_pipeline")
        return True

    def show_keys(self) -> None:
        """What check_action decides on, into `keys`: the footer is refreshed when it changes."""
        resumable = self.table.states.get(self.verb) == "resumable"
        self.keys = (self.table.busy(self.verb), resumable, self.running(PIPELINE) is not None, self.rounds is not None)

    def console_path(self, verb: str) -> Path:
        """Where the output of `verb` launched from here goes (`model.console_path`)."""
        return console_path(self.run, verb)

    # ------------------------------------------------------------------ actions
    def action_tab(self, pane: str) -> None:
        if self.check_action("tab", (pane,)):  # not when hidden: the run has no rounds, or no tool was launched here
            self.query_one("#panes", TabbedContent).active = pane

    def action_back(self) -> None:
        self.dismiss()  # the screen's workers and timer stop as it is removed

    def action_play(self, agent: bool) -> None:
        """Drive in this run's dream (`p`), or watch its C there (`w`): `wm play --serve` behind the play screen."""
        from wm.tui.screens.play import PlayScreen

        self.app.push_screen(PlayScreen(self.run.path, agent=agent))

    def launched(self, verb: str) -> None:
        """Called by the app once it has launched `verb`: show its output and read the new state."""
        if verb == PIPELINE:
            self.action_tab("pipeline")
            self.pipeline_pane.launched()
        elif verb in TOOLS:
            self.tool_pane.tool = verb
            self.action_tab("tool")
        else:
            self.action_tab("output")
            if verb == self.verb:
                self.output_pane.launched()
        self.show_keys()
        self.poll()
