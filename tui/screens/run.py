"""One run: the stage table (live states and key figures), and panes for the selected stage's output,
metrics (plot + latest values), media (its pictures, `tui.widgets.media`), log file and config. Launch, resume and
stop act on the selected stage.

The run directory is read off the UI thread: a timer starts a thread worker (at most one in flight; a tick that
finds one still reading is skipped) which posts a `Polled` message carrying a `RunSnapshot`; its handler only
updates widgets. Launch and stop go up to the app as `Launch` and `Stop` messages.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.markup import escape
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Label, Sparkline, Static, TabbedContent, TabPane
from wm.tui.model import PLOTS, MetricsTail, RunSnapshot, Series, figures_text, fmt, read_snapshot
from wm.tui.screens.launch import LaunchRequest, LaunchScreen
from wm.tui.widgets.follow_log import FollowLog
from wm.tui.widgets.media import MediaView
from wm.tui.widgets.plot import LinePlot

from wm.core.rundir import STAGES, RunDir, stage

if TYPE_CHECKING:
    from wm.tui.app import WMApp

MAX_LINES = 2000  # the panes' bound on memory


class RunScreen(Screen[None]):
    """Stages of one run directory."""

    app: WMApp
    BINDINGS = [
        Binding("l", "launch", "Launch"),
        Binding("r", "resume", "Resume"),
        Binding("s", "stop", "Stop"),
        Binding("o", "tab('output')", "Output", show=False),
        Binding("m", "tab('metrics')", "Metrics"),
        Binding("i", "tab('media')", "Media"),
        Binding("g", "tab('logfile')", "Log", show=False),
        Binding("c", "tab('config')", "Config", show=False),
        Binding("p", "play(False)", "Play"),
        Binding("w", "play(True)", "Watch C", show=False),
        Binding("escape", "back", "Runs"),
    ]

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
        self.states: dict[str, str] = {}
        self.tail: MetricsTail | None = None
        self.series = Series()
        self.reported: set[int] = set()  # launched processes whose exit has been notified
        self.polling = False  # a read of the run directory is in flight (cleared when its snapshot arrives)
        self.poll_again = False  # something changed while it was: read once more as soon as it is done
        self.config_text: str | None = None  # what the Config pane shows (None: not yet read for this stage)

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield Static(id="run-title")
        yield DataTable(id="stages", cursor_type="row", zebra_stripes=False)
        with TabbedContent(id="panes", initial="output"):
            with TabPane("Output", id="output"):
                yield FollowLog(MAX_LINES, self.app.poll_interval / 4, id="output-log")
            with TabPane("Metrics", id="metrics"):
                with Horizontal():
                    with Vertical(id="plots"):
                        yield LinePlot(id="plot")
                        yield Label("", id="rate-label")
                        yield Sparkline([], id="rate")
                    yield DataTable(id="latest", cursor_type="none", show_cursor=False)
            with TabPane("Media", id="media"):
                yield MediaView(self.app.poll_interval, id="media-view")
            with TabPane("Log file", id="logfile"):
                yield FollowLog(MAX_LINES, self.app.poll_interval / 4, id="file-log")
            with TabPane("Config", id="config"):
                yield Static(id="config-text", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#stages", DataTable)
        table.add_column(" ", key="mark", width=1)
        table.add_column("stage", key="stage", width=16)
        table.add_column("state", key="state", width=15)
        table.add_column("key figures", key="figs")
        for s in STAGES:
            table.add_row("", s.verb, "", "", key=s.verb)
        latest = self.query_one("#latest", DataTable)
        latest.add_column("metric", key="k")
        latest.add_column("latest", key="v")
        table.focus()
        self.query_one("#run-title", Static).update(f"[b]run[/b] {self.run.path}")
        self.select(self.verb)  # starts the first read
        self.set_interval(self.app.poll_interval, self.tick)

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
        self.read_run(self.verb, self.tail)

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
            self.show_snapshot(message.snapshot)
        except Exception as e:  # must not take the UI down; the next tick retries
            self.query_one("#run-title", Static).update(f"[b]run[/b] {self.run.path}  [red]read error: {escape(str(e))}[/red]")
        if self.poll_again:
            self.start_poll()

    def show_snapshot(self, snap: RunSnapshot) -> None:
        """Update the title, the stage table (with this UI's own processes) and the selected stage's panes."""
        title = f"[b]run[/b] {self.run.path}{snap.env}"
        if snap.error is not None:
            title += f"  [red]read error: {escape(snap.error)}[/red]"
        self.query_one("#run-title", Static).update(title)
        table = self.query_one("#stages", DataTable)
        for verb, state, figs in snap.rows or ():
            proc = self.app.process(self.run.path, verb)
            mark = ""
            if proc is not None and proc.running:
                mark = "▶"
                if state != "running":
                    state = "stopping" if proc.stopping else "starting"
            elif proc is not None:
                code = proc.poll()
                if code not in (0, None) and not proc.stopping:
                    mark = "✗"  # failed; the Output pane has the error line
                if id(proc) not in self.reported:
                    self.reported.add(id(proc))
                    how = "stopped" if proc.stopping else "finished" if code == 0 else f"failed (exit code {code})"
                    self.notify(f"{verb} {how}", severity="error" if how.startswith("failed") else "information")
            self.states[verb] = state
            table.update_cell(verb, "mark", mark)
            table.update_cell(verb, "state", state)
            table.update_cell(verb, "figs", figures_text(figs))
        if snap.verb != self.verb or snap.tail is not self.tail:
            return  # read for a stage selected before: its metrics and config are not this stage's
        if snap.config_text != self.config_text:
            self.config_text = snap.config_text
            self.query_one("#config-text", Static).update(snap.config_text)
        if snap.records or not self.series.records:
            self.series.add(snap.records)
            self.show_metrics()

    def show_metrics(self) -> None:
        name = stage(self.verb).name
        main, rate = PLOTS[name]
        pts = self.series.points
        if not any(k in pts for k in main):  # a stage logging other keys: plot what is there, honestly labelled
            main = tuple(k for k in pts if k != rate)[:3]
        self.query_one("#plot", LinePlot).set_series(
            [(k.split("/", 1)[1], pts[k]) for k in main if k in pts],
            empty=f"waiting for {self.run.metrics_path(self.verb).relative_to(self.run.path)}",
        )
        rate_pts = pts.get(rate, []) if rate else []
        self.query_one("#rate-label", Label).update(
            f"{rate.split('/', 1)[1]} {fmt(rate_pts[-1][1])} (min {fmt(min(v for _, v in rate_pts))}, "
            f"max {fmt(max(v for _, v in rate_pts))})"
            if rate_pts
            else ""
        )
        spark = self.query_one("#rate", Sparkline)
        spark.data = [v for _, v in rate_pts[-200:]]
        spark.display = bool(rate_pts)
        self.query_one("#rate-label", Label).display = bool(rate_pts)
        latest = self.query_one("#latest", DataTable)
        latest.clear()
        for k, v in self.series.latest.items():
            latest.add_row(k.split("/", 1)[-1] if k.startswith(name) or "/" in k else k, fmt(v))

    # ------------------------------------------------------------------ selection
    @on(DataTable.RowHighlighted, "#stages")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value and event.row_key.value != self.verb:
            self.select(event.row_key.value)

    def select(self, verb: str) -> None:
        """Show `verb`'s output, metrics, media, log file and config in the panes."""
        self.verb = verb
        self.tail = MetricsTail(self.run.metrics_path(verb))  # read only by the poll worker from now on
        self.series = Series()
        self.config_text = None
        self.show_metrics()
        self.follow_output()
        self.follow_logfile()
        self.query_one("#media-view", MediaView).show(self.run, verb)  # reads its files while the pane is shown
        self.poll()  # its metrics and config arrive with the next snapshot

    def console_path(self, verb: str) -> Path:
        return self.run.path / "logs" / f"{stage(verb).name}.console"

    def follow_output(self) -> None:
        """Stream the selected stage's console output (launched now or earlier) into the Output pane."""
        self.query_one("#output-log", FollowLog).follow(
            self.console_path(self.verb), f"no output yet for {self.verb}: press l to launch it"
        )

    def follow_logfile(self) -> None:
        """Stream the selected stage's logs/<stage>.log into the Log file pane."""
        path = self.run.log_path(self.verb)
        self.query_one("#file-log", FollowLog).follow(path, f"{path} does not exist yet")

    # ------------------------------------------------------------------ actions
    def action_tab(self, pane: str) -> None:
        self.query_one("#panes", TabbedContent).active = pane

    def action_back(self) -> None:
        self.dismiss()  # the screen's workers and timer stop as it is removed

    def action_play(self, agent: bool) -> None:
        """Drive in this run's dream (`p`), or watch its C there (`w`): `wm play --serve` behind the play screen."""
        from wm.tui.screens.play import PlayScreen

        self.app.push_screen(PlayScreen(self.run.path, agent=agent))

    def action_launch(self) -> None:
        self._open_form(resume=False)

    def action_resume(self) -> None:
        if self.verb not in self.states:
            self.notify("reading the run directory: try again in a moment", severity="warning")
            return
        if self.states.get(self.verb) != "resumable":
            self.notify(f"{self.verb} is {self.states.get(self.verb)}: nothing to resume (l launches)", severity="warning")
            return
        self._open_form(resume=True)

    def _open_form(self, resume: bool) -> None:
        if self.states.get(self.verb) in ("running", "starting", "stopping"):
            self.notify(f"{self.verb} is already running", severity="warning")
            return
        from wm.core.config import blocks

        try:
            names = list(blocks())
        except Exception as e:
            self.notify(f"cannot read configs/: {e}", severity="error")
            return

        def answered(req: LaunchRequest | None) -> None:
            if req is not None:  # the app owns the processes: it launches, then calls self.launched
                self.post_message(self.Launch(self, req, self.console_path(req.verb)))

        self.app.push_screen(
            LaunchScreen(self.run.path, self.verb, names, resume, lambda r: self.app.command(self.run.path, r)), answered
        )

    def launched(self, verb: str) -> None:
        """Called by the app once it has launched `verb`: show its output and read the new state."""
        self.action_tab("output")
        if verb == self.verb:
            self.follow_output()
        self.poll()

    def action_stop(self) -> None:
        """Ask the app to SIGTERM the selected stage's process group: ours, or the LOCK holder's (a stage left running)."""
        self.post_message(self.Stop(self, self.verb))
