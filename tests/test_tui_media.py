"""The run screen's Media pane (tui/widgets/media.py): a stage's pictures, re-read when their files change.

Piloted headlessly as in tests/test_tui.py (App.run_test, each coroutine driven by `asyncio.run`); without a
terminal textual-image draws with unicode blocks, but the widget holds the decoded PIL frame, which is checked.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from PIL import Image as PILImage
from pilot import wait_until
from wm.tui.app import WMApp
from wm.tui.screens.run import RunScreen
from wm.tui.widgets import media as media_mod
from wm.tui.widgets.media import MediaItem, MediaView, decode, media_paths

from wm.core.rundir import STAGES, RunDir

SIZE = (80, 24)
RED, GREEN, BLUE, WHITE = (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 255)


def new_run(tmp_path: Path) -> RunDir:
    run = RunDir(tmp_path / "runs" / "demo")
    run.stage_dir("collect").mkdir(parents=True)  # a stage folder makes it a run (tui.model.is_run)
    return run


def write_png(path: Path, color: tuple[int, int, int], mtime: float | None = None) -> None:
    """Written under a temporary name and renamed, as the stages do; `mtime` set explicitly (coarse clocks)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}")
    PILImage.new("RGB", (530, 134), color).save(tmp, format="PNG")
    os.replace(tmp, path)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def write_gif(path: Path, colors, duration_ms: int = 100, size=(96, 32)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    frames = [PILImage.new("RGB", size, c) for c in colors]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=duration_ms, loop=0)


def color(img) -> tuple[int, int, int]:
    """The nearest of RED/GREEN/BLUE/WHITE to the image's top-left pixel (GIF palettes may shift colours a little)."""
    px = img.convert("RGB").getpixel((0, 0))
    return min((RED, GREEN, BLUE, WHITE), key=lambda c: sum((a - b) ** 2 for a, b in zip(c, px, strict=True)))


def view(app: WMApp) -> MediaView:
    assert isinstance(app.screen, RunScreen), app.screen
    return app.screen.query_one("#media-view", MediaView)


def shown(app: WMApp) -> list:
    """The PIL frame each image widget of the Media pane shows now."""
    return [item.query_one(".media-image").image for item in view(app).query(MediaItem)]


async def open_media(pilot, app: WMApp, verb: str) -> None:
    """Select stage `verb` in the stage table and show the Media pane with `i`."""
    await pilot.pause()
    await pilot.press(*["down"] * [s.verb for s in STAGES].index(verb), "i")
    await wait_until(pilot, lambda: app.screen.verb == verb and view(app).is_on_screen)


def test_reconstructions_shown_and_reread_only_when_the_file_changes(tmp_path, monkeypatch):
    run = new_run(tmp_path)
    path = run.artifact("reconstructions")
    write_png(path, RED, mtime=time.time() - 100)
    decoded: list[Path] = []
    real_decode = media_mod.decode

    def counting_decode(p, *a, **kw):
        decoded.append(p)
        return real_decode(p, *a, **kw)

    monkeypatch.setattr(media_mod, "decode", counting_decode)

    async def main():
        app = WMApp(run.path, poll_interval=0.1)
        async with app.run_test(size=SIZE) as pilot:
            await open_media(pilot, app, "train-vae")
            await wait_until(pilot, lambda: len(shown(app)) == 1)
            (img,) = shown(app)
            assert isinstance(img, PILImage.Image) and color(img) == RED
            item = view(app).query_one(MediaItem)
            assert "vae/reconstructions.png" in str(item.query_one(".media-caption").render())
            assert item.query_one(".media-image").region.height > 0  # laid out on screen, not just held
            await pilot.pause(0.6)  # six polls of an unchanged file: stat only, no second decode
            assert decoded == [path]
            write_png(path, BLUE)  # a new epoch's grid replaces the file (new content, new mtime)
            await wait_until(pilot, lambda: [color(i) for i in shown(app)] == [BLUE])
            assert decoded == [path, path]

    asyncio.run(main())


def test_stage_without_media_and_missing_files_say_so_then_a_gif_plays(tmp_path):
    run = new_run(tmp_path)
    note = lambda app: str(view(app).query_one("#media-note").render())  # noqa: E731

    async def main():
        app = WMApp(run.path, poll_interval=0.1)
        async with app.run_test(size=SIZE) as pilot:
            await open_media(pilot, app, "encode")
            await wait_until(pilot, lambda: "no media for this stage" in note(app))
            assert not shown(app)
            await pilot.press("down")  # train-mdnrnn: its dream preview does not exist yet
            await wait_until(pilot, lambda: "no media yet (written by train-mdnrnn)" in note(app))
            assert not shown(app)
            write_gif(run.artifact("dream_preview"), [RED, GREEN, BLUE, WHITE], duration_ms=100)
            await wait_until(pilot, lambda: len(shown(app)) == 1)
            assert not view(app).query_one("#media-note").display  # the message is gone
            item = view(app).query_one(MediaItem)
            assert len(item.media.frames) == 4 and item.media.durations == pytest.approx([0.1] * 4)
            seen = {color(shown(app)[0])}
            frames = {item.frame}
            for _ in range(100):  # the frames advance on their own (real time, 0.1 s each)
                await pilot.pause(0.05)
                seen.add(color(shown(app)[0]))
                frames.add(item.frame)
                if len(seen) >= 3:
                    break
            assert len(seen) >= 3 and len(frames) >= 3, (seen, frames)

    asyncio.run(main())


def test_evaluate_lists_episode_gifs_newest_tag_first_and_decoding_is_capped(tmp_path):
    run = new_run(tmp_path)
    assert media_paths(run, "evaluate") == []  # no eval/ yet: "no media yet"
    assert media_paths(run, "encode") is None  # a stage that writes no pictures
    now = time.time()
    for tag, age in (("real", 50), ("dream", 10)):
        for i in (1, 0):
            p = run.eval_dir(tag) / f"episode_{i:03d}.gif"
            write_gif(p, [RED, GREEN])
            os.utime(p, (now - age, now - age))
    (run.eval_dir("real") / ".tmp-episode_002.gif").write_bytes(b"half")  # a GIF being written is not listed
    assert [p.relative_to(run.path).as_posix() for p in media_paths(run, "evaluate")] == [
        "eval/dream/episode_000.gif",
        "eval/dream/episode_001.gif",
        "eval/real/episode_000.gif",
        "eval/real/episode_001.gif",
    ]
    # a long, large GIF keeps at most max_frames frames (durations summed) downscaled to max_side
    long = tmp_path / "long.gif"
    write_gif(long, [RED, GREEN, BLUE, WHITE] * 10, duration_ms=50, size=(1000, 200))
    m = decode(long, (0, 0), max_frames=8, max_side=480)
    assert m.total_frames == 40 and len(m.frames) == 8
    assert sum(m.durations) == pytest.approx(2.0) and m.frames[0].size == (480, 96)
    assert [color(f) for f in m.frames[:3]] == [RED, GREEN, BLUE]  # frames 0, 5, 10 of the 4-colour cycle
    broken = tmp_path / "broken.gif"
    broken.write_bytes(b"GIF89a torn")
    assert decode(broken, (0, 0)).error is not None and not decode(broken, (0, 0)).frames
