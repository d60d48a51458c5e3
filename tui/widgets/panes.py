"""The run screen's tabbed panes (`tui.screens.run`): one widget per tab, each showing one part of the selected stage
or of the whole run.

The screen sets two reactive attributes on every pane, and nothing else (attributes down): `verb`, the stage
selected in the stage table, and `snapshot`, each read of the run directory (`model.RunSnapshot`). A pane takes its
own part of a snapshot into reactives of its own (the config text, the rounds view, the pipeline's status line, the
metrics records read, the file its log follows) and their watchers redraw only what changed. The metrics and the
config of a snapshot read for a stage selected before are left alone.

What a pane does when the screen launches something (a stage, the pipeline, a tool) is a method of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.reactive import var
from textual.widgets import DataTable, Label, Sparkline, Static, TabbedContent, TabPane
from wm.tui.model import PLOTS, MetricsTail, RoundsTable, RunSnapshot, Series, console_path, fmt
from wm.tui.process import PIPELINE, StageProcess
from wm.tui.widgets.follow_log import FollowLog
from wm.tui.widgets.media import MediaView
from wm.tui.widgets.plot import LinePlot

from wm.core.rundir import RunDir, stage

if TYPE_CHECKING:
    from wm.tui.app import WMApp

MAX_LINES = 2000  # the log panes' bound on memory


class RunPane(TabPane):
    """A tab of the run screen: the screen sets `verb` and `snapshot`, a pane watches those it shows."""

    app: WMApp
    verb: var[str] = var("", init=False)
    # always_update: every read is handed on, even one equal to the last (a pane may show this UI's processes too)
    snapshot: var[RunSnapshot | None] = var(None, init=False, always_update=True)

    def __init__(self, title: str, id: str, run: RunDir):
        super().__init__(title, id=id)
        self.run = run

    def process(self, verb: str) -> StageProcess | None:
        """The last process this UI launched for `verb` on this run, if any."""
        return self.app.process(self.run.path, verb)

    def follow_log(self, id: str) -> FollowLog:
        """A log pane following a file (its reads at four times the poll rate)."""
        return FollowLog(MAX_LINES, self.app.poll_interval / 4, id=id)


class OutputPane(RunPane):
    """The selected stage's output: its console (launched here, now or in an earlier session), or its
    logs/<stage>.log for a stage run from a shell or under the pipeline."""

    source: var[tuple[str, Path] | None] = var(None, init=False)  # (stage, the file its log follows)

    def __init__(self, run: RunDir):
        super().__init__("Output", "output", run)
        self.outputs: dict[str, Path] = {}  # per stage: what the last snapshot found to follow (`model.output_file`)

    def compose(self) -> ComposeResult:
        yield self.follow_log("output-log")

    @property
    def followed(self) -> Path | None:
        return None if self.source is None else self.source[1]

    def output_path(self, verb: str) -> Path:
        """What `verb`'s output is: the console while this UI runs it, else as the last snapshot found."""
        proc = self.process(verb)
        if proc is not None and proc.running:
            return console_path(self.run, verb)
        return self.outputs.get(verb, console_path(self.run, verb))

    def watch_verb(self, verb: str) -> None:
        self.source = (verb, self.output_path(verb))

    def watch_snapshot(self, snap: RunSnapshot) -> None:
        if snap.outputs:
            self.outputs = snap.outputs
            self.source = (self.verb, self.output_path(self.verb))  # changed: run from a shell since, or launched here

    def launched(self) -> None:
        """The selected stage was launched from here: follow its console anew, even if it was followed already."""
        self.set_reactive(OutputPane.source, (self.verb, self.output_path(self.verb)))
        self.mutate_reactive(OutputPane.source)

    def watch_source(self, source: tuple[str, Path]) -> None:
        verb, path = source
        log = self.query_one(FollowLog)
        if path == console_path(self.run, verb):
            log.follow(path, f"no output yet for {verb}: press l to launch it")
        else:
            rel = path.relative_to(self.run.path)
            log.follow(path, f"waiting for {rel}", note=f"({verb} was not launched from this UI: its log file {rel})")


