"""The tools form (`T` on the run screen): the run's report, or the result table over this run and others, with the
command it will run shown before it runs."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Checkbox, Input, Label, RadioButton, RadioSet, Static
from wm.tui.screens.launch import CommandForm, LaunchRequest

# (tool, what the form says it does)
TOOL_CHOICES = (
    ("report", "report: the run's Markdown report with its figures (report.md, plots/)"),
    ("results", "results: one row per run (mean ± std, bootstrap CI, the random policy), --plot its figure"),
)


def tool_args(tool: str, run: Path, runs: str = "", out: str = "", plot: bool = True) -> list[str]:
    """The tool's arguments: `report --run RUN`; `results --runs RUNS... --out OUT [--plot]` (`runs` a shell-quoted
    list, default this run; `out` default `RUN/results`). Raises ValueError on a bad quote."""
    if tool == "report":
        return ["--run", str(run)]
    names = shlex.split(runs) if runs.strip() else [str(run)]
    return ["--runs", *names, "--out", out.strip() or str(run / "results"), *(["--plot"] if plot else [])]


class ToolsScreen(CommandForm):
    """Choose a tool and its arguments; dismisses with a LaunchRequest (verb the tool, `extra` its arguments) or None."""

    ERROR, COMMAND = "#tools-error", "#tools-command"

    def __init__(self, run: Path, command: Callable[[LaunchRequest], list[str]]):
        super().__init__()
        self.run = run
        self.command = command  # the app's builder, so the preview is exactly what runs

    def compose(self) -> ComposeResult:
        with Vertical(id="tools", classes="dialog"):
            yield Label(f"[b]Tools[/b] on {self.run}", id="tools-title")
            with RadioSet(id="tool-choice"):
                for i, (_, label) in enumerate(TOOL_CHOICES):
                    yield RadioButton(label, value=i == 0)
            with Horizontal(id="results-opts"):
                yield Label("--runs ", classes="field")
                yield Input(shlex.quote(str(self.run)), id="tool-runs", compact=True)
                yield Label(" --out ", classes="field")
                yield Input(shlex.quote(str(self.run / "results")), id="tool-out", compact=True)
                yield Checkbox("--plot", value=True, id="plot", compact=True)
            yield Static(id="tools-error")
            yield Static(id="tools-command", markup=False)
            with Horizontal(classes="buttons"):
                yield Button("Launch (ctrl+l)", id="go", variant="success", compact=True)
                yield Button("Cancel (esc)", id="cancel", compact=True)

    def on_mount(self) -> None:
        self.query_one("#tool-choice", RadioSet).focus()
        self.refresh_preview()

    def tool(self) -> str:
        index = self.query_one("#tool-choice", RadioSet).pressed_index
        return TOOL_CHOICES[max(index, 0)][0]

    def current(self) -> LaunchRequest:
        tool = self.tool()
        out = shlex.split(self.query_one("#tool-out", Input).value)
        args = tool_args(
            tool,
            self.run,
            self.query_one("#tool-runs", Input).value,
            out[0] if out else "",
            self.query_one("#plot", Checkbox).value,
        )
        return LaunchRequest(tool, extra=args)

    def refresh_preview(self) -> None:
        self.query_one("#results-opts", Horizontal).display = self.tool() == "results"  # report has no options
        super().refresh_preview()
