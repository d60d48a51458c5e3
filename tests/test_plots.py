"""The matplotlib figures (wm.tools.plots): each kind built from fixture records, inspected as a Figure, and written
as a PNG of its size; importing the module imports no matplotlib."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import rounds_run, seeded_run, tau_sweep_rows, write_eval
from wm.core.atomic import atomic_write_json
from wm.core.rundir import RunDir
from wm.rounds.record import round_checks
from wm.tools import plots as P
from wm.tools.paper import PAPER_DOOM
from wm.tools.results import gather

PNG = b"\x89PNG\r\n\x1a\n"


def _png(path, size) -> None:
    """A PNG file of `size` (width, height) pixels, more than 1 kB, and no temporary file left beside it."""
    from PIL import Image

    data = path.read_bytes()
    assert data[:8] == PNG and len(data) > 1024
    with Image.open(path) as im:
        assert im.format == "PNG" and im.size == size
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".tmp-")] == []


def _errorbars(ax) -> list:
    from matplotlib.container import ErrorbarContainer

    return [c for c in ax.containers if isinstance(c, ErrorbarContainer)]


def test_line_figure_has_a_line_per_series_with_points(tmp_path):
    series = {
        "a": ([0, 1, 2, 3], [0.0, 1.0, float("nan"), 4.0]),  # the NaN point is dropped
        "one": ([1], [2.0]),  # one point: a marker, no line
        "empty": ([], []),
        "inf": ([1, 2], [float("inf"), float("-inf")]),
    }
    fig = P.line_figure(series, title="CMA-ES", xlabel="generation", ylabel="fitness")
    (ax,) = fig.axes
    assert [ln.get_label() for ln in ax.lines] == ["a", "one"]
    a, one = ax.lines
    assert a.get_xdata().tolist() == [0, 1, 3] and a.get_ydata().tolist() == [0, 1, 4]
    assert one.get_marker() == "o" and one.get_linestyle() == "None"
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("CMA-ES", "generation", "fitness")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "one"]
    path = P.line_plot(tmp_path / "plots" / "es.png", series, title="CMA-ES", xlabel="generation")
    _png(path, (640, 400))
    _png(P.line_plot(tmp_path / "small.png", series, size=(320, 200)), (320, 200))
    with pytest.raises(ValueError, match="3 x values for 2 y values"):
        P.line_figure({"bad": ([0, 1, 2], [0, 1])})


def test_a_figure_without_data_says_so(tmp_path):
    (ax,) = P.line_figure({"empty": ([], [])}, title="t").axes
    assert len(ax.lines) == 0 and ax.get_legend() is None and [t.get_text() for t in ax.texts] == ["no data"]
    _png(P.line_plot(tmp_path / "none.png", {}), (640, 400))
    assert [t.get_text() for t in P.rounds_figure({"passes": [], "result": {}}).axes[0].texts] == ["no pass checked yet"]
    assert [t.get_text() for t in P.results_figure({"runs": []}).axes[0].texts] == ["no runs"]
    assert [t.get_text() for t in P.sweep_figure([]).axes[0].texts] == ["no data"]


def test_rounds_figure_sets_each_passs_dream_score_beside_its_real_check(tmp_path):
    checks = round_checks(rounds_run(tmp_path))
    assert checks is not None and checks["result"]["name"] == "round1"
    (ax,) = P.rounds_figure(checks).axes
    dream, real = ax.containers
    assert [b.get_height() for b in dream] == [520.0, 900.0, 1800.0]
    assert [b.get_height() for b in real] == [310.0, 640.0, 450.0]
    assert dream.get_label() == "dream score (check)" and real.get_label() == "real check"
    assert all(d.get_x() < r.get_x() for d, r in zip(dream, real, strict=True))  # side by side, dream on the left
    lines = {ln.get_label(): ln for ln in ax.lines}
    assert lines["final check"].get_ydata().tolist() == [610.0]
    assert list(lines["random policy's check (210)"].get_ydata()) == [210.0, 210.0]  # a horizontal line
    star = lines["the run's result"]
    assert star.get_xdata()[0] == pytest.approx(real[1].get_x() + real[1].get_width() / 2)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["first\npass", "round1\n(result)", "round2"]
    # without a random check (write_rounds' 0.0) there is no random line
    (ax,) = P.rounds_figure({**checks, "random_check": 0.0}).axes
    assert not any("random" in ln.get_label() for ln in ax.lines)
    _png(P.rounds_plot(tmp_path / "plots" / "rounds.png", checks), P.WIDE)


def test_results_figure_has_each_runs_mean_and_ci_the_random_policy_and_the_pooled_mean(tmp_path):
    paths = []
    for i, m in enumerate([200.0, 400.0, 600.0]):
        run = seeded_run(tmp_path, f"s{i}", seed=i)
        write_eval(run, np.tile([m - 50, m + 50], 20))
        if i != 1:  # one run without a random baseline
            write_eval(run, [150.0] * 40, tag="random")
        paths.append(str(run.path))
    frozen = seeded_run(tmp_path, "f", seed=9)
    write_eval(frozen, np.tile([450.0, 550.0], 20))
    doc = gather(paths, [str(frozen.path)], resamples=500)
    (ax,) = P.results_figure(doc).axes
    live, fro = _errorbars(ax)
    assert live.get_label() == "mean, 95 % CI" and fro.get_label() == "mean, 95 % CI (frozen recipe)"
    marks = live.lines[0]
    assert marks.get_xdata().tolist() == [0, 1, 2] and marks.get_ydata().tolist() == [200.0, 400.0, 600.0]
    assert fro.lines[0].get_xdata().tolist() == [3] and fro.lines[0].get_mfc() == "white"
    (bars,) = live.lines[2]  # the error bars span each run's CI
    for seg, r in zip(bars.get_segments(), doc["runs"][:3], strict=True):
        assert sorted(seg[:, 1]) == pytest.approx(r["ci95"])
    lines = {ln.get_label(): ln for ln in ax.lines}
    rnd = lines["random policy's mean"]
    assert rnd.get_xdata().tolist() == [0.25, 2.25] and rnd.get_ydata().tolist() == [150.0, 150.0]
    pooled = lines["pooled mean over 4 runs"]
    assert list(pooled.get_ydata()) == pytest.approx([doc["aggregate"]["all"]["mean"]] * 2)
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["s0\nseed 0", "s1\nseed 1", "s2\nseed 2", "f\nseed 9"]
    assert {t.get_rotation() for t in ax.get_xticklabels()} == {0.0}  # four runs: upright
    many = {"tag": "real", "runs": [{**doc["runs"][0], "run": f"doom-small-s{i}"} for i in range(7)]}
    (ax7,) = P.results_figure(many).axes  # seven long run names would overlap upright: slanted, ending under each run
    assert {(t.get_rotation(), t.get_horizontalalignment()) for t in ax7.get_xticklabels()} == {(30.0, "right")}
    _png(P.results_plot(tmp_path / "out" / "results.png", doc), P.WIDE)
    # one run: no pooled mean (no aggregate over one run)
    (ax,) = P.results_figure(gather(paths[:1], [], resamples=200)).axes
    assert not any(ln.get_label().startswith("pooled") for ln in ax.lines)


def test_sweep_figure_has_dream_and_real_against_tau_and_the_papers_points(tmp_path):
    run = RunDir(tmp_path / "r")
    atomic_write_json(run.artifact("tau_sweep"), {"seeds": [1, 2], "config_hash": "x", "rows": tau_sweep_rows()})
    from wm.tools.report import sweep_rows

    rows = sweep_rows(run)
    (ax,) = P.sweep_figure(rows, PAPER_DOOM).axes
    bars = {c.get_label(): c for c in _errorbars(ax)}
    assert sorted(bars) == ["dream score", "paper dream", "paper real", "real score"]
    dream = bars["dream score"].lines[0]
    assert dream.get_xdata().tolist() == [0.5, 1.0, 1.15, 1.3]  # sorted by τ
    assert dream.get_ydata().tolist() == [1900.0, 1200.0, 950.0, 700.0]
    assert bars["real score"].lines[0].get_ydata().tolist() == [300.0, 800.0, 900.0, 650.0]
    paper = bars["paper real"].lines[0]
    taus = sorted(PAPER_DOOM)
    assert paper.get_ydata().tolist() == [PAPER_DOOM[t][1][0] for t in taus]
    assert all(0 < x - t < 0.05 for x, t in zip(paper.get_xdata(), taus, strict=True))  # beside, not on ours
    assert bars["paper dream"].lines[0].get_ydata().tolist() == [PAPER_DOOM[t][0][0] for t in taus]
    assert ax.get_xlabel() == "temperature τ"
    (ax,) = P.sweep_figure(rows).axes  # a game without the paper's τ table
    assert sorted(c.get_label() for c in _errorbars(ax)) == ["dream score", "real score"]
    _png(P.sweep_plot(tmp_path / "plots" / "temperature_sweep.png", rows, PAPER_DOOM), P.WIDE)


def test_importing_plots_imports_no_matplotlib(repo_root):
    code = "import sys, wm.tools.plots, wm.tools.report, wm.tools.results; print('matplotlib' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo_root, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False"
