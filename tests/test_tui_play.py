"""The TUI's play screen: keys held become the server's step requests, frames are drawn, r restarts,
τ keys ask for a new temperature, Escape stops the server. The server is a fake speaking `wm play --serve`'s
protocol (tests/fixtures/fake_play.py); `tests/test_play.py` tests the real one."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from pilot import wait_until
from textual.app import App
from wm.tui.screens.play import HOLD_TICKS, PlayScreen

FAKE = [sys.executable, str(Path(__file__).parent / "fixtures" / "fake_play.py")]


class Host(App[None]):
    def __init__(self, screen: PlayScreen):
        super().__init__()
        self.screen_to_push = screen
        self.python, self.env = None, None

    def on_mount(self) -> None:
        self.push_screen(self.screen_to_push)


def requests(log: Path) -> list[dict]:
    return [json.loads(x) for x in log.read_text().splitlines() if x.strip()]


def test_play_screen_drives_the_server(tmp_path, monkeypatch):
    from textual_image.widget import Image

    log = tmp_path / "requests.jsonl"
    monkeypatch.setenv("FAKE_PLAY_LOG", str(log))

    async def main() -> None:
        screen = PlayScreen(tmp_path / "run", python=FAKE)
        app = Host(screen)
        async with app.run_test(size=(80, 30)) as pilot:
            await wait_until(pilot, lambda: screen.frames >= 3)
            assert isinstance(screen.query_one("#play-frame"), Image)
            assert requests(log)[0]["argv"][-6:] == ["play", "--run", str(tmp_path / "run"), "--serve", "--seed", "0"]
            await pilot.press("left")
            await wait_until(pilot, lambda: any(r.get("keys") == ["left"] for r in requests(log)))
            await pilot.press("right")  # the other direction lets go of left
            await wait_until(pilot, lambda: any(r.get("keys") == ["right"] for r in requests(log)))
            await pilot.press("space")
            n = len(requests(log))
            await wait_until(pilot, lambda: len(requests(log)) > n + HOLD_TICKS)
            assert requests(log)[-1]["keys"] == []  # let go, and no key outlives its hold
            n = len(requests(log))
            await pilot.press("r")
            await wait_until(pilot, lambda: any(r.get("op") == "reset" for r in requests(log)[n:]))
            await pilot.press("t")
            await wait_until(pilot, lambda: any(r.get("op") == "temperature" for r in requests(log)))
            assert [r for r in requests(log) if r.get("op") == "temperature"][0]["value"] == 1.3
            proc = screen.proc
            await pilot.press("escape")
            await wait_until(pilot, lambda: proc.returncode is not None)
            assert requests(log)[-1] == {"op": "quit"}
            await wait_until(pilot, lambda: not screen.is_attached)
            frames = screen.frames  # a frame answered before the quit may still have been drawn until now
            screen._draw(screen.last)  # a frame still in the pipe when the widgets are gone is dropped (was NoMatches)
            assert screen.frames == frames and screen.closing

    asyncio.run(main())


def test_play_screen_stops_stepping_when_the_episode_ends(tmp_path, monkeypatch):
    log = tmp_path / "requests.jsonl"
    monkeypatch.setenv("FAKE_PLAY_LOG", str(log))
    monkeypatch.setenv("FAKE_PLAY_STEPS", "3")

    async def main() -> None:
        screen = PlayScreen(tmp_path / "run", python=FAKE)
        async with Host(screen).run_test(size=(80, 30)) as pilot:
            await wait_until(pilot, lambda: screen.last.get("done"))
            await pilot.pause(0.5)
            assert [r["op"] for r in requests(log)[1:]].count("step") == 3  # no step after the end

    asyncio.run(main())


def test_a_chatty_server_does_not_freeze_the_screen_and_its_last_line_shows_when_it_fails(tmp_path, monkeypatch):
    """The server's stderr is read as it comes: 2,000 lines (≈ 200 kB, over a pipe's 64 kB) before its first frame
    once blocked it for good; a server that stops shows its last stderr line."""
    log = tmp_path / "requests.jsonl"
    monkeypatch.setenv("FAKE_PLAY_LOG", str(log))
    monkeypatch.setenv("FAKE_PLAY_STDERR_LINES", "2000")

    async def main(fail: bool) -> None:
        screen = PlayScreen(tmp_path / "run", python=FAKE)
        async with Host(screen).run_test(size=(80, 30)) as pilot:
            if fail:
                await wait_until(pilot, lambda: "play stopped" in str(screen.query_one("#play-status").render()))
                assert str(screen.query_one("#play-status").render()) == "play stopped (exit 3): error: the last line"
            else:
                await wait_until(pilot, lambda: screen.frames >= 2)
            await screen.stop()

    asyncio.run(main(False))
    monkeypatch.setenv("FAKE_PLAY_FAIL", "1")
    asyncio.run(main(True))


def test_run_screen_opens_the_play_screen_on_p(tmp_path, monkeypatch):
    """`p` on a run's screen opens its dream to play, `w` to watch C (the server gets --agent)."""
    from wm.tui.app import WMApp

    log = tmp_path / "requests.jsonl"
    monkeypatch.setenv("FAKE_PLAY_LOG", str(log))
    run = tmp_path / "runs" / "demo"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("run:\n  seed: 0\n")

    async def main() -> None:
        app = WMApp(run, python=FAKE, poll_interval=0.1)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause(0.3)
            await pilot.press("p")
            await wait_until(pilot, lambda: isinstance(app.screen, PlayScreen) and app.screen.frames >= 1)
            assert not app.screen.agent and str(run) in requests(log)[0]["argv"]
            footer = [strip.text for strip in app.screen._compositor.render_strips()][-1]  # fits 80 columns
            for label in ("Steer", "space Let go", "r Restart", "τ ±", "esc Back", "q Quit", "? Help"):
                assert label in footer, footer
            await pilot.press("escape")
            await wait_until(pilot, lambda: not isinstance(app.screen, PlayScreen))
            await pilot.press("w")
            await wait_until(pilot, lambda: isinstance(app.screen, PlayScreen) and app.screen.frames >= 1)
            assert app.screen.agent and "--agent" in [r for r in requests(log) if "argv" in r][-1]["argv"]
            footer = [strip.text for strip in app.screen._compositor.render_strips()][-1]
            assert "Steer" not in footer and "Let go" not in footer and "? Help" in footer, footer  # C steers

    asyncio.run(main())


