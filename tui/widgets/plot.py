"""A small braille line plot (Textual has no line plot): each character cell holds 2×4 dots.

The plot is honest about its scale: the y axis shows the real min and max of the visible data, the x axis the
first and last step, and the legend the latest value of each series. Points are joined by straight lines so
a sparse series (one CMA-ES generation per point) still reads as a curve.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widget import Widget
from wm.tui.model import fmt

Points = Sequence[tuple[float, float]]
COLORS = ("bright_green", "bright_cyan", "bright_magenta", "yellow")
# Braille dot bits by (column, row) inside a cell; U+2800 is the empty cell.
_DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
GUTTER = 8  # y-axis label width


def _line(x0: int, y0: int, x1: int, y1: int) -> list[tuple[int, int]]:
    """Bresenham's line between two dots, both ends included."""
    out = []
    dx, dy = abs(x1 - x0), -abs(y1 - y0)
    sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
    err = dx + dy
    while True:
        out.append((x0, y0))
        if x0 == x1 and y0 == y1:
            return out
        e2 = 2 * err
        if e2 >= dy:
            err += dy
            x0 += sx
        if e2 <= dx:
            err += dx
            y0 += sy


def braille(
    series: Sequence[Points], cols: int, rows: int
) -> tuple[list[list[int]], list[list[int]], tuple[float, float, float, float]]:
    """Rasterise `series` into a `rows × cols` grid of braille bit masks and the series index owning each cell.

    Returns (bits, owner, (xmin, xmax, ymin, ymax)); owner is -1 for an empty cell.
    """
    pts = [p for s in series for p in s]
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    xmin, xmax, ymin, ymax = min(xs), max(xs), min(ys), max(ys)
    if ymax == ymin:  # a flat line sits in the middle of a small band around its value
        pad = abs(ymin) * 0.05 or 1.0
        ymin, ymax = ymin - pad, ymax + pad
    xspan = (xmax - xmin) or 1.0
    w, h = cols * 2, rows * 4
    bits = [[0] * cols for _ in range(rows)]
    owner = [[-1] * cols for _ in range(rows)]

    def dot(p: tuple[float, float]) -> tuple[int, int]:
        x = round((p[0] - xmin) / xspan * (w - 1))
        y = round((ymax - p[1]) / (ymax - ymin) * (h - 1))
        return x, y

    for i, s in enumerate(series):
        ds = [dot(p) for p in s]
        path = _line(*ds[0], *ds[0]) if len(ds) == 1 else [d for a, b in zip(ds, ds[1:], strict=False) for d in _line(*a, *b)]
        for x, y in path:
            r, c = y // 4, x // 2
            bits[r][c] |= _DOTS[x % 2][y % 4]
            owner[r][c] = i
    return bits, owner, (xmin, xmax, ymin, ymax)


def render_plot(series: Sequence[tuple[str, Points]], width: int, height: int, empty: str = "no data yet") -> Text:
    """The whole plot as rich Text of `height` lines: legend, plot rows with a y axis, x axis."""
    series = [(name, pts) for name, pts in series if pts]
    if not series or width < GUTTER + 4 or height < 4:
        return Text(empty, style="dim")
    legend = Text()
    for i, (name, pts) in enumerate(series):
        legend.append("━ ", style=COLORS[i % len(COLORS)])
        legend.append(f"{name} {fmt(pts[-1][1])}  ")
    legend.truncate(width)
    cols, rows = width - GUTTER - 1, height - 2
    bits, owner, (xmin, xmax, ymin, ymax) = braille([pts for _, pts in series], cols, rows)
    lines = [legend]
    for r in range(rows):
        label = fmt(ymax) if r == 0 else fmt(ymin) if r == rows - 1 else ""
        line = Text(f"{label[: GUTTER - 1]:>{GUTTER - 1}} ", style="dim")
        line.append("┤" if label else "│", style="dim")
        for c in range(cols):
            i = owner[r][c]
            line.append(chr(0x2800 + bits[r][c]), style=COLORS[i % len(COLORS)] if i >= 0 else "")
        lines.append(line)
    left, right = f"step {fmt(xmin)}", fmt(xmax)
    axis = " " * GUTTER + "└" + left + " " * max(1, cols - len(left) - len(right)) + right
    lines.append(Text(axis[:width], style="dim"))
    return Text("\n").join(lines)


class LinePlot(Widget):
    """A line plot of a few named series of (step, value) points; redraws on resize and on `set_series`."""

    DEFAULT_CSS = """
    LinePlot { height: 1fr; min-height: 5; }
    """

    def __init__(self, empty: str = "no data yet", *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.empty = empty
        self.series: list[tuple[str, list[tuple[float, float]]]] = []

    def set_series(self, series: Sequence[tuple[str, Points]], empty: str | None = None) -> None:
        """Replace the plotted series (copied) and redraw."""
        self.series = [(name, list(pts)) for name, pts in series]
        if empty is not None:
            self.empty = empty
        self.refresh()

    def render(self) -> Text:
        return render_plot(self.series, self.size.width, self.size.height, self.empty)
