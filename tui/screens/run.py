"""One run: the stage table (live states and key figures), and panes for the selected stage's output,
metrics (plot + latest values), media (its pictures, `tui.widgets.media`), log file and config, then two panes of the
whole run: its rounds (shown when it has any) and the pipeline launched from here. Launch, resume and stop act on the
selected stage; `P` and `S` launch and stop the pipeline. A stop asks first.

The run directory is read off the UI thread: a timer starts a thread worker (at most one in flight; a tick that
finds one still reading is skipped) which posts a `Polled` message carrying a `RunSnapshot` (the rounds view and
which file each stage's Output pane follows come with it); its handler only updates widgets. Launch and stop go up
to the app as `Launch` and `Stop` messages.
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
from wm.tui.model import (
    PLOTS,
    MetricsTail,
    RoundsTable,
    RunSnapshot,
    Series,
    figures_text,
    fmt,
    read_snapshot,
    resolve,
)
from wm.tui.process import PIPELINE, TOOLS, default_ranks
from wm.tui.screens.dialogs import ConfirmScreen
from wm.tui.screens.launch import LaunchRequest, LaunchScreen
from wm.tui.screens.tools import ToolsScreen
from wm.tui.widgets.follow_log import FollowLog
from wm.tui.widgets.media import MediaView
from wm.tui.widgets.plot import LinePlot

from wm.core.registry import ranked
from wm.core.rundir import STAGES, RunDir, stage

if TYPE_CHECKING:
    from wm.tui.app import WMApp

MAX_LINES = 2000  # the panes' bound on memory


class RunScreen(Screen[None]):
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
        self.rounds: RoundsTable | None = None  # what the Rounds pane shows (None: no rounds, the pane is hidden)
        self.outputs: dict[str, Path] = {}  # per stage: what its Output pane follows, from the last snapshot
        self.output_followed: Path | None = None  # what the Output pane follows now
        self.pipeline_status = ""
        self.keys_state: tuple[bool, ...] | None = None  # what check_action last decided on (see show_keys)
        self.tool: str | None = None  # the tool launched last from here (its console shows in the Tool pane)

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield Static(id="run-title")
        yield DataTable(id="stages", cursor_type="row", zebra_stripes=False)
        yield Static(id="standing", markup=False)  # is the run on track? (wm reference), hidden without a reference
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
            with TabPane("Rounds", id="rounds"):
                yield DataTable(id="rounds-table", cursor_type="none", show_cursor=False, zebra_stripes=False)
                yield Static(id="rounds-note", markup=False)
            with TabPane("Pipeline", id="pipeline"):
                yield Static(id="pipeline-status", markup=False)
                yield FollowLog(MAX_LINES, self.app.poll_interval / 4, id="pipeline-log")
            with TabPane("Tool", id="tool"):
                yield FollowLog(MAX_LINES, self.app.poll_interval / 4, id="tool-log")
        yield Footer(show_command_palette=False)  # ctrl+p still opens it (the help screen says so)

    def on_mount(self) -> None:
        self.query_one("#standing", Static).display = False  # until a read finds the run's recorded runs
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
        rounds = self.query_one("#rounds-table", DataTable)
        for label, key, width in (
            (" ", "mark", 1),
            ("pass", "pass", 11),
            ("dream", "dream", None),
            ("real check", "real", None),
            ("final", "final", None),
            ("", "note", None),
        ):
            rounds.add_column(label, key=key, width=width)
        self.query_one("#panes", TabbedContent).hide_tab("rounds")  # until a snapshot finds rounds
        self.query_one("#panes", TabbedContent).hide_tab("tool")  # until a tool is launched from here
        self.follow_pipeline()
        self.show_pipeline()
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
            text = figures_text(figs)
            if table.get_cell(verb, "figs") != text:  # the column grows (and shrinks) to its longest figures
                table.update_cell(verb, "figs", text, update_width=True)
        self.show_pipeline()
        standing = self.query_one("#standing", Static)
        if str(standing.render()) != snap.standing:
            standing.update(snap.standing)
        standing.display = bool(snap.standing)
        self.show_rounds(snap.rounds)
        self.show_keys()
        if snap.outputs:
            self.outputs = snap.outputs
            if self.output_path(self.verb) != self.output_followed:  # run from a shell since, or launched here
                self.follow_output()
        if snap.verb != self.verb or snap.tail is not self.tail:
            return  # read for a stage selected before: its metrics and config are not this stage's
        if snap.config_text != self.config_text:
            self.config_text = snap.config_text
            self.query_one("#config-text", Static).update(snap.config_text)
        if snap.records or not self.series.records:
            self.series.add(snap.records)
            self.show_metrics()

    def show_pipeline(self) -> None:
        """The Pipeline pane's status line: the pipeline launched from here, running or how it ended."""
        proc = self.app.process(self.run.path, PIPELINE)
        if proc is None:
            text = (
                "P launches the pipeline on this run (every stage in order, then its rounds); "
                "its output shows here (logs/pipeline.console)"
            )
        elif proc.running:
            text = f"▶ pipeline {'stopping' if proc.stopping else 'running'} (pid {proc.pid}): S stops it"
        else:
            code = proc.poll()
            how = "stopped" if proc.stopping else "finished" if code == 0 else f"failed (exit code {code})"
            text = f"pipeline {how}: P launches it again (finished stages are skipped, a stopped one resumes)"
            if id(proc) not in self.reported:
                self.reported.add(id(proc))
                self.notify(f"pipeline {how}", severity="error" if how.startswith("failed") else "information")
        if text != self.pipeline_status:
            self.pipeline_status = text
            self.query_one("#pipeline-status", Static).update(text)

    def show_rounds(self, rounds: RoundsTable | None) -> None:
        """The Rounds pane: one row per pass, the notes under them (a run without rounds: its single pass and why)."""
        if rounds == self.rounds:
            return
        had, self.rounds = self.rounds is not None, rounds
        tabs = self.query_one("#panes", TabbedContent)
        if (rounds is not None) != had:
            if rounds is None:
                if tabs.active == "rounds":
                    tabs.active = "output"
                tabs.hide_tab("rounds")
            else:
                tabs.show_tab("rounds")
        table = self.query_one("#rounds-table", DataTable)
        table.clear()
        if rounds is None:
            return
        keys: set[str] = set()
        for name, dream, real, final, note in rounds.rows:
            key = None if name in keys else name  # a name twice (a hand-edited rounds.json) must not raise
            keys.add(name)
            table.add_row("★" if name == rounds.result else "", name, dream, real, final, note, key=key)
        self.query_one("#rounds-note", Static).update("\n".join(rounds.notes))

    def stage_busy(self, verb: str) -> bool:
        """Whether `verb` runs (launched from here, or found running, starting or stopping by the last read)."""
        proc = self.app.process(self.run.path, verb)
        return (proc is not None and proc.running) or self.states.get(verb) in ("running", "starting", "stopping")

    def pipeline_running(self) -> bool:
        proc = self.app.process(self.run.path, PIPELINE)
        return proc is not None and proc.running

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Keys that would not act now are hidden from the footer and do nothing: l and r only while the selected
        stage is not running (r only when it is resumable), s only while it is; P only while no pipeline launched
        from here runs, S only while one does; R (the Rounds pane) once the run has been read."""
        if action == "tab" and parameters == ("rounds",):
            return self.rounds is not None
        if action == "tab" and parameters == ("tool",):
            return self.tool is not None
        if action in ("launch", "resume", "stop"):
            busy = self.stage_busy(self.verb)
            if action == "stop":
                return busy
            return not busy and (action == "launch" or self.states.get(self.verb) == "resumable")
        if action in ("pipeline", "stop_pipeline"):
            return self.pipeline_running() == (action == "stop_pipeline")
        return True

    def show_keys(self) -> None:
        """Refresh the footer when what check_action decides on has changed (not on every poll: it recomposes)."""
        busy = self.stage_busy(self.verb)
        state = (busy, self.states.get(self.verb) == "resumable", self.pipeline_running(), self.rounds is not None)
        if state != self.keys_state:
            self.keys_state = state
            self.refresh_bindings()

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
        self.show_keys()
        self.poll()  # its metrics and config arrive with the next snapshot

    def console_path(self, verb: str) -> Path:
        """`logs/<stage>.console` (`logs/pipeline.console` for the pipeline, `logs/<tool>.console` for a tool): the
        output of a launch from the UI."""
        name = verb if verb == PIPELINE or verb in TOOLS else stage(verb).name
        return self.run.path / "logs" / f"{name}.console"

    def output_path(self, verb: str) -> Path:
        """What `verb`'s Output pane follows: the console while this UI runs it, else as the last snapshot found
        (`model.output_file`: the console, or the stage's log file when it ran from a shell or the pipeline)."""
        proc = self.app.process(self.run.path, verb)
        if proc is not None and proc.running:
            return self.console_path(verb)
        return self.outputs.get(verb, self.console_path(verb))

    def follow_output(self) -> None:
        """Stream the selected stage's output into the Output pane: its console (launched here, now or in an earlier
        session), or its logs/<stage>.log for a stage run from a shell or under the pipeline."""
        path = self.output_path(self.verb)
        self.output_followed = path
        pane = self.query_one("#output-log", FollowLog)
        if path == self.console_path(self.verb):
            pane.follow(path, f"no output yet for {self.verb}: press l to launch it")
        else:
            rel = path.relative_to(self.run.path)
            pane.follow(path, f"waiting for {rel}", note=f"({self.verb} was not launched from this UI: its log file {rel})")

    def follow_pipeline(self) -> None:
        """Stream logs/pipeline.console into the Pipeline pane."""
        self.query_one("#pipeline-log", FollowLog).follow(
            self.console_path(PIPELINE), "no pipeline launched from this UI on this run yet"
        )

    def follow_logfile(self) -> None:
        """Stream the selected stage's logs/<stage>.log into the Log file pane."""
        path = self.run.log_path(self.verb)
        self.query_one("#file-log", FollowLog).follow(path, f"{path} does not exist yet")

    # ------------------------------------------------------------------ actions
    def action_tab(self, pane: str) -> None:
        if (pane == "rounds" and self.rounds is None) or (pane == "tool" and self.tool is None):
            return  # hidden: the run has no rounds, or no tool was launched from here
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
        names = self._config_blocks()
        if names is None:
            return

        def answered(req: LaunchRequest | None) -> None:
            if req is not None:  # the app owns the processes: it launches, then calls self.launched
                self.post_message(self.Launch(self, req, self.console_path(req.verb)))

        ranks = 1
        if ranked(self.verb):
            try:  # the stored config (or the defaults) caps the ranks: the ES's candidates, the episodes to play
                ranks = default_ranks(resolve(self.run.path, [], []), verb=self.verb)
            except Exception:
                ranks = default_ranks(verb=self.verb)  # the form shows the config's error line itself
        self.app.push_screen(
            LaunchScreen(self.run.path, self.verb, names, resume, lambda r: self.app.command(self.run.path, r), ranks),
            answered,
        )

    def _config_blocks(self) -> list[str] | None:
        """The config blocks the launch forms offer (configs/), or None after saying why they cannot be read."""
        from wm.core.config import blocks

        try:
            return list(blocks())
        except Exception as e:
            self.notify(f"cannot read configs/: {e}", severity="error")
            return None

    def launched(self, verb: str) -> None:
        """Called by the app once it has launched `verb`: show its output and read the new state."""
        if verb == PIPELINE:
            self.action_tab("pipeline")
            self.follow_pipeline()
            self.show_pipeline()
        elif verb in TOOLS:
            self.tool = verb
            tabs = self.query_one("#panes", TabbedContent)
            tabs.show_tab("tool")
            tabs.get_tab("tool").label = f"Tool: {verb}"
            self.query_one("#tool-log", FollowLog).follow(self.console_path(verb), f"no output yet from {verb}")
            self.action_tab("tool")
        else:
            self.action_tab("output")
            if verb == self.verb:
                self.follow_output()
        self.show_keys()
        self.poll()

    def action_pipeline(self) -> None:
        """The launch form for the whole pipeline (`python -m wm pipeline --run … --mpi N …`)."""
        proc = self.app.process(self.run.path, PIPELINE)
        if proc is not None and proc.running:
            self.notify(f"the pipeline is already running (pid {proc.pid}): S stops it", severity="warning")
            self.action_tab("pipeline")
            return
        names = self._config_blocks()
        if names is None:
            return
        try:
            cfg = resolve(self.run.path, [], [])  # the stored config (or the defaults): its es.popsize caps --mpi
        except Exception:
            cfg = None  # the form shows the error line itself

        def answered(req: LaunchRequest | None) -> None:
            if req is not None:
                self.post_message(self.Launch(self, req, self.console_path(PIPELINE)))

        self.app.push_screen(
            LaunchScreen(
                self.run.path, PIPELINE, names, False, lambda r: self.app.command(self.run.path, r), default_ranks(cfg)
            ),
            answered,
        )

    def action_tools(self) -> None:
        """The tools form: the run's report, or the result table (`results --runs … --out … --plot`)."""
        running = [t for t in TOOLS if (p := self.app.process(self.run.path, t)) is not None and p.running]
        if running:
            self.notify(f"{running[0]} is still running: its output is in the Tool pane", severity="warning")
            self.action_tab("tool")
            return

        def answered(req: LaunchRequest | None) -> None:
            if req is not None:
                self.post_message(self.Launch(self, req, self.console_path(req.verb)))

        self.app.push_screen(ToolsScreen(self.run.path, lambda r: self.app.command(self.run.path, r)), answered)

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
        proc = self.app.process(self.run.path, verb)
        ours = proc is not None and proc.running
        if not ours and self.states.get(verb) not in ("running", "starting", "stopping"):
            self.notify(f"{verb} is not running", severity="warning")
            return
        detail = "SIGTERM to its process group: it checkpoints, and r resumes it later."
        pipe = self.app.process(self.run.path, PIPELINE)
        if not ours and pipe is not None and pipe.running:
            detail = "It runs under the pipeline launched here: the SIGTERM stops the pipeline too (P resumes both)."
        self.confirm_stop(verb, f"Stop {verb}?", detail)

    def action_stop_pipeline(self) -> None:
        """After a yes, the app SIGTERMs the pipeline launched from here (its process group: it and its stage)."""
        proc = self.app.process(self.run.path, PIPELINE)
        if proc is None or not proc.running:
            self.notify("no pipeline launched from this UI is running on this run", severity="warning")
            return
        self.confirm_stop(
            PIPELINE,
            "Stop the pipeline?",
            "SIGTERM to its process group: its running stage checkpoints; P launches it again and it resumes.",
        )