class MetricsPane(RunPane):
    """The selected stage's metrics: a plot of its main series, its throughput as a sparkline, the latest values.

    `tail` reads the stage's metrics file; only the screen's poll worker calls it, and a snapshot carries the records
    it read (`snapshot.tail` says for which selection)."""

    records: var[int] = var(0, init=False)  # how many records of the selected stage are in: one more redraws the pane

    def __init__(self, run: RunDir):
        super().__init__("Metrics", "metrics", run)
        self.tail: MetricsTail | None = None
        self.series = Series()

    def compose(self) -> ComposeResult:
        with Horizontal():
            with Vertical(id="plots"):
                yield LinePlot(id="plot")
                yield Label("", id="rate-label")
                yield Sparkline([], id="rate")
            yield DataTable(id="latest", cursor_type="none", show_cursor=False)

    def on_mount(self) -> None:
        latest = self.query_one("#latest", DataTable)
        latest.add_column("metric", key="k")
        latest.add_column("latest", key="v")

    def watch_verb(self, verb: str) -> None:
        self.tail = MetricsTail(self.run.metrics_path(verb))
        self.series = Series()
        self.set_reactive(MetricsPane.records, 0)
        self.redraw()

    def watch_snapshot(self, snap: RunSnapshot) -> None:
        if snap.tail is not None and snap.tail is self.tail:  # read for this selection
            self.series.add(snap.records)
            self.records = self.series.records

    def watch_records(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        name = stage(self.verb).name
        main, rate = PLOTS[name]
        pts = self.series.points
        if not any(k in pts for k in main):  # a stage logging other keys: plot what is there, honestly labelled
            main = tuple(k for k in pts if k != rate)[:3]
        self.query_one(LinePlot).set_series(
            [(k.split("/", 1)[1], pts[k]) for k in main if k in pts],
            empty=f"waiting for {self.run.metrics_path(self.verb).relative_to(self.run.path)}",
        )
        rate_pts = pts.get(rate, []) if rate else []
        label = self.query_one("#rate-label", Label)
        label.update(
            f"{rate.split('/', 1)[1]} {fmt(rate_pts[-1][1])} (min {fmt(min(v for _, v in rate_pts))}, "
            f"max {fmt(max(v for _, v in rate_pts))})"
            if rate_pts
            else ""
        )
        spark = self.query_one(Sparkline)
        spark.data = [v for _, v in rate_pts[-200:]]
        spark.display = label.display = bool(rate_pts)
        latest = self.query_one("#latest", DataTable)
        latest.clear()
        for k, v in self.series.latest.items():
            latest.add_row(k.split("/", 1)[-1] if k.startswith(name) or "/" in k else k, fmt(v))


class MediaPane(RunPane):
    """The selected stage's pictures (`tui.widgets.media`: it reads their files while it is on screen)."""

    def __init__(self, run: RunDir):
        super().__init__("Media", "media", run)

    def compose(self) -> ComposeResult:
        yield MediaView(self.app.poll_interval, id="media-view")

    def watch_verb(self, verb: str) -> None:
        self.query_one(MediaView).show(self.run, verb)


class LogFilePane(RunPane):
    """The selected stage's logs/<stage>.log."""

    def __init__(self, run: RunDir):
        super().__init__("Log file", "logfile", run)

    def compose(self) -> ComposeResult:
        yield self.follow_log("file-log")

    def watch_verb(self, verb: str) -> None:
        path = self.run.log_path(verb)
        self.query_one(FollowLog).follow(path, f"{path} does not exist yet")


class ConfigPane(RunPane):
    """The blocks of the run's config the selected stage receives (`model.config_excerpt`)."""

    text: var[str] = var("", init=False)

    def __init__(self, run: RunDir):
        super().__init__("Config", "config", run)

    def compose(self) -> ComposeResult:
        yield Static(id="config-text", markup=False)

    def watch_snapshot(self, snap: RunSnapshot) -> None:
        if snap.verb == self.verb:  # read for the stage selected now
            self.text = snap.config_text

    def watch_text(self, text: str) -> None:
        self.query_one(Static).update(text)


class RoundsPane(RunPane):
    """The run's rounds: one row per pass, the notes under them (a run without rounds: its single pass and why).
    Its tab shows while the last snapshot had a rounds view (the screen hides it at first)."""

    rounds: var[RoundsTable | None] = var(None, init=False)

    def __init__(self, run: RunDir):
        super().__init__("Rounds", "rounds", run)

    def compose(self) -> ComposeResult:
        yield DataTable(id="rounds-table", cursor_type="none", show_cursor=False, zebra_stripes=False)
        yield Static(id="rounds-note", markup=False)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for label, key, width in (
            (" ", "mark", 1),
            ("pass", "pass", 11),
            ("dream", "dream", None),
            ("real check", "real", None),
            ("final", "final", None),
            ("", "note", None),
        ):
            table.add_column(label, key=key, width=width)

    def watch_snapshot(self, snap: RunSnapshot) -> None:
        self.rounds = snap.rounds

    def watch_rounds(self, old: RoundsTable | None, rounds: RoundsTable | None) -> None:
        if (rounds is None) != (old is None):
            tabs = self.query_ancestor(TabbedContent)
            if rounds is None:
                if tabs.active == "rounds":
                    tabs.active = "output"
                tabs.hide_tab("rounds")
            else:
                tabs.show_tab("rounds")
        table = self.query_one(DataTable)
        table.clear()
        if rounds is None:
            return
        keys: set[str] = set()
        for name, dream, real, final, note in rounds.rows:
            key = None if name in keys else name  # a name twice (a hand-edited rounds.json) must not raise
            keys.add(name)
            table.add_row("★" if name == rounds.result else "", name, dream, real, final, note, key=key)
        self.query_one("#rounds-note", Static).update("\n".join(rounds.notes))


class PipelinePane(RunPane):
    """The pipeline launched from here: a status line (running, or how it ended) over its output
    (logs/pipeline.console). Its end is notified once."""

    status: var[str] = var("", init=False)

    def __init__(self, run: RunDir):
        super().__init__("Pipeline", "pipeline", run)
        self.reported: set[int] = set()  # pipeline processes whose end has been notified

    def compose(self) -> ComposeResult:
        yield Static(id="pipeline-status", markup=False)
        yield self.follow_log("pipeline-log")

    def on_mount(self) -> None:
        self.launched()

    def launched(self) -> None:
        """Follow logs/pipeline.console from its end (a pipeline was launched, or the screen opened)."""
        self.query_one(FollowLog).follow(console_path(self.run, PIPELINE), "no pipeline launched from this UI on this run yet")
        self.show_status()

    def watch_snapshot(self) -> None:
        self.show_status()

    def show_status(self) -> None:
        proc = self.process(PIPELINE)
        if proc is None:
            self.status = (
                "P launches the pipeline on this run (every stage in order, then its rounds); "
                "its output shows here (logs/pipeline.console)"
            )
        elif proc.running:
            self.status = f"▶ pipeline {'stopping' if proc.stopping else 'running'} (pid {proc.pid}): S stops it"
        else:
            how = proc.ending
            self.status = f"pipeline {how}: P launches it again (finished stages are skipped, a stopped one resumes)"
            if id(proc) not in self.reported:
                self.reported.add(id(proc))
                self.notify(f"pipeline {how}", severity="error" if how.startswith("failed") else "information")

    def watch_status(self, text: str) -> None:
        self.query_one("#pipeline-status", Static).update(text)


class ToolPane(RunPane):
    """The output of the tool launched last from here (`logs/<tool>.console`); its tab shows once there is one."""

    tool: var[str | None] = var(None, init=False, always_update=True)  # set on each launch: followed anew

    def __init__(self, run: RunDir):
        super().__init__("Tool", "tool", run)

    def compose(self) -> ComposeResult:
        yield self.follow_log("tool-log")

    def watch_tool(self, tool: str) -> None:
        tabs = self.query_ancestor(TabbedContent)
        tabs.show_tab("tool")
        tabs.get_tab("tool").label = f"Tool: {tool}"
        self.query_one(FollowLog).follow(console_path(self.run, tool), f"no output yet from {tool}")
