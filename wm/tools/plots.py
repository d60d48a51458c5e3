"""The report's and the results' PNG figures, drawn with matplotlib's Agg canvas (no display, no pyplot state).

    line_plot("plots/es.png", {"mean": (gens, means), "best": (gens, bests)}, title="CMA-ES", xlabel="generation")
    rounds_plot("plots/rounds.png", round_checks(run))          # each pass's dream score and real check
    results_plot("results/results.png", gather(runs, frozen))   # each run's mean and 95 % CI, the pooled mean
    sweep_plot("plots/temperature_sweep.png", rows, PAPER_DOOM)  # dream and real score against τ, the paper's beside

Each figure has a `*_figure` function that builds the `matplotlib.figure.Figure` (to inspect: its axes, lines,
labels) and a `*_plot` function that writes it atomically as a PNG of `size` pixels (`wm.core.atomic.atomic_path`).
matplotlib is imported inside the functions, so importing this module stays cheap (`wm --help`, the TUI).
Non-finite points are dropped; a series with one point is drawn as a marker.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from wm.core.atomic import atomic_path

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

SIZE = (640, 400)  # pixels (width, height) of a training curve
WIDE = (800, 450)  # of the rounds, results and sweep figures, whose legend sits on the right, outside the axes
DPI = 100
REAL, DREAM, RANDOM = "tab:blue", "tab:orange", "tab:gray"
Series = Mapping[str, tuple[Sequence[float], Sequence[float]]]
Bands = Mapping[str, tuple[Sequence[float], Sequence[float], Sequence[float]]]
PaperTable = Mapping[float, tuple[tuple[float, float], tuple[float, float]]]  # τ → ((dream, std), (real, std))


def _figure(size: tuple[int, int], title: str = "", xlabel: str = "", ylabel: str = "") -> tuple[Figure, Axes]:
    """A `size`-pixel figure on an Agg canvas with one axes, laid out so its labels fit."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(size[0] / DPI, size[1] / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, color="0.9")
    ax.set_axisbelow(True)
    return fig, ax


def save(fig: Figure, path: str | Path) -> Path:
    """Write `fig` as a PNG at `path` atomically (its pixel size is the figure's: no tight bounding box)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI)
    return Path(path)


def _no_data(ax: Axes, text: str = "no data") -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="gray")
    ax.set_xticks([])
    ax.set_yticks([])


def _legend_outside(ax: Axes) -> None:
    """The legend right of the axes (constrained layout makes room), where it hides no bar or point; the bars and
    error bars (matplotlib lists them last) first, as they were drawn."""
    from matplotlib.container import Container

    pairs = list(zip(*ax.get_legend_handles_labels(), strict=True))
    pairs.sort(key=lambda hl: not isinstance(hl[0], Container))  # a stable sort: each group keeps its order
    ax.legend(*zip(*pairs, strict=True), loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize="small")


def _num(v: Any) -> float:
    """A finite float of `v`, else NaN (None, a string, inf)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f if math.isfinite(f) else math.nan


# ---------------------------------------------------------------- training curves


def line_figure(
    series: Series,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    size: tuple[int, int] = SIZE,
    bands: Bands | None = None,
) -> Figure:
    """`series` ({name: (xs, ys)}) as lines on shared axes, one per series with points, with a legend; `bands`
    ({label: (xs, lows, highs)}, e.g. the recorded runs' span of a curve) shaded behind them."""
    fig, ax = _figure(size, title, xlabel, ylabel)
    drawn = 0
    for label, (xs, lo, hi) in (bands or {}).items():
        x, y0, y1 = (np.asarray(v, float) for v in (xs, lo, hi))
        ax.fill_between(x, y0, y1, alpha=0.18, color="0.4", label=label)
        drawn += 1
    for name, (xs, ys) in series.items():
        x, y = np.asarray(xs, float), np.asarray(ys, float)
        if x.shape != y.shape:
            raise ValueError(f"series {name!r}: {x.size} x values for {y.size} y values")
        ok = np.isfinite(x) & np.isfinite(y)
        if not ok.any():
            continue
        style = {"marker": "o", "linestyle": "none"} if ok.sum() == 1 else {"linewidth": 1.5}
        ax.plot(x[ok], y[ok], label=name, **style)
        drawn += 1
    if drawn:
        ax.legend(loc="best", fontsize="small")
    else:
        _no_data(ax)
    return fig


