"""The launch form: config blocks, `--set` overrides, MPI ranks; shows the resolved config before launch. The same
form launches the whole pipeline (`verb` "pipeline": `--mpi N` and `--demo` too) and evaluate's variants (the real game,
the dream, the random policy, the τ sweep, with `--episodes`)."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, RadioSet, Select, SelectionList, Static
from wm.tui.model import config_excerpt, resolve
from wm.tui.process import PIPELINE, TOOLS, build_command, pipeline_command, tool_command

from wm.core.registry import ranked

# evaluate's variants in its form: (label, the flag; "" the real game with C)
EVALUATE_MODES = (
    ("real game", ""),
    ("dream (--dream)", "--dream"),
    ("random policy (--random)", "--random"),
    ("τ sweep (--sweep)", "--sweep"),
)


@dataclass
class LaunchRequest:
    """What the form asks for: `python -m wm <verb> --run RUN --configs ... --set ... [--force] EXTRA...` on `ranks`
    ranks (for the pipeline: its `--mpi`), for the pipeline `--demo`; `extra`: the verb's own flags (evaluate's
    `--dream` or `--episodes N`; a tool's whole argument list, `tui.process.tool_command`)."""

    verb: str
    configs: list[str] = field(default_factory=list)
    sets: list[str] = field(default_factory=list)
    ranks: int = 1
    force: bool = False
    demo: bool = False
    extra: list[str] = field(default_factory=list)


def request_command(run: Path, req: LaunchRequest, **kw) -> list[str]:
    """The argv of `req` on `run`: `pipeline_command` for the pipeline, `tool_command` for a tool (report,
    results), else the stage's `build_command` with its extra flags; `kw`: `python=`, `launcher=`."""
    if req.verb == PIPELINE:
        return pipeline_command(run, req.configs, req.sets, req.ranks, req.force, req.demo, **kw)
    if req.verb in TOOLS:
        return tool_command(req.verb, req.extra, kw.get("python"))
    return [*build_command(req.verb, run, req.configs, req.sets, req.ranks, req.force, **kw), *req.extra]


class CommandForm(ModalScreen[LaunchRequest | None]):
    """A form that shows the command it will run before it runs it: `current()` reads the request from the widgets,
    `check(req)` vets it (its result goes to `shown`), `self.command(req)` builds the argv. Any error is one line in
    the `ERROR` widget and the launch button stays off; dismisses with the LaunchRequest, or None when cancelled."""

    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("ctrl+l", "launch", "Launch")]
    ERROR, COMMAND = "#launch-error", "#command"  # the widgets of the error line and of the command
    command: Callable[[LaunchRequest], list[str]]
    request: LaunchRequest | None = None
    error: str | None = None

    def current(self) -> LaunchRequest:
        raise NotImplementedError

    def check(self, req: LaunchRequest) -> Any:
        """Raise for a request that cannot run; what it returns is passed to `shown`."""
        return None

    def shown(self, req: LaunchRequest | None, checked: Any = None) -> None:
        """Update the form's other widgets for a request that can run (`req`), or for none."""

    def refresh_preview(self) -> None:
        """Show the command, or the one error line."""
        error_w, command_w = self.query_one(self.ERROR, Static), self.query_one(self.COMMAND, Static)
        try:
            req = self.current()
            checked = self.check(req)
            argv = self.command(req)
        except Exception as e:  # WMError, a bad shlex quote, bad ranks or counts: all shown as one line
            self.request, self.error = None, str(e).splitlines()[0] if str(e) else type(e).__name__
            error_w.update(f"[b red]error:[/] {escape(self.error)}")
            error_w.display = True
            command_w.update("")
            self.shown(None)
            self.query_one("#go", Button).disabled = True
            return
        self.request, self.error = req, None
        error_w.display = False
        self.shown(req, checked)
        command_w.update("$ " + shlex.join(argv))
        self.query_one("#go", Button).disabled = False

    @on(SelectionList.SelectedChanged)
    @on(Select.Changed)
    @on(RadioSet.Changed)
    @on(Input.Changed)
    @on(Checkbox.Changed)
    def _changed(self) -> None:
        self.refresh_preview()

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.action_launch()

    @on(Button.Pressed, "#go")
    def action_launch(self) -> None:
        self.refresh_preview()
        if self.request is not None:
            self.dismiss(self.request)
        else:
            self.notify(self.error or "cannot launch", severity="error")

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


