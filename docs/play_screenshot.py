"""Redraws docs/play_screen.png: the TUI's play screen watching the shipped agent in M's dream.

Runs the real `python -m wm play --serve` on `wm/agents/doom_small_s2` in a 112×36 Textual pilot (wide enough for
the footer's keys), waits for a frame, saves Textual's SVG screenshot. Textual's headless driver makes textual-image
pick its 4-shade fallback, so the half-block renderer (what a true-colour terminal without Kitty or Sixel graphics
shows) is forced. PNG:
`cairosvg` (not a dependency of the suite): `python -c "import cairosvg; cairosvg.svg2png(url='play_screen.svg',
write_to='docs/play_screen.png', output_width=1100)"`.

    python docs/play_screenshot.py [frames] [out.svg]
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import textual_image.widget as tiw

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
tiw.Image = tiw.HalfcellImage  # before the play screen imports it

from wm.tui.app import WMApp  # noqa: E402
from wm.tui.screens.play import PlayScreen  # noqa: E402


async def main(frames: int, out: Path) -> None:
    app = WMApp(Path("wm/agents/doom_small_s2"), poll_interval=1.0)
    async with app.run_test(size=(112, 36)) as pilot:
        await pilot.pause(1.0)
        await pilot.press("w")  # watch C
        for _ in range(1200):
            await pilot.pause(0.1)
            if isinstance(app.screen, PlayScreen) and app.screen.frames >= frames:
                break
        app.save_screenshot(filename=out.name, path=str(out.parent))
        await pilot.press("escape")


if __name__ == "__main__":
    asyncio.run(
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 150, Path(sys.argv[2] if len(sys.argv) > 2 else "play_screen.svg"))
    )