def line_plot(path: str | Path, series: Series, **kw: Any) -> Path:
    """Draw `series` with `line_figure` (its keyword arguments: title, xlabel, ylabel, size, bands) and write it
    atomically as a PNG at `path`."""
    return save(line_figure(series, **kw), path)


# ---------------------------------------------------------------- iterative training


def rounds_figure(checks: Mapping[str, Any], size: tuple[int, int] = WIDE) -> Figure:
    """Round control's record (`rounds.json`, `wm.rounds.record.round_checks`): per pass its dream score and real
    check as grouped bars, the final check as a marker where one was played, the run's result marked (its label
    and a star), and the random policy's check as a horizontal line when recorded."""
    passes = list(checks.get("passes") or [])
    fig, ax = _figure(size, "Iterative training: each pass's checks", "pass", "score")
    if not passes:
        _no_data(ax, "no pass checked yet")
        return fig
    names = [str(p.get("name", f"pass {i}")) for i, p in enumerate(passes)]
    result = str((checks.get("result") or {}).get("name", ""))
    x, w = np.arange(len(passes)), 0.38
    dream = np.array([_num(p.get("dream")) for p in passes])
    real = np.array([_num(p.get("real")) for p in passes])
    ax.bar(x - w / 2, np.nan_to_num(dream), w, color=DREAM, label="dream score (check)")
    ax.bar(x + w / 2, np.nan_to_num(real), w, color=REAL, label="real check")
    final = np.array([_num(p.get("final")) for p in passes])
    if np.isfinite(final).any():
        ax.plot(x[np.isfinite(final)] + w / 2, final[np.isfinite(final)], "D", color="navy", label="final check")
    rnd = _num(checks.get("random_check"))
    if checks.get("random_check") and math.isfinite(rnd):  # 0.0: none recorded (write_rounds' default)
        ax.axhline(rnd, color=RANDOM, linestyle="--", linewidth=1.2, label=f"random policy's check ({rnd:.0f})")
    if result in names:
        i = names.index(result)
        top = np.nanmax([real[i], final[i], 0.0])
        ax.plot([x[i] + w / 2], [top], "*", color="crimson", markersize=14, label="the run's result", clip_on=False)
    labels = [n.replace(" ", "\n") + ("\n(result)" if n == result else "") for n in names]  # "first pass" on two lines
    ax.set_xticks(x, labels, fontsize="small")
    _legend_outside(ax)
    return fig


def rounds_plot(path: str | Path, checks: Mapping[str, Any], size: tuple[int, int] = WIDE) -> Path:
    """Draw `rounds_figure` and write it atomically as a PNG at `path`."""
    return save(rounds_figure(checks, size), path)


# ---------------------------------------------------------------- several runs


