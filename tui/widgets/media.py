"""The Media pane: the selected stage's pictures in the terminal, refreshed when their files change.

What a stage shows is its image artifacts in the run directory (`wm.core.rundir.ARTIFACTS` entries ending in .png or
.gif: V's `vae/reconstructions.png`, M's `mdnrnn/dream_preview.gif`), and for `evaluate` the episode GIFs of every
`eval/<tag>/`, newest tag first. Images are drawn by textual-image, which picks Kitty graphics, Sixel or half
blocks for the terminal (it queries the terminal when imported, so this module is imported before the app runs).

Files are read off the UI thread, as the run screen reads the run directory: while the pane is on screen, a timer
starts a thread worker (one in flight at a time) that stats the files and decodes only those whose mtime or size
changed, and posts a `Loaded` message; its handler only updates widgets. GIFs play in real time on a timer of
`FPS` frames per second; memory is capped (at most `MAX_FRAMES` decoded frames per pane, each at most
`MAX_SIDE` pixels on its longer side, `MAX_ITEMS` files shown).
"""

from __future__ import annotations

import bisect
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image as PILImage
from PIL import ImageSequence
from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.markup import escape
from textual.message import Message
from textual.widgets import Static
from textual_image.widget import Image

from wm.core.rundir import ARTIFACTS, RunDir

FPS = 6  # animation timer rate: a GIF plays in real time, showing at most this many frames a second
MAX_FRAMES = 300  # decoded frames kept per pane, shared by its files (long GIFs keep every k-th frame)
MAX_SIDE = 480  # decoded frames are downscaled to fit MAX_SIDE x MAX_SIDE pixels
MAX_ITEMS = 8  # files shown at once; further ones are listed by name
IMAGE_SUFFIXES = (".png", ".gif")
EPISODE_GIFS = "*/episode_*.gif"  # evaluate: eval/<tag>/episode_NNN.gif (wm.stages.evaluate)

Stamp = tuple[int, int]  # (mtime_ns, size): a file is decoded again only when this changes


def media_paths(run: RunDir, verb: str) -> list[Path] | None:
    """The image files stage `verb` writes that exist now, newest first; None when the stage writes no images.

    Blocking file-system calls: call from a thread.
    """
    keys = [k for k, (v, name) in ARTIFACTS.items() if v == verb and name.endswith(IMAGE_SUFFIXES)]
    if keys:
        return [p for p in (run.artifact(k) for k in keys) if p.is_file()]
    if verb == "evaluate":
        folder = run.stage_dir("evaluate")
        by_tag: dict[Path, list[tuple[Path, float]]] = {}
        for p in folder.glob(EPISODE_GIFS) if folder.is_dir() else ():
            try:
                by_tag.setdefault(p.parent, []).append((p, p.stat().st_mtime))
            except OSError:  # removed meanwhile
                continue
        tags = sorted(by_tag.values(), key=lambda files: (-max(t for _, t in files), files[0][0].parent.name))
        return [p for files in tags for p, _ in sorted(files)]
    return None


@dataclass
class Media:
    """One decoded file: its frames (RGB, downscaled) and how long each is shown, in seconds."""

    path: Path
    stamp: Stamp
    frames: list[PILImage.Image] = field(default_factory=list)
    durations: list[float] = field(default_factory=list)
    total_frames: int = 0  # frames in the file (more than len(frames) when it was thinned)
    error: str | None = None

    @property
    def starts(self) -> list[float]:
        """The time each frame starts at within one loop."""
        return [sum(self.durations[:i]) for i in range(len(self.durations))]


