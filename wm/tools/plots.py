"""Small PNG line plots drawn with Pillow's ImageDraw (matplotlib is not a dependency).

    line_plot("plots/es.png", {"mean": (gens, means), "best": (gens, bests)}, title="CMA-ES", xlabel="generation")

Axes with numbered ticks ("nice" 1-2-5 steps), one coloured polyline per series, a legend in the top-left corner.
Non-finite points are dropped; a series with one point is drawn as a dot.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from wm.core.rundir import atomic_path

COLORS = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75), (227, 119, 194))


def nice_ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    """About `n` round tick values (steps of 1, 2 or 5 × 10^k) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0]
    if hi <= lo:
        hi = lo + (abs(lo) if lo else 1.0)
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step + 1e-9) * step
    ticks = [round(first, 12)]
    while ticks[-1] < hi - step * 1e-9 or len(ticks) < 2:  # the last tick is >= hi, so every point is inside
        ticks.append(round(first + len(ticks) * step, 12))
    return ticks


def _label(v: float) -> str:
    if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
        return f"{v:.0e}"
    return f"{v:g}" if abs(v) >= 1 or v == 0 else f"{v:.3g}"


def _font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow without FreeType: the fixed bitmap font
        return ImageFont.load_default()


def render_line_plot(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    size: tuple[int, int] = (640, 400),
) -> np.ndarray:
    """Draw `series` ({name: (xs, ys)}) as lines on shared axes; returns an (H, W, 3) uint8 image."""
    from PIL import Image, ImageDraw

    w, h = size
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    font, small = _font(14), _font(11)
    clean: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, (xs, ys) in series.items():
        x, y = np.asarray(xs, float), np.asarray(ys, float)
        ok = np.isfinite(x) & np.isfinite(y)
        if ok.any():
            clean[name] = (x[ok], y[ok])
    left, right, top, bottom = 64, 16, 30 if (title or ylabel) else 12, 44 if xlabel else 28
    x0, x1, y0, y1 = left, w - right, top, h - bottom
    if title:
        d.text((w // 2, 6), title, fill="black", font=font, anchor="mt")
    if not clean:
        d.rectangle([x0, y0, x1, y1], outline="black")
        d.text(((x0 + x1) // 2, (y0 + y1) // 2), "no data", fill="gray", font=font, anchor="mm")
        return np.asarray(img)
    allx = np.concatenate([v[0] for v in clean.values()])
    ally = np.concatenate([v[1] for v in clean.values()])
    xt = nice_ticks(float(allx.min()), float(allx.max()))
    yt = nice_ticks(float(ally.min()), float(ally.max()))
    xlo, xhi, ylo, yhi = xt[0], xt[-1], yt[0], yt[-1]

    def px(x: np.ndarray) -> np.ndarray:
        return x0 + (x - xlo) / (xhi - xlo) * (x1 - x0)

    def py(y: np.ndarray) -> np.ndarray:
        return y1 - (y - ylo) / (yhi - ylo) * (y1 - y0)

    for t in yt:
        yy = float(py(np.float64(t)))
        d.line([(x0, yy), (x1, yy)], fill=(230, 230, 230))
        d.line([(x0 - 4, yy), (x0, yy)], fill="black")
        d.text((x0 - 6, yy), _label(t), fill="black", font=small, anchor="rm")
    for t in xt:
        xx = float(px(np.float64(t)))
        d.line([(xx, y0), (xx, y1)], fill=(230, 230, 230))
        d.line([(xx, y1), (xx, y1 + 4)], fill="black")
        d.text((xx, y1 + 6), _label(t), fill="black", font=small, anchor="mt")
    d.rectangle([x0, y0, x1, y1], outline="black")
    if xlabel:
        d.text(((x0 + x1) // 2, h - 4), xlabel, fill="black", font=small, anchor="mb")
    if ylabel:
        d.text((4, y0 - 4), ylabel, fill="black", font=small, anchor="ls")
    for i, (x, y) in enumerate(clean.values()):
        color = COLORS[i % len(COLORS)]
        pts = list(zip(px(x).tolist(), py(y).tolist(), strict=True))
        if len(pts) == 1:
            (cx, cy), r = pts[0], 3
            d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=color)
        else:
            d.line(pts, fill=color, width=2)
    # legend: a coloured swatch and the series name per line, on a white box
    rows = list(clean)
    lw = max(int(d.textlength(n, font=small)) for n in rows) + 30
    lx, ly = x0 + 8, y0 + 8
    d.rectangle([lx, ly, lx + lw, ly + 16 * len(rows) + 4], fill="white", outline=(160, 160, 160))
    for i, name in enumerate(rows):
        yy = ly + 10 + 16 * i
        d.line([(lx + 4, yy), (lx + 20, yy)], fill=COLORS[i % len(COLORS)], width=3)
        d.text((lx + 25, yy), name, fill="black", font=small, anchor="lm")
    return np.asarray(img)


def line_plot(
    path: str | Path,
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    size: tuple[int, int] = (640, 400),
) -> Path:
    """Draw `series` with `render_line_plot` and write it atomically as a PNG at `path`."""
    from PIL import Image

    arr = render_line_plot(series, title=title, xlabel=xlabel, ylabel=ylabel, size=size)
    with atomic_path(path) as tmp:
        Image.fromarray(arr).save(tmp, format="PNG")
    return Path(path)