def results_figure(doc: Mapping[str, Any], size: tuple[int, int] = WIDE) -> Figure:
    """`wm results`' figures (`wm.tools.results.gather`): per run (seed) its mean with its bootstrap 95 % CI as error
    bars (a frozen recipe's run hollow), the random policy's mean beside it where recorded, and the pooled mean over
    the runs as a line with its hierarchical CI as a band (two runs or more)."""
    runs = list(doc.get("runs") or [])
    fig, ax = _figure(size, f"C's evaluation eval/{doc.get('tag', 'real')} per run", "run (seed)", "mean score")
    if not runs:
        _no_data(ax, "no runs")
        return fig
    x = np.arange(len(runs))
    for frozen in (False, True):
        idx = [i for i, r in enumerate(runs) if bool(r.get("frozen")) == frozen]
        if not idx:
            continue
        means = np.array([_num(runs[i]["mean"]) for i in idx])
        ci = np.array([[_num(c) for c in runs[i]["ci95"]] for i in idx])
        err = np.abs(np.stack([means - ci[:, 0], ci[:, 1] - means]))
        ax.errorbar(
            x[idx],
            means,
            yerr=err,
            fmt="o",
            color=REAL,
            mfc="white" if frozen else REAL,
            capsize=4,
            label="mean, 95 % CI" + (" (frozen recipe)" if frozen else ""),
        )
    rnd = [(i, _num(r["random"]["mean"])) for i, r in enumerate(runs) if r.get("random")]
    if rnd:
        ri, rm = zip(*rnd, strict=True)
        ax.plot(np.asarray(ri) + 0.25, rm, "s", color=RANDOM, label="random policy's mean")
    agg = (doc.get("aggregate") or {}).get("all")
    if agg:
        lo, hi = (_num(c) for c in agg["ci95"])
        ax.axhline(_num(agg["mean"]), color="crimson", linewidth=1.5, label=f"pooled mean over {agg['runs']} runs")
        ax.axhspan(lo, hi, color="crimson", alpha=0.12, label="its hierarchical 95 % CI")
    ax.set_xticks(x, [f"{Path(str(r['run'])).name}\nseed {r.get('seed')}" for r in runs], fontsize="small")
    if len(runs) > 4:  # run names side by side would overlap: slanted, each ending under its point
        ax.tick_params(axis="x", labelrotation=30)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    ax.set_xlim(-0.6, len(runs) - 0.4)
    _legend_outside(ax)
    return fig


def results_plot(path: str | Path, doc: Mapping[str, Any], size: tuple[int, int] = WIDE) -> Path:
    """Draw `results_figure` and write it atomically as a PNG at `path`."""
    return save(results_figure(doc, size), path)


# ---------------------------------------------------------------- the τ sweep


def _mean_std(s: Any) -> tuple[float, float]:
    return (_num(s.get("mean")), _num(s.get("std"))) if isinstance(s, Mapping) else (math.nan, math.nan)


def sweep_figure(rows: Sequence[Mapping[str, Any]], paper: PaperTable | None = None, size: tuple[int, int] = WIDE) -> Figure:
    """The τ sweep (`eval/temperature_sweep.json`'s rows): the dream and the real score (mean ± std over the
    episodes) against τ, and the paper's points (`paper`: τ → ((dream, std), (real, std))) beside them, hollow."""
    fig, ax = _figure(size, "Temperature sweep", "temperature τ", "score (mean ± std)")
    pts = sorted((_num(r.get("temperature")), _mean_std(r.get("dream")), _mean_std(r.get("real"))) for r in rows)
    pts = [p for p in pts if math.isfinite(p[0])]
    if not pts and not paper:
        _no_data(ax)
        return fig
    span = [p[0] for p in pts] + [float(t) for t in (paper or {})]
    dx = 0.012 * max(max(span) - min(span), 0.5)  # the paper's points beside ours, not on them
    for k, (name, color) in enumerate((("dream", DREAM), ("real", REAL))):
        if pts:
            t = np.array([p[0] for p in pts])
            m, s = (np.array([p[1 + k][j] for p in pts]) for j in (0, 1))
            ok = np.isfinite(m)
            if ok.any():
                ax.errorbar(t[ok], m[ok], yerr=np.nan_to_num(s[ok]), fmt="-o", color=color, capsize=3, label=f"{name} score")
        if paper:
            taus = sorted(float(t) for t in paper)
            means, stds = (np.array([paper[t][k][j] for t in taus], float) for j in (0, 1))
            ax.errorbar(
                np.array(taus) + dx,
                means,
                yerr=stds,
                fmt="--o",
                color=color,
                mfc="white",
                alpha=0.8,
                capsize=3,
                linewidth=1,
                label=f"paper {name}",
            )
    _legend_outside(ax)
    return fig


def sweep_plot(
    path: str | Path, rows: Sequence[Mapping[str, Any]], paper: PaperTable | None = None, size: tuple[int, int] = WIDE
) -> Path:
    """Draw `sweep_figure` and write it atomically as a PNG at `path`."""
    return save(sweep_figure(rows, paper, size), path)
