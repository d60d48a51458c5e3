"""The run picker: the runs under a directory (default `runs/`), plus a field to name a new one."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Input, Label, OptionList
from textual.widgets.option_list import Option
from wm.tui.model import find_runs, run_labels, run_summary

if TYPE_CHECKING:
    from wm.tui.app import WMApp


class PickerScreen(Screen[None]):
    """Choose a run directory under `root`."""

    app: WMApp
    BINDINGS = [Binding("n", "new", "New run"), Binding("f5", "reload", "Reload", show=False)]

    class OpenRun(Message):
        """Open run directory `path` (it need not exist yet); handled by the app."""

        def __init__(self, path: Path):
            super().__init__()
            self.path = path

    def __init__(self, root: Path):
        super().__init__()
        self.root = root

    def compose(self) -> ComposeResult:
        yield Label(f"[b]Runs in {self.root}[/b]  (enter opens, n names a new run)", id="picker-title")
        yield OptionList(id="runs")
        yield Input(placeholder=f"new run name (created under {self.root} by its first stage)", id="new-run")
        yield Footer(show_command_palette=False)  # as on the run screen: ctrl+p still opens it

    def on_mount(self) -> None:
        self.action_reload()
        self.query_one("#runs", OptionList).focus()

    def on_screen_resume(self) -> None:
        self.action_reload()

    def action_reload(self) -> None:
        runs = self.query_one("#runs", OptionList)
        highlighted = runs.highlighted
        runs.clear_options()
        found = find_runs(self.root)
        for path, label in zip(found, run_labels(self.root, found), strict=True):
            runs.add_option(Option(f"{label:<24} {run_summary(path)}", id=str(path)))
        if not found:
            runs.add_option(Option(f"no runs in {self.root} yet: press n to name one", id="", disabled=True))
        else:
            runs.highlighted = min(highlighted or 0, len(found) - 1)

    def action_new(self) -> None:
        self.query_one("#new-run", Input).focus()

    @on(OptionList.OptionSelected, "#runs")
    def _open(self, event: OptionList.OptionSelected) -> None:
        if event.option.id:
            self.post_message(self.OpenRun(Path(event.option.id)))

    @on(Input.Submitted, "#new-run")
    def _new(self, event: Input.Submitted) -> None:
        name = event.value.strip()
        if not name or "/" in name or name.startswith("."):
            self.notify("a run name is one plain folder name, e.g. doom_small", severity="error")
            return
        event.input.value = ""
        self.post_message(self.OpenRun(self.root / name))
