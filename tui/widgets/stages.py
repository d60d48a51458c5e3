"""The top of the run screen (`tui.screens.run`): its title line, the stage table and where the run stands.

Like the panes under them (`tui.widgets.panes`), each gets every read of the run directory as its reactive
`snapshot` and takes its own part of it into a reactive of its own, whose watcher redraws only what changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.markup import escape
from textual.reactive import var
from textual.widgets import DataTable, Static
from wm.tui.model import RunSnapshot, figures_text

from wm.core.rundir import STAGES, RunDir

if TYPE_CHECKING:
    from wm.tui.app import WMApp

BUSY = ("running", "starting", "stopping")  # a stage in one of these states cannot be launched
Cells = tuple[str, str, str]  # a stage's row: (mark, state, key figures)
COLUMNS = ("mark", "state", "figs")  # the keys of Cells' columns


class SnapshotLine(Static):
    """A line of text made from each snapshot (`line`), redrawn when the text changes."""

    # always_update: every read is handed on, even one equal to the last (the panes' parts come with the processes)
    snapshot: var[RunSnapshot | None] = var(None, init=False, always_update=True)
    text: var[str] = var("", init=False)

    def line(self, snap: RunSnapshot) -> str:
        raise NotImplementedError

    def watch_snapshot(self, snap: RunSnapshot) -> None:
        self.text = self.line(snap)

    def watch_text(self, text: str) -> None:
        self.update(text)


class RunTitle(SnapshotLine):
    """`run <path>  env <name>`, with the error of a read that failed."""

    def __init__(self, run: RunDir):
        super().__init__(f"[b]run[/b] {run.path}", id="run-title")
        self.run = run

    def line(self, snap: RunSnapshot) -> str:
        error = f"  [red]read error: {escape(snap.error)}[/red]" if snap.error is not None else ""
        return f"[b]run[/b] {self.run.path}{snap.env}{error}"

    def failed(self, error: str) -> None:
        """A snapshot could not be shown: say why (the next read tries again)."""
        self.text = f"[b]run[/b] {self.run.path}  [red]read error: {escape(error)}[/red]"


class Standing(SnapshotLine):
    """Is the run on track? Where it stands against its preset's recorded runs (`wm reference`); hidden without one."""

    def __init__(self) -> None:
        super().__init__(id="standing", markup=False)

    def on_mount(self) -> None:
        self.display = False  # until a read finds the run's recorded runs

    def line(self, snap: RunSnapshot) -> str:
        return snap.standing

    def watch_text(self, text: str) -> None:
        self.update(text)
        self.display = bool(text)


class StageTable(DataTable):
    """One row per stage: a mark (▶ running from here, ✗ failed), its state and its key figures.

    Its `cells` are the last read's rows with this UI's own processes over them (a stage launched here is "starting"
    until its LOCK shows, "stopping" once stopped); a watcher updates the cells that changed. A process launched here
    that has ended is notified once.
    """

    app: WMApp
    snapshot: var[RunSnapshot | None] = var(None, init=False, always_update=True)
    cells: var[dict[str, Cells]] = var(dict, init=False)  # per stage, what its row shows

    def __init__(self, run: RunDir):
        super().__init__(id="stages", cursor_type="row", zebra_stripes=False)
        self.run = run
        self.reported: set[int] = set()  # launched processes whose end has been notified
        self.drawn_widths: tuple[int, ...] = ()  # the column widths the table last drew its lines at

    def on_mount(self) -> None:
        self.add_column(" ", key="mark", width=1)
        self.add_column("stage", key="stage", width=16)
        self.add_column("state", key="state", width=15)
        self.add_column("key figures", key="figs")
        for s in STAGES:
            self.add_row("", s.verb, "", "", key=s.verb)

    @property
    def states(self) -> dict[str, str]:
        """Each stage's state as shown (none before the first read)."""
        return {verb: state for verb, (_, state, _) in self.cells.items()}

    def busy(self, verb: str) -> bool:
        """Whether `verb` runs (launched from here, or found running, starting or stopping by the last read)."""
        proc = self.app.process(self.run.path, verb)
        return (proc is not None and proc.running) or self.states.get(verb) in BUSY

    def watch_snapshot(self, snap: RunSnapshot) -> None:
        self.redraw_if_widened()
        if snap.rows is None:  # the states could not be read this time: keep what is shown
            return
        cells = dict(self.cells)
        for verb, state, figs in snap.rows:
            proc = self.app.process(self.run.path, verb)
            mark = ""
            if proc is not None and proc.running:
                mark = "▶"
                if state != "running":
                    state = "stopping" if proc.stopping else "starting"
            elif proc is not None:
                if proc.poll() not in (0, None) and not proc.stopping:
                    mark = "✗"  # failed; the Output pane has the error line
                if id(proc) not in self.reported:
                    self.reported.add(id(proc))
                    how = proc.ending
                    self.notify(f"{verb} {how}", severity="error" if how.startswith("failed") else "information")
            cells[verb] = (mark, state, figures_text(figs))
        self.cells = cells

    def watch_cells(self, old: dict[str, Cells], new: dict[str, Cells]) -> None:
        for verb, row in new.items():
            for key, was, now in zip(COLUMNS, old.get(verb, ("", "", "")), row, strict=True):
                if now != was:  # the figures column grows (and shrinks) to its longest figures
                    self.update_cell(verb, key, now, update_width=key == "figs")
        self.set_timer(0.2, self.redraw_if_widened)

    def redraw_if_widened(self) -> None:
        """Textual's DataTable measures a column's new width when idle but keeps the lines it drew before at the old
        width until a cell changes again, so a figure could stay cut: once the widths differ from those last drawn,
        its caches are dropped and it draws again (checked after each change and at every read)."""
        widths = tuple(c.get_render_width(self) for c in self.ordered_columns)
        if widths != self.drawn_widths:
            self.drawn_widths = widths
            self._clear_caches()
            self.refresh()