def decode(path: Path, stamp: Stamp, max_frames: int = MAX_FRAMES, max_side: int = MAX_SIDE) -> Media:
    """Decode `path`'s frames, keeping every k-th so that at most `max_frames` remain (their durations summed)."""
    media = Media(path, stamp)
    try:
        with PILImage.open(path) as im:
            n = getattr(im, "n_frames", 1)
            step = max(1, math.ceil(n / max(1, max_frames)))
            media.total_frames = n
            for i, frame in enumerate(ImageSequence.Iterator(im)):
                seconds = (frame.info.get("duration") or 100) / 1000
                if i % step:
                    media.durations[-1] += seconds
                    continue
                rgb = frame.convert("RGB")
                rgb.thumbnail((max_side, max_side))
                media.frames.append(rgb)
                media.durations.append(seconds)
    except Exception as e:  # a file caught mid-write or not an image: say so, retry when it changes
        media.frames, media.durations = [], []
        media.error = f"cannot read {path.name}: {e}"
    return media


def stat_stamp(path: Path) -> Stamp | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


@dataclass
class MediaRead:
    """One read of a stage's media: the files (in order), the ones decoded anew, and a note for the pane."""

    paths: list[Path] = field(default_factory=list)
    stamps: dict[Path, Stamp] = field(default_factory=dict)
    decoded: dict[Path, Media] = field(default_factory=dict)
    note: str = ""


