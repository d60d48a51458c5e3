"""Images and animations: PNG grids and GIFs (Pillow), written atomically into the run directory."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from wm.core.atomic import atomic_path


def to_uint8(x: np.ndarray) -> np.ndarray:
    """Float images in [0, 1] (or uint8 already) → uint8."""
    x = np.asarray(x)
    if x.dtype == np.uint8:
        return x
    return (np.clip(x, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def image_grid(rows: Sequence[np.ndarray], pad: int = 2) -> np.ndarray:
    """Tile rows of images (each (N, H, W, 3)) into one uint8 picture with `pad` pixels of white between."""
    rows = [to_uint8(r) for r in rows]
    n = max(len(r) for r in rows)
    h, w = rows[0].shape[1:3]
    out = np.full((len(rows) * (h + pad) + pad, n * (w + pad) + pad, 3), 255, np.uint8)
    for i, r in enumerate(rows):
        for j, img in enumerate(r):
            y, x = pad + i * (h + pad), pad + j * (w + pad)
            out[y : y + h, x : x + w] = img
    return out


def side_by_side(panels: Sequence[np.ndarray], size: int = 192, pad: int = 4) -> np.ndarray:
    """Frames (T, H_i, W_i, 3) from several sources → (T, size, n·size + gaps, 3), each panel resized to size×size."""
    from PIL import Image

    panels = [to_uint8(p) for p in panels]
    t = min(len(p) for p in panels)
    out = np.full((t, size, len(panels) * (size + pad) - pad, 3), 255, np.uint8)
    for k, p in enumerate(panels):
        x = k * (size + pad)
        for i in range(t):
            out[i, :, x : x + size] = np.asarray(Image.fromarray(p[i]).resize((size, size), Image.NEAREST))
    return out


def save_png(path: str | Path, img: np.ndarray) -> None:
    from PIL import Image

    with atomic_path(path) as tmp:
        Image.fromarray(to_uint8(img)).save(tmp, format="PNG")


def save_gif(path: str | Path, frames: np.ndarray, fps: int = 20) -> None:
    """Write (T, H, W, 3) frames as a looping GIF."""
    from PIL import Image

    frames = to_uint8(frames)
    images = [Image.fromarray(f) for f in frames]
    with atomic_path(path) as tmp:
        images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)


def gif_durations(ends_s: Sequence[float]) -> list[int]:
    """Per-frame GIF durations (ms, whole centiseconds: the format's unit) of frames that end at `ends_s` seconds:
    rounded on the running time, not frame by frame, so a long GIF keeps to real time (within 5 ms, or 10 where a
    frame is raised to 20 ms: browsers play shorter frames at 100 ms)."""
    ends = [round(e * 100) * 10 for e in ends_s]
    return [max(20, b - a) for a, b in zip([0, *ends[:-1]], ends, strict=True)]


def encode_gif(frames: np.ndarray, durations_ms: Sequence[int] | int, colors: int = 128) -> bytes:
    """(T, H, W, 3) frames → the bytes of a looping GIF with one shared palette, undithered.

    One palette (median cut over up to 16 evenly spaced frames) instead of Pillow's per-frame palettes: no colour
    table per frame, no flicker, and without dithering the unchanged areas (borders, label strips) stay identical
    from frame to frame, which GIF's frame differencing and LZW exploit (about 2× smaller on game frames)."""
    import io

    from PIL import Image

    frames = to_uint8(frames)
    sample = frames[np.unique(np.linspace(0, len(frames) - 1, min(16, len(frames))).astype(int))]
    palette = Image.fromarray(np.concatenate(list(sample), axis=0)).quantize(
        colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
    )
    images = [Image.fromarray(f).quantize(palette=palette, dither=Image.Dither.NONE) for f in frames]
    durations = [int(durations_ms)] * len(images) if isinstance(durations_ms, int) else [int(d) for d in durations_ms]
    buf = io.BytesIO()
    images[0].save(buf, format="GIF", save_all=True, append_images=images[1:], duration=durations, loop=0)
    return buf.getvalue()
