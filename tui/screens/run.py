"""One run: the stage table (live states and key figures), and panes for the selected stage's output,
metrics (plot + latest values), log file and config. Launch, resume and stop act on the selected stage."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.markup import escape
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Label, Sparkline, Static, TabbedContent, TabPane

from tui.model import PLOTS, MetricsTail, Series, figures_text, fmt
from tui.screens.launch import LaunchRequest, LaunchScreen
from tui.widgets.follow_log import FollowLog
from tui.widgets.plot import LinePlot
from wm.rundir import STAGES, RunDir, stage

if TYPE_CHECKING:
    from tui.app import WMApp

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
        Binding("g", "tab('logfile')", "Log", show=False),
        Binding("c", "tab('config')", "Config", show=False),
        Binding("escape", "back", "Runs"),
    ]

    def __init__(self, path: Path):
        super().__init__()
        self.run = RunDir(path)
        self.verb = STAGES[0].verb
        self.states: dict[str, str] = {}
        self.tail: MetricsTail | None = None
        self.series = Series()
        self.reported: set[int] = set()  # launched processes whose exit has been notified

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
        self.poll()
        self.select(self.verb)
        self.set_interval(self.app.poll_interval, self.poll)

    # ------------------------------------------------------------------ polling the run dir
    def poll(self) -> None:
        """Read states, key figures and new metrics from the run directory (cheap: a few stats and tails)."""
        try:
            self._poll()
        except Exception as e:  # a file caught mid-rewrite must not take the UI down; the next tick retries
            self.query_one("#run-title", Static).update(f"[b]run[/b] {self.run.path}  [red]read error: {escape(str(e))}[/red]")

    def _poll(self) -> None:
        from wm.status import stage_rows

        cfg = None
        try:
            cfg = self.run.load_config()
        except Exception:  # a config.yaml being rewritten; next tick
            pass
        env = f"  env {cfg.env.name}" if cfg is not None and "env" in cfg else "  (new run: no config.yaml yet)"
        self.query_one("#run-title", Static).update(f"[b]run[/b] {self.run.path}{env}")
        table = self.query_one("#stages", DataTable)
        for verb, state, figs in stage_rows(self.run):
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
        self.poll_metrics()

    def poll_metrics(self) -> None:
        if self.tail is None:
            return
        records = self.tail.read()
        if records or not self.series.records:
            self.series.add(records)
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
            f"max {fmt(max(v for _, v in rate_pts))})" if rate_pts else ""
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
        """Show `verb`'s output, metrics, log file and config in the panes."""
        self.verb = verb
        self.tail = MetricsTail(self.run.metrics_path(verb))
        self.series = Series()
        self.show_metrics()
        self.poll_metrics()
        self.follow_output()
        self.follow_logfile()
        cfg_text = "(no config.yaml yet: the first launched stage writes it)"
        if self.run.config_path.exists():
            from tui.model import config_excerpt

            try:
                cfg_text = config_excerpt(self.run.load_config(), verb)
            except Exception as e:
                cfg_text = f"cannot read {self.run.config_path}: {e}"
        self.query_one("#config-text", Static).update(cfg_text)

    def console_path(self, verb: str) -> Path:
        return self.run.path / "logs" / f"{stage(verb).name}.console"

    def follow_output(self) -> None:
        """Stream the selected stage's console output (launched now or earlier) into the Output pane."""
        self.query_one("#output-log", FollowLog).follow(self.console_path(self.verb), f"no output yet for {self.verb}: press l to launch it")

    def follow_logfile(self) -> None:
        """Stream the selected stage's logs/<stage>.log into the Log file pane."""
        path = self.run.log_path(self.verb)
        self.query_one("#file-log", FollowLog).follow(path, f"{path} does not exist yet")

    # ------------------------------------------------------------------ actions
    def action_tab(self, pane: str) -> None:
        self.query_one("#panes", TabbedContent).active = pane

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_launch(self) -> None:
        self._open_form(resume=False)

    def action_resume(self) -> None:
        if self.states.get(self.verb) != "resumable":
            self.notify(f"{self.verb} is {self.states.get(self.verb)}: nothing to resume (l launches)", severity="warning")
            return
        self._open_form(resume=True)

    def _open_form(self, resume: bool) -> None:
        if self.states.get(self.verb) in ("running", "starting", "stopping"):
            self.notify(f"{self.verb} is already running", severity="warning")
            return
        from wm.config import blocks

        try:
            names = list(blocks())
        except Exception as e:
            self.notify(f"cannot read configs/: {e}", severity="error")
            return

        def launched(req: LaunchRequest | None) -> None:
            if req is not None:
                self.start(req)

        self.app.push_screen(LaunchScreen(self.run.path, self.verb, names, resume, lambda r: self.app.command(self.run.path, r)), launched)

    def start(self, req: LaunchRequest) -> None:
        """Launch `req` as a subprocess and show its output."""
        try:
            proc = self.app.launch(self.run.path, req, self.console_path(req.verb))
        except (OSError, ValueError) as e:
            self.notify(f"cannot launch {req.verb}: {e}", severity="error")
            return
        self.notify(f"launched {req.verb} (pid {proc.pid})")
        self.action_tab("output")
        if req.verb == self.verb:
            self.follow_output()
        self.poll()

    def action_stop(self) -> None:
        """SIGTERM the selected stage's process group: ours, or the LOCK holder's (a stage left running)."""
        from tui.process import process_group, signal_group

        proc = self.app.process(self.run.path, self.verb)
        if proc is not None and proc.running:
            proc.stop()
            self.notify(f"sent SIGTERM to {self.verb} (process group {proc.pid})")
        else:
            pid = self.run.lock_owner(self.verb)
            pgid = process_group(pid) if pid else None
            if pgid is not None and signal_group(pgid):
                self.notify(f"sent SIGTERM to {self.verb} (process group {pgid}, not launched from this UI)")
            else:
                self.notify(f"{self.verb} is not running", severity="warning")
        self.poll()
