"""Images and animations: PNG grids and GIFs (Pillow), written atomically into the run directory."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from wm.core.rundir import atomic_path


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