class LaunchScreen(CommandForm):
    """Form for one stage, or the pipeline. Dismisses with a LaunchRequest, or None when cancelled.

    `ranks`: the MPI ranks field's starting value (the pipeline and the stages that run across ranks: collect,
    train-controller, evaluate).
    """

    def __init__(
        self,
        run: Path,
        verb: str,
        blocks: list[str],
        resume: bool = False,
        command: Callable[[LaunchRequest], list[str]] | None = None,
        ranks: int = 1,
    ):
        super().__init__()
        self.run = run
        self.verb = verb
        self.blocks = blocks
        self.resume = resume
        self.pipeline = verb == PIPELINE
        self.ranked = self.pipeline or ranked(verb)
        self.evaluate = verb == "evaluate"
        self.ranks = ranks
        # the app's own command builder, so the form shows exactly what will run (python prefix, launcher)
        self.command = command or (lambda r: request_command(self.run, r))

    def compose(self) -> ComposeResult:
        stored = (self.run / "config.yaml").exists()
        with Vertical(id="launch", classes="dialog"):
            yield Label(f"[b]{'Resume' if self.resume else 'Launch'} {self.verb}[/b] on {self.run}", id="launch-title")
            with Horizontal(id="launch-top"):
                with Vertical(id="launch-left"):
                    yield Label("Blocks" + (" (none = stored)" if stored else " (none = defaults)"), classes="field")
                    yield SelectionList[str](*[(b, b) for b in self.blocks], id="blocks")
                with Vertical(id="launch-right"):
                    yield Label("--set overrides (key=value ...)", classes="field")
                    yield Input(placeholder="vae.epochs=3 es.popsize=8", id="sets", compact=True)
                    with Horizontal(id="launch-opts"):
                        if self.ranked:
                            yield Label("--mpi " if self.pipeline else "MPI ranks ", classes="field")
                            yield Input(str(self.ranks), type="integer", id="ranks", compact=True)
                        yield Checkbox("--force (redo)", id="force", compact=True)
                        if self.pipeline:
                            yield Checkbox("--demo", id="demo", compact=True)
                    if self.evaluate:
                        with Horizontal(id="launch-eval"):
                            yield Select(EVALUATE_MODES, value="", allow_blank=False, id="mode", compact=True)
                            yield Label(" --episodes ", classes="field")
                            yield Input(placeholder="config", type="integer", id="episodes", compact=True)
            yield Static(id="launch-error")
            with VerticalScroll(id="launch-config"):
                yield Static(id="resolved", markup=False)
            yield Static(id="command", markup=False)
            with Horizontal(classes="buttons"):
                yield Button("Resume (enter)" if self.resume else "Launch (enter)", id="go", variant="success", compact=True)
                yield Button("Cancel (esc)", id="cancel", compact=True)

    def on_mount(self) -> None:
        self.query_one("#sets", Input).focus()
        self.refresh_preview()

    def current(self) -> LaunchRequest:
        """The request described by the form right now (may not resolve)."""
        sets = shlex.split(self.query_one("#sets", Input).value)
        ranks = 1
        if self.ranked:
            raw = self.query_one("#ranks", Input).value.strip()
            ranks = int(raw) if raw.lstrip("-").isdigit() else 0
        extra: list[str] = []
        if self.evaluate:
            mode = self.query_one("#mode", Select).value
            extra += [mode] if isinstance(mode, str) and mode else []
            episodes = self.query_one("#episodes", Input).value.strip()
            if episodes:
                if not episodes.isdigit() or int(episodes) < 1:
                    raise ValueError(f"--episodes must be a whole number >= 1, got {episodes!r}")
                extra += ["--episodes", episodes]
        return LaunchRequest(
            self.verb,
            list(self.query_one("#blocks", SelectionList).selected),
            sets,
            ranks,
            self.query_one("#force", Checkbox).value,
            self.pipeline and self.query_one("#demo", Checkbox).value,
            extra,
        )

    def check(self, req: LaunchRequest) -> Any:
        """The config the CLI will resolve for `req` (raises WMError)."""
        if req.ranks < 1:
            raise ValueError("MPI ranks must be a whole number >= 1")
        return resolve(self.run, req.configs, req.sets)

    def shown(self, req: LaunchRequest | None, checked: Any = None) -> None:
        self.query_one("#resolved", Static).update(config_excerpt(checked, self.verb) if req is not None else "")
