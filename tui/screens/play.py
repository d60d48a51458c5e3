"""Play inside M's dream (or the real game) from the TUI: `p` on a run's screen.

TensorFlow stays out of the TUI: the screen runs `python -m wm play --run R --serve [--real] [--agent]` (the step
loop of `wm.tools.play`, shared with its pygame window) and talks JSON lines with it: a step request per tick with the
keys held, a frame back (a PNG, drawn with textual-image: Kitty or Sixel graphics where the terminal has them,
half blocks elsewhere). A terminal reports key presses, not releases, so a key counts as held for `HOLD_TICKS`
ticks after its last press (a held key's auto-repeat keeps it held); space lets go of everything.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import io
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Footer, Label, Static
from wm.tui.process import child_env

if TYPE_CHECKING:
    from wm.tui.app import WMApp

TICK_S = 0.12  # a step request every tick (one in flight at a time)
HOLD_TICKS = 4  # a key press holds its key this many ticks
STDERR_LINES = 50  # the server's last stderr lines kept (the last one is shown if it stops)


def play_command(python: list[str], run: Path, real: bool = False, agent: bool = False, seed: int = 0) -> list[str]:
    argv = [*python, "-m", "wm", "play", "--run", str(run), "--serve", "--seed", str(seed)]
    return argv + (["--real"] if real else []) + (["--agent"] if agent else [])


class PlayScreen(Screen[None]):
    """The dream (or the game) of one run, driven from the keyboard or watched (`--agent`)."""

    app: WMApp
    # Within 80 columns: steering and τ grouped under one label each, shown only where they act (check_action)
    STEER = Binding.Group("Steer")
    TAU = Binding.Group("τ ±")
    PEDALS = Binding.Group("Gas, brake")
    BINDINGS = [
        Binding("left", "press('left')", "Left", group=STEER),
        Binding("right", "press('right')", "Right", group=STEER),
        Binding("up", "press('up')", "Gas", group=PEDALS),  # where the env has them (CarRacing): check_action
        Binding("down", "press('down')", "Brake", group=PEDALS),
        Binding("space", "release", "Let go"),
        Binding("r", "restart", "Restart"),
        Binding("t", "temperature(0.05)", "τ +", group=TAU),
        Binding("g", "temperature(-0.05)", "τ −", group=TAU),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, run: Path, real: bool = False, agent: bool = False, python: list[str] | None = None):
        super().__init__()
        self.run_path, self.real, self.agent = Path(run), real, agent
        self.python = python
        self.proc: asyncio.subprocess.Process | None = None
        self.held: dict[str, int] = {}  # key -> ticks left
        self.keys: list[str] | None = None  # the keys the server accepts, once it is ready (none: only C drives)
        self.waiting = False  # a request is in flight
        self.temperature: float | None = None
        self.frames = 0  # frames drawn (tests)
        self.last: dict[str, Any] = {}
        self.closing = False  # set once the screen is leaving: late messages are read and dropped

    def compose(self) -> ComposeResult:
        mode = "the real game" if self.real else "M's dream"
        who = "C plays" if self.agent else "you play"
        from textual_image.widget import Image

        with Vertical(id="play"):
            yield Label(f"{self.run_path} — {mode}, {who}", id="play-title")
            yield Static("starting (loading V and M)…", id="play-wait")
            yield Image(None, id="play-frame")
            yield Label("", id="play-status")
        yield Footer(show_command_palette=False)

    async def on_mount(self) -> None:
        python = self.python or getattr(self.app, "python", None) or [sys.executable]
        env = child_env(getattr(self.app, "env", None))
        self.proc = await asyncio.create_subprocess_exec(
            *play_command(list(python), self.run_path, self.real, self.agent),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._drain = asyncio.create_task(self._read_stderr())
        self.run_worker(self._read(), exclusive=True, group="play-reader")
        self.set_interval(TICK_S, self._tick)

    # ------------------------------------------------------------------ the protocol
    async def _send(self, obj: dict[str, Any]) -> None:
        if self.proc is None or self.proc.stdin is None or self.proc.returncode is not None:
            return
        try:
            self.proc.stdin.write((json.dumps(obj) + "\n").encode())
            await self.proc.stdin.drain()
            self.waiting = obj.get("op") != "quit"
        except (BrokenPipeError, ConnectionResetError):
            pass

    async def _read_stderr(self) -> None:
        """Read the server's stderr as it comes (a full pipe would block the server and freeze the screen), keeping
        its last lines for the message if it stops."""
        assert self.proc is not None and self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            if text := line.decode(errors="replace").strip():
                self.stderr_tail.append(text)

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                break
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            self.waiting = False
            if self.closing:  # the screen's widgets may already be gone
                continue
            if msg.get("ready"):
                self.keys = list(msg.get("keys", []))
                self.refresh_bindings()  # gas and brake show once the env's keys are known
                await self._send({"op": "reset"})
            elif "error" in msg:
                self._status(f"error: {msg['error']}")
            elif "png" in msg:
                self._draw(msg)
        await self._drain
        code = await self.proc.wait()
        if code and not self.closing:
            self._status(f"play stopped (exit {code}): {self.stderr_tail[-1] if self.stderr_tail else '?'}")

    def _draw(self, msg: dict[str, Any]) -> None:
        from PIL import Image as PILImage
        from textual_image.widget import Image

        frames = list(self.query("#play-frame").results(Image))
        if not frames:  # the screen is being torn down (the app quit without `escape`)
            return
        image = PILImage.open(io.BytesIO(base64.b64decode(msg["png"])))
        image.load()
        frames[0].image = image
        for wait in self.query("#play-wait").results(Static):
            wait.display = False
        self.temperature = msg.get("temperature")
        self.last = msg
        self.frames += 1
        held = ", ".join(sorted(self.held)) or "nothing"
        self._status(f"{msg['status']}   keys: {held}")

    def _status(self, text: str) -> None:
        for label in self.query("#play-status").results(Label):
            label.update(text)

    async def _tick(self) -> None:
        for k in list(self.held):
            self.held[k] -= 1
            if self.held[k] <= 0:
                del self.held[k]
        if self.waiting or self.keys is None or self.last.get("done"):
            return
        await self._send({"op": "step", "keys": sorted(k for k in self.held if k in self.keys)})

    # ------------------------------------------------------------------ keys
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Steering and letting go only while you play (not while C does), gas and brake only where the env has them
        (the keys the server accepts), τ only in the dream: hidden otherwise."""
        if action == "press" and parameters and parameters[0] in ("up", "down"):
            return not self.agent and self.keys is not None and parameters[0] in self.keys
        if action in ("press", "release"):
            return not self.agent
        if action == "temperature":
            return not self.real
        return True

    def action_press(self, key: str) -> None:
        if key in ("left", "right"):  # one direction at a time: the other lets go
            self.held.pop("right" if key == "left" else "left", None)
        self.held[key] = HOLD_TICKS

    def action_release(self) -> None:
        self.held.clear()

    async def action_restart(self) -> None:
        self.last = {}
        await self._send({"op": "reset"})

    async def action_temperature(self, delta: float) -> None:
        if self.real or self.temperature is None:
            return
        self.last = {}
        await self._send({"op": "temperature", "value": round(self.temperature + float(delta), 3)})

    async def action_back(self) -> None:
        await self.stop()
        self.app.pop_screen()

    async def stop(self) -> None:
        """Ask the server to quit, then make sure it is gone."""
        self.closing = True
        if self.proc is None or self.proc.returncode is not None:
            return
        await self._send({"op": "quit"})
        try:
            await asyncio.wait_for(self.proc.wait(), 3.0)
        except asyncio.TimeoutError:
            self.proc.kill()
            await self.proc.wait()

    async def on_unmount(self) -> None:
        await self.stop()
