"""`wm reference`: a run's curves against its preset's recorded runs (within, above, below), and a reference recorded
from runs."""

from __future__ import annotations

import json

import pytest

from tests.helpers import tiny_run_at
from wm import cli
from wm.core.atomic import atomic_write_json
from wm.core.rundir import RunDir
from wm.tools import reference


def _run(path, means: list[float], checks: dict[int, float], score: float | None = None) -> RunDir:
    run = tiny_run_at(path, "run.seed=3")
    lines = [{"step": g + 1, "es/generation": g + 1, "es/mean": m} for g, m in enumerate(means)]
    lines += [{"step": g, "es/eval_mean": v} for g, v in checks.items()]
    run.metrics_path("train-controller").parent.mkdir(parents=True, exist_ok=True)
    run.metrics_path("train-controller").write_text("".join(json.dumps(r) + "\n" for r in lines))
    if score is not None:
        atomic_write_json(run.eval_summary(), {"mean": score, "episodes": 100})
    return run


@pytest.fixture
def refs(tmp_path, monkeypatch):
    folder = tmp_path / "references"
    folder.mkdir()
    monkeypatch.setattr(reference, "REFERENCE_DIR", folder)
    curves = [({"10": 100.0, "20": 300.0}, {"10": 200.0}, 700.0), ({"10": 140.0, "20": 340.0}, {"10": 260.0}, 760.0)]
    doc = {
        "name": "doom tiny",
        "blocks": ["doom_takecover", "tiny"],
        "version": "1",
        "runs": [
            {"label": f"r{i}", "curves": {"es/mean": m, "es/eval_mean": c}, "score": s} for i, (m, c, s) in enumerate(curves)
        ],
    }
    (folder / "doom-tiny.json").write_text(json.dumps(doc))
    return folder


def test_a_run_reads_within_below_or_above_its_recorded_runs(tmp_path, refs):
    # generations 11–15 average 200 at generation 13: the references interpolate to 160–200 there
    run = _run(tmp_path / "a", [0.0] * 10 + [180.0, 190.0, 200.0, 210.0, 220.0], {10: 150.0}, score=800.0)
    ref, lines = reference.standing(run)
    assert ref["name"] == "doom tiny"
    assert lines == [
        "population mean 200 at generation 13: within the recorded runs' 160–200",
        "check of the CMA mean 150 at generation 10: below every recorded run's 200–260 (worse)",
        "score 800.0 over 100 episodes: above every recorded run's 700–760 (better)",
    ]
    other = tiny_run_at(tmp_path / "b", "es.popsize=16")  # another recipe: no reference
    assert reference.standing(other) == (None, [])


def test_status_and_the_verb_show_the_standing(tmp_path, refs, capsys):
    run = _run(tmp_path / "a", [50.0] * 12, {10: 230.0})
    assert cli.main(["status", "--run", str(run.path)]) == 0
    out = capsys.readouterr().out
    assert "against doom tiny version 1, 2 recorded runs" in out and "below every recorded run's" in out
    assert cli.main(["reference", "--run", str(run.path)]) == 0
    assert "check of the CMA mean 230 at generation 10: within the recorded runs' 200–260" in capsys.readouterr().out


def test_a_reference_is_recorded_from_runs_of_its_preset(tmp_path, refs, capsys):
    a = _run(tmp_path / "a", [10.0, 20.0], {2: 30.0}, score=400.0)
    out = tmp_path / "ref.json"
    argv = ["reference", "record", "--runs", str(a.path), "--name", "n", "--blocks", "doom_takecover", "tiny"]
    assert cli.main([*argv, "--version", "1", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["runs"][0]["curves"]["es/mean"] == {"1": 10.0, "2": 20.0} and doc["runs"][0]["score"] == 400.0
    assert cli.main([*argv[:-2], "doom_takecover", "small", "--version", "1", "--out", str(out)]) == 2
    assert "is not a run of --blocks doom_takecover small" in capsys.readouterr().err


def test_the_report_draws_the_recorded_runs_span_behind_the_curve(tmp_path, refs, monkeypatch):
    from wm.tools import plots, report

    drawn: dict[str, dict] = {}
    real = plots.line_figure

    def spy(series, *a, bands=None, **kw):
        drawn[kw.get("title", "")] = dict(bands or {})
        return real(series, *a, bands=bands, **kw)

    monkeypatch.setattr(plots, "line_figure", spy)
    run = _run(tmp_path / "a", [50.0] * 12, {10: 230.0})
    report.make_plots(run)
    (title,) = [t for t in drawn if drawn[t]]
    xs, lo, hi = drawn[title]["mean: recorded runs"]
    # generation 10: 100 and 140; 20: 300 and 340 (the checks' span is the other band)
    assert (xs, lo, hi) == ([10.0, 20.0], [100.0, 300.0], [140.0, 340.0])
    assert drawn[title]["eval of mean: recorded runs"] == ([10.0], [200.0], [260.0])
    fig = real({"a": ([1, 2], [1, 2])}, bands={"b": ([1, 2], [0, 1], [2, 3])})
    assert len(fig.axes[0].collections) == 1 and fig.axes[0].get_legend_handles_labels()[1] == ["b", "a"]
