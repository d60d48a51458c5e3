"""Small modal screens: the help screen, the quit question (stop or leave running stages) and the yes/no question
before a stop."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static

# One line per key, no hard wraps: the help box wraps each to its own width (a line broken for one width wrapped
# again in a narrower box, and left a ragged column in a wider one).
HELP = "\n".join(
    [
        "[b]World Models terminal UI[/b]  (wm tui RUN_DIR)",
        "",
        "[b]Runs[/b]      ↑/↓ choose a run, [b]enter[/b] open it, [b]n[/b] name a new run",
        "[b]Stages[/b]    ↑/↓ choose a stage (states re-read from the run dir each second)",
        "  [b]l[/b]  launch it: config blocks, --set overrides, MPI ranks (collect, train-controller, evaluate); "
        "evaluate's form picks the real game, the dream, the random policy or the τ sweep, and --episodes; the form "
        "shows the resolved config first ([b]enter[/b] launches, [b]esc[/b] cancels)",
        "  [b]r[/b]  resume a resumable stage (same form, stored config)",
        "  [b]s[/b]  stop: asks, then SIGTERM to its process group (it checkpoints; resume later)",
        "  [b]o[/b] output  [b]m[/b] metrics  [b]i[/b] media  [b]g[/b] logs/<stage>.log  [b]c[/b] config "
        "(output: the stage's log file when it ran from a shell or the pipeline)",
        "  [b]p[/b]  play in the run's dream (←/→, r restart, t/g τ), [b]w[/b] watch its C there",
        "  [b]esc[/b] back to the run list",
        "[b]The run[/b]",
        "  [b]P[/b]  launch the pipeline: every stage, then its rounds (same form: blocks, --set, --mpi N, --force, --demo)",
        "  [b]O[/b]  the pipeline's output   [b]S[/b]  stop the pipeline (asks first)",
        "  [b]R[/b]  rounds: each pass's dream score and real check, the final check, the result (★), the random "
        "check, why the rounds stopped (a run without rounds: its single pass, and why)",
        "  [b]T[/b]  tools: the run's report, or the result table over this run and others (results --runs … --out … "
        "--plot); [b]U[/b] the tool's output",
        "[b]Anywhere[/b]  [b]?[/b] help  [b]q[/b] quit (asks about stages still running)",
        "  [b]tab[/b] moves focus between the stage table and the panes",
        "  [b]ctrl+p[/b] the command palette (themes, screenshot, keys)",
        "",
        "The footer shows the keys that act now: l and r while the selected stage is not running (r when it is "
        "resumable), s while it runs, S while the pipeline launched here runs.",
        "",
        "Stages run as `python -m wm <verb> ...` in their own process group and write their output to "
        "logs/<stage>.console (the pipeline to logs/pipeline.console): a stage left running after quitting keeps "
        "going, and its output is shown again when you come back.",
        "",
    ]
)


class HelpScreen(ModalScreen[None]):
    """Key bindings and what the UI does: one line per key, wrapped by the box to its width."""

    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help", classes="dialog"):
            yield Static(HELP)
            yield Label("[dim]esc closes[/dim]")


class QuitScreen(ModalScreen[str | None]):
    """Asks what to do with stages this UI launched that are still running: 'stop', 'leave' or None (stay)."""

    BINDINGS = [
        Binding("s", "choose('stop')", "Stop them"),
        Binding("l", "choose('leave')", "Leave running"),
        Binding("escape,c", "choose(None)", "Cancel"),
    ]

    def __init__(self, running: list[str]):
        super().__init__()
        self.running = running

    def compose(self) -> ComposeResult:
        with Vertical(id="quit", classes="dialog"):
            yield Label(f"Still running: [b]{', '.join(self.running)}[/b]")
            yield Label("Stop them (SIGTERM, they checkpoint) or leave them running?")
            with Horizontal(classes="buttons"):
                yield Button("Stop & quit (s)", id="stop", variant="error")
                yield Button("Leave & quit (l)", id="leave", variant="primary")
                yield Button("Cancel (esc)", id="cancel")

    def action_choose(self, choice: str | None) -> None:
        self.dismiss(choice)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "cancel" else event.button.id)


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question (before stopping a stage or the pipeline): dismisses with True for yes, False otherwise."""

    BINDINGS = [
        Binding("y", "choose(True)", "Yes"),
        Binding("n,escape", "choose(False)", "No"),
    ]

    def __init__(self, question: str, detail: str = "", yes: str = "Yes", no: str = "No"):
        super().__init__()
        self.question = question
        self.detail = detail
        self.yes = yes
        self.no = no

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm", classes="dialog"):
            yield Label(f"[b]{escape(self.question)}[/b]", id="confirm-question")
            if self.detail:
                yield Static(self.detail, id="confirm-detail", markup=False)  # wraps, unlike a Label
            with Horizontal(classes="buttons"):
                yield Button(f"{self.yes} (y)", id="yes", variant="error")
                yield Button(f"{self.no} (n)", id="no", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()  # enter on a stray keypress keeps it running

    def action_choose(self, choice: bool) -> None:
        self.dismiss(choice)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")