def read_media(run: RunDir, verb: str, known: dict[Path, Stamp]) -> MediaRead:
    """List `verb`'s media and decode the files whose stamp differs from `known` (blocking: call from a thread)."""
    out = MediaRead()
    paths = media_paths(run, verb)
    if paths is None:
        out.note = f"no media for this stage ({verb})"
        return out
    for p in paths:
        stamp = stat_stamp(p)
        if stamp is not None:
            out.paths.append(p)
            out.stamps[p] = stamp
    if not out.paths:
        out.note = f"no media yet (written by {verb})"
        return out
    shown, rest = out.paths[:MAX_ITEMS], out.paths[MAX_ITEMS:]
    out.paths = shown
    if rest:
        out.note = f"{len(rest)} more not shown: " + ", ".join(str(p.relative_to(run.path)) for p in rest)
    budget = max(1, MAX_FRAMES // len(shown))
    if set(known) != set(shown):  # files came or went: the frame budget per file changed, decode them all anew
        known = {}
    for p in shown:
        if known.get(p) != out.stamps[p]:
            out.decoded[p] = decode(p, out.stamps[p], budget)
    return out


class MediaItem(Vertical):
    """One file: a caption line and the picture; an animated GIF advances with `animate(now)`."""

    def __init__(self, media: Media, caption: str):
        super().__init__(classes="media-item")
        self.media = media
        self.caption = caption
        self.frame = 0  # the frame shown
        self.t0 = time.monotonic()
        self._starts: list[float] = media.starts

    def compose(self) -> ComposeResult:
        yield Static(self._caption_text(), classes="media-caption", markup=True)
        yield Image(self.media.frames[0] if self.media.frames else None, classes="media-image")

    def _caption_text(self) -> str:
        m = self.media
        text = f"[b]{escape(self.caption)}[/b]"
        if m.error is not None:
            return f"{text}  [red]{escape(m.error)}[/red]"
        if m.total_frames > 1:
            kept = f", 1 in {math.ceil(m.total_frames / len(m.frames))} kept" if len(m.frames) < m.total_frames else ""
            text += f"  [dim]{m.total_frames} frames, {sum(m.durations):.1f} s{kept}[/dim]"
        stamp = time.strftime("%H:%M:%S", time.localtime(m.stamp[0] / 1e9))
        return f"{text}  [dim]written {stamp}[/dim]"

    def replace(self, media: Media) -> None:
        """Show a new decode of the file (it changed on disk); an animation starts over."""
        self.media, self.frame, self.t0, self._starts = media, 0, time.monotonic(), media.starts
        self.query_one(".media-caption", Static).update(self._caption_text())
        self.query_one(".media-image", Image).image = media.frames[0] if media.frames else None

    def animate(self, now: float) -> None:
        """Show the frame due at `now` (real-time playback, looping)."""
        m = self.media
        if len(m.frames) < 2:
            return
        i = bisect.bisect_right(self._starts, (now - self.t0) % sum(m.durations)) - 1
        if i != self.frame:
            self.frame = i
            self.query_one(".media-image", Image).image = m.frames[i]


class MediaView(VerticalScroll):
    """The Media pane of the run screen: `show(run, verb)` switches to a stage; reads happen while it is on screen."""

    class Loaded(Message, bubble=False):
        """A read of the stage's media, posted by the read worker's thread to its widget."""

        def __init__(self, generation: int, result: MediaRead):
            super().__init__()
            self.generation = generation
            self.result = result

    def __init__(self, interval: float = 1.0, *, id: str | None = None):
        super().__init__(id=id)
        self.interval = interval
        self.run: RunDir | None = None
        self.verb = ""
        self.generation = 0  # bumped by show(): a read for the stage selected before is dropped
        self.loading = False  # a read is in flight
        self.load_again = False  # ... and another was asked for meanwhile
        self.items: dict[Path, MediaItem] = {}

    def compose(self) -> ComposeResult:
        yield Static("", id="media-note", markup=False)

    def on_mount(self) -> None:
        self.set_interval(self.interval, self.tick)
        self.set_interval(1 / FPS, self.animate)

    # ------------------------------------------------------------------ reading
    def show(self, run: RunDir, verb: str) -> None:
        """Show stage `verb` of `run` (the old stage's pictures go at once; the new ones come with the next read)."""
        self.run, self.verb = run, verb
        self.generation += 1
        self._clear()
        self.note(f"reading {verb}'s media …")
        if self.is_on_screen:
            self.poll()

    def on_show(self) -> None:
        self.poll()

    def tick(self) -> None:
        """Timer: look for changed files while the pane is on screen, unless a read is still in flight."""
        if self.is_on_screen and not self.loading:
            self._start()

    def poll(self) -> None:
        """Read now; if a read is in flight, once more after it."""
        if self.loading:
            self.load_again = True
        else:
            self._start()

    def _start(self) -> None:
        if self.run is None:
            return
        self.loading, self.load_again = True, False
        known = {p: item.media.stamp for p, item in self.items.items()}
        self._read(self.generation, self.run, self.verb, known)

    @work(thread=True, group="media", exit_on_error=False)
    def _read(self, generation: int, run: RunDir, verb: str, known: dict[Path, Stamp]) -> None:
        """Thread worker: stat the files and decode the changed ones, then post the result to the widget."""
        try:
            result = read_media(run, verb, known)
        except Exception as e:  # always answer, or reading stops
            result = MediaRead(note=f"cannot read media: {e or type(e).__name__}")
        self.post_message(self.Loaded(generation, result))

    def on_media_view_loaded(self, message: MediaView.Loaded) -> None:
        self.loading = False
        if message.generation == self.generation:
            try:
                self._apply(message.result)
            except Exception as e:  # must not take the UI down; the next tick retries
                self.note(f"cannot show media: {e}")
        if self.load_again:
            self._start()

    # ------------------------------------------------------------------ widgets
    def note(self, text: str) -> None:
        note = self.query_one("#media-note", Static)
        note.update(text)
        note.display = bool(text)

    def _clear(self) -> None:
        for item in self.items.values():
            item.remove()
        self.items = {}

    def _apply(self, result: MediaRead) -> None:
        self.note(result.note)
        if list(self.items) != result.paths:  # files came or went: lay the pane out anew
            old = self.items
            self._clear()
            for p in result.paths:
                media = result.decoded[p] if p in result.decoded else old[p].media
                self.items[p] = MediaItem(media, self._caption(p))
            self.mount_all(self.items.values())
        else:
            for p, media in result.decoded.items():
                self.items[p].replace(media)

    def _caption(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.run.path)) if self.run is not None else str(path)
        except ValueError:
            return str(path)

    def animate(self) -> None:
        """Timer: advance the GIFs that are on screen."""
        if not self.items or not self.is_on_screen:
            return
        now = time.monotonic()
        for item in self.items.values():
            if item.is_on_screen:
                item.animate(now)