def test_gas_and_brake_show_in_the_footer_only_where_the_env_has_them(tmp_path, monkeypatch):
    """CarRacing's server accepts up and down: the footer shows gas and brake (within 80 columns) and a held ↑ reaches
    the step request; Doom's accepts left and right only: no gas or brake in its footer."""
    log = tmp_path / "requests.jsonl"
    monkeypatch.setenv("FAKE_PLAY_LOG", str(log))

    def footer(app: App) -> str:
        return [strip.text for strip in app.screen._compositor.render_strips()][-1]

    async def main(keys: str) -> str:
        monkeypatch.setenv("FAKE_PLAY_KEYS", keys)
        screen = PlayScreen(tmp_path / "run", python=FAKE)
        app = Host(screen)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_until(pilot, lambda: screen.frames >= 2)
            await pilot.pause(0.2)
            text = footer(app)
            if "up" in keys:
                await pilot.press("up")
                await wait_until(pilot, lambda: any(r.get("keys") == ["up"] for r in requests(log)))
            await screen.stop()
            return text

    car = asyncio.run(main("left right up down"))
    assert "Gas, brake" in car and "Steer" in car and "esc Back" in car, car
    doom = asyncio.run(main("left right"))
    assert "Gas" not in doom and "Steer" in doom, doom
