"""`python -m wm results`: several runs gathered into one table with bootstrap CIs, on fake run dirs."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import seeded_run, write_eval
from wm.cli import main as wm_main
from wm.core import config as C
from wm.core.atomic import atomic_write_json
from wm.core.errors import WMError
from wm.core.rundir import RunDir
from wm.tools.results import bootstrap_ci, format_table, gather, gather_paired, hierarchical_ci, paired_row

SEEDS = list(range(1000, 1100))


def _rounds(run: RunDir, result: str) -> None:
    """Round control's record naming `result` as the run's result (paths as the pipeline stores them)."""
    names = ["first pass", "round1", "round2", "round3"]
    passes = [{"name": n, "path": str(run.path / n if n != "first pass" else run.path), "real": 1.0} for n in names]
    doc = {"passes": passes, "result": next(p for p in passes if p["name"] == result), "stopped": None}
    atomic_write_json(run.rounds_path, doc)


def test_known_returns_give_known_figures_and_a_ci_around_the_mean(tmp_path):
    run = seeded_run(tmp_path, "a", seed=7)
    write_eval(run, [100, 200, 300, 400])
    write_eval(run, [50, 50, 50, 50], tag="random")
    doc = gather([str(run.path)], [], resamples=2000)
    r = doc["runs"][0]
    assert (r["seed"], r["episodes"], r["mean"], r["median"]) == (7, 4, 250.0, 250.0)
    assert r["std"] == pytest.approx(np.std([100, 200, 300, 400]))
    lo, hi = r["ci95"]
    assert 100 <= lo < 250 < hi <= 400
    assert r["random"]["mean"] == 50 and r["ratio"] == 5.0 and r["random"]["same_seeds"]
    assert r["note"] == "only 4 episodes: the CI is rough (the protocol plays 100)"  # fewer than 20


def test_no_ratio_to_a_negative_random_mean(tmp_path):
    """CarRacing's random policy scores about −27: C's 700 is not "−26×" random; the ratio is left out there."""
    run = seeded_run(tmp_path, "car", seed=1)
    write_eval(run, [700.0, 720.0])
    write_eval(run, [-30.0, -25.0], tag="random")
    doc = gather([str(run.path)], [], resamples=200)
    assert doc["runs"][0]["ratio"] is None and doc["aggregate"]["all"] is None  # one run: no aggregate over runs
    assert doc["runs"][0]["random"]["mean"] == -27.5
    assert "| -27.5 ± 2.5 | — |" in format_table(doc)


def test_bootstrap_ci_matches_the_normal_approximation_for_400_episodes():
    x = np.random.default_rng(123).normal(500.0, 150.0, size=400)
    lo, hi = bootstrap_ci(x, resamples=10000, seed=0)
    half = 1.96 * x.std() / np.sqrt(x.size)  # independent: mean ± 1.96 σ/√n
    assert lo < x.mean() < hi
    assert lo == pytest.approx(x.mean() - half, abs=0.05 * half)
    assert hi == pytest.approx(x.mean() + half, abs=0.05 * half)
    assert bootstrap_ci(x, resamples=10000, seed=0) == (lo, hi)  # a fixed generator: the same CI every time


def test_all_runs_aggregate_of_three_runs(tmp_path):
    paths = []
    for i, m in enumerate([100.0, 200.0, 600.0]):
        run = seeded_run(tmp_path, f"s{i}", seed=i)
        write_eval(run, np.tile([m - 10, m + 10], 50))  # mean m, std 10, 100 episodes
        paths.append(str(run.path))
    frozen = seeded_run(tmp_path, "f", seed=9)
    write_eval(frozen, np.tile([290.0, 310.0], 50))
    doc = gather(paths, [str(frozen.path)], resamples=4000)
    agg = doc["aggregate"]
    a = agg["all"]
    assert (a["runs"], a["episodes"]) == (4, 400)
    assert a["mean"] == pytest.approx(300.0) and a["min"] == 100.0 and a["max"] == 600.0
    assert a["std"] == pytest.approx(np.std([100, 200, 600, 300]))
    n = agg["non_frozen"]
    assert (n["runs"], n["mean"], n["min"]) == (3, pytest.approx(300.0), 100.0)
    assert n["std"] == pytest.approx(np.std([100, 200, 600]))
    assert agg["frozen"] is None  # one frozen run: no "± over runs" of one run
    assert [r["frozen"] for r in doc["runs"]] == [False, False, False, True]
    # the hierarchical CI resamples the runs: far wider than the ±2 of the episodes alone, within the run means
    lo, hi = n["ci95"]
    assert 90 < lo < 200 and 400 < hi < 610


def test_hierarchical_ci_resamples_runs_then_episodes():
    # runs without spread inside: only the runs' resampling is left; 3 runs drawn 3 times give min 100 and max 600
    # each with probability 1/27 > 2.5 %, so the percentile CI is exactly [100, 600]. An episode-only bootstrap of the
    # pooled episodes would give [300, 300].
    assert hierarchical_ci([np.full(50, 100.0), np.full(50, 200.0), np.full(50, 600.0)], 4000) == (100.0, 600.0)
    # with spread inside the runs: against a plain loop written from the docstring's description
    rng = np.random.default_rng(5)
    runs = [rng.normal(m, 80.0, size=60) for m in (300.0, 340.0, 420.0, 380.0)]
    got = hierarchical_ci(runs, 10000, seed=1)
    ref_rng, stats = np.random.default_rng(99), []
    for _ in range(4000):
        picked = [runs[i] for i in ref_rng.integers(0, len(runs), len(runs))]
        stats.append(np.mean([ref_rng.choice(x, x.size).mean() for x in picked]))
    ref = np.percentile(stats, [2.5, 97.5])
    width = ref[1] - ref[0]
    assert got[0] == pytest.approx(ref[0], abs=0.08 * width) and got[1] == pytest.approx(ref[1], abs=0.08 * width)
    pooled = bootstrap_ci(np.concatenate(runs), 4000)  # the episodes alone miss the seed-to-seed spread
    assert width > 2 * (pooled[1] - pooled[0])


def test_the_result_round_of_round_control_is_reported(tmp_path):
    run = seeded_run(tmp_path, "r")
    write_eval(run, [100] * 10)
    for k, v in ((1, 200), (2, 700), (3, 400)):
        write_eval(RunDir(run.path / f"round{k}"), [v] * 10)
    _rounds(run, "round2")
    r = gather([str(run.path)], [], resamples=200)["runs"][0]
    assert r["result"]["name"] == "round2" and r["mean"] == 700.0
    assert r["result"]["path"] == str(run.path / "round2")
    _rounds(run, "first pass")
    assert gather([str(run.path)], [], resamples=200)["runs"][0]["mean"] == 100.0
    # without round control's record: the last round that has an eval/real summary
    run.rounds_path.unlink()
    RunDir(run.path / "round4").path.mkdir()
    r = gather([str(run.path)], [], resamples=200)["runs"][0]
    assert (r["result"]["name"], r["mean"]) == ("round3", 400.0)


def test_a_random_baseline_on_other_seeds_is_flagged(tmp_path):
    run = seeded_run(tmp_path, "r")
    write_eval(run, [300] * 100, seeds=SEEDS)
    write_eval(run, [150] * 100, tag="random", seeds=[s + 1 for s in SEEDS])
    doc = gather([str(run.path)], [], resamples=200)
    r = doc["runs"][0]
    assert not r["random"]["same_seeds"] and "random baseline on other seeds" in r["note"]
    assert "1001…1100" in r["note"] and "1000…1099" in r["note"]
    from wm.tools.results import format_table

    assert "random baseline on other seeds" in format_table(doc)
    write_eval(run, [150] * 100, tag="random", seeds=SEEDS)
    assert gather([str(run.path)], [], resamples=200)["runs"][0]["note"] == ""


def test_cli_writes_the_table_and_json(tmp_path, capsys):
    a, b = seeded_run(tmp_path, "s0", seed=0), seeded_run(tmp_path, "s1", seed=1)
    write_eval(a, [100, 300] * 50)
    write_eval(b, [300, 500] * 50)
    write_eval(a, [50] * 100, tag="random")
    out = tmp_path / "out"
    assert wm_main(["results", "--runs", str(a.path), "--frozen", str(b.path), "--out", str(out), "--resamples", "500"]) == 0
    text = capsys.readouterr().out
    md = (out / "results.md").read_text()
    assert md in text and md.startswith("| run | seed | C |")
    lines = md.splitlines()
    assert lines[2].startswith(f"| {a.path} | 0 | single pass |  | 100 | 200.0 ± 100.0 | 200.0 | [")
    assert "| 50.0 ± 0.0 | 4.00× |" in lines[2]
    assert "frozen recipe" in lines[3] and "no random baseline" in lines[3]
    assert lines[4].startswith("| **all runs (2)** |") and "**300.0 ± 100.0**" in lines[4] and "min run mean 200.0" in lines[4]
    doc = json.loads((out / "results.json").read_text())
    assert doc["aggregate"]["all"]["mean"] == 300.0 and doc["aggregate"]["frozen"] is None
    assert doc["aggregate"]["all"]["ratio"] is None  # one run has no random baseline


def test_cli_plot_writes_the_results_figure(tmp_path, capsys):
    """`--plot`: results.png beside the table (the figure's content: tests/test_plots.py); refused with --paired."""
    from PIL import Image

    a, b = seeded_run(tmp_path, "s0", seed=0), seeded_run(tmp_path, "s1", seed=1)
    write_eval(a, [100, 300] * 50, seeds=SEEDS)
    write_eval(b, [300, 500] * 50, seeds=SEEDS)
    write_eval(a, [50] * 100, tag="random", seeds=SEEDS)
    out = tmp_path / "out"
    assert wm_main(["results", "--runs", str(a.path), str(b.path), "--out", str(out), "--resamples", "200", "--plot"]) == 0
    assert f"{out / 'results.png'}" in capsys.readouterr().out.splitlines()[-1]
    data = (out / "results.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1024
    with Image.open(out / "results.png") as im:
        assert im.size == (800, 450)
    assert wm_main(["results", "--runs", str(a.path), "--out", str(tmp_path / "plain"), "--resamples", "200"]) == 0
    assert not (tmp_path / "plain" / "results.png").exists()  # only with --plot
    bad = tmp_path / "bad"
    assert wm_main(["results", "--paired", str(a.path), str(b.path), "--out", str(bad), "--plot"]) == 2
    assert "--plot draws the --runs table" in capsys.readouterr().err and not bad.exists()


@pytest.mark.parametrize("what", ["not a folder", "no config", "no eval", "a good run then a bad one", "twice"])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, what):
    good = seeded_run(tmp_path, "good")
    write_eval(good, [100] * 10)
    bad = tmp_path / "bad"
    if what == "no config":
        bad.mkdir()
    if what in ("no eval", "a good run then a bad one"):
        seeded_run(tmp_path, "bad")
    runs = [str(good.path), str(good.path)] if what == "twice" else [str(bad)]
    if what == "a good run then a bad one":
        runs = [str(good.path), str(bad)]
    out = tmp_path / "out"
    rc = wm_main(["results", "--runs", *runs, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert ("twice" in err) if what == "twice" else (str(bad) in err)
    assert not out.exists()


def test_a_paired_comparison_matches_episodes_by_seed(tmp_path):
    """B − A over the seeds both played, against the textbook paired formula; unmatched episodes are left out."""
    a, b = seeded_run(tmp_path, "a"), seeded_run(tmp_path, "b")
    write_eval(a, [100, 200, 300, 400], seeds=[1000, 1001, 1002, 1003])
    write_eval(b, [250, 250, 450, 0], seeds=[1001, 1002, 1003, 1004])  # 1001–1003 shared
    r = paired_row(str(a.path), str(b.path), resamples=2000)
    x, y = np.array([200.0, 300.0, 400.0]), np.array([250.0, 250.0, 450.0])
    d = y - x
    assert (r["matched"], r["a"]["episodes"], r["b"]["episodes"]) == (3, 4, 4)
    assert (r["a"]["mean"], r["b"]["mean"]) == (300.0, pytest.approx(316.6667, abs=1e-3))
    assert r["diff"] == pytest.approx(d.mean()) and r["diff"] == pytest.approx(50 / 3)
    assert r["paired_se"] == pytest.approx(np.sqrt(np.sum((d - d.mean()) ** 2) / 2) / np.sqrt(3))
    assert r["corr"] == pytest.approx(np.corrcoef(x, y)[0, 1])
    assert r["ci95"][0] <= r["diff"] <= r["ci95"][1] and -50 <= r["ci95"][0] and r["ci95"][1] <= 50


def test_a_paired_side_is_its_runs_result_round(tmp_path):
    a, b = seeded_run(tmp_path, "a"), seeded_run(tmp_path, "b")
    write_eval(a, [100] * 10)
    write_eval(b, [150] * 10)
    for k, v in ((1, 200), (2, 700)):
        write_eval(seeded_run(b.path, f"round{k}"), [v] * 10)
    _rounds(b, "round1")
    r = gather_paired([[str(a.path), str(b.path)], [str(a.path), str(b.path / "round2")]], resamples=200)["pairs"]
    assert (r[0]["b"]["result"], r[0]["diff"], r[0]["paired_se"]) == ("round1", 100.0, 0.0)
    assert (r[1]["b"]["result"], r[1]["diff"]) == ("single pass", 600.0)  # a round's own directory is that round
    assert r[0]["corr"] is None  # constant returns: no correlation to report


def test_paired_cli_writes_its_table_and_refuses_other_seeds(tmp_path, capsys):
    a, b, c = seeded_run(tmp_path, "a"), seeded_run(tmp_path, "b"), seeded_run(tmp_path, "c")
    write_eval(a, [100, 300] * 50, seeds=SEEDS)
    write_eval(b, [200, 300] * 50, seeds=SEEDS)
    write_eval(c, [200, 300] * 50, seeds=[s + 100 for s in SEEDS])
    out = tmp_path / "out"
    assert wm_main(["results", "--paired", str(a.path), str(b.path), "--out", str(out), "--resamples", "500"]) == 0
    md = (out / "paired.md").read_text()
    assert md in capsys.readouterr().out
    row = md.splitlines()[2]
    assert row.startswith(f"| {a.path} (single pass) | {b.path} (single pass) | 100 (100 seeds 1000…1099) | 200.0 | 250.0 |")
    assert "**+50.0** (± 5.0)" in row  # d is 100 on 50 seeds, 0 on 50: std (ddof 1) 50.25 / 10
    assert json.loads((out / "paired.json").read_text())["pairs"][0]["matched"] == 100
    bad = tmp_path / "bad"
    for args in (["--paired", str(a.path), str(c.path)], ["--paired", str(a.path), str(b.path), "--runs", str(a.path)]):
        assert wm_main(["results", *args, "--out", str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
        assert ("share 0 evaluation seeds" in err) if str(c.path) in args else ("without --runs" in err)
    assert not bad.exists()


def test_no_runs_is_an_error():
    with pytest.raises(WMError, match="no runs given"):
        gather([], [])


def test_results_help_loads_no_tensorflow(repo_root):
    code = (
        "import sys, contextlib, io\n"
        "import wm.tools.results\n"
        "from wm.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try: main(['results', '--help'])\n"
        "    except SystemExit: pass\n"
        "print([m for m in ('tensorflow', 'keras', 'scipy', 'matplotlib') if m in sys.modules])\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo_root, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "[]"


def test_runs_of_another_step_cap_or_env_are_refused_and_few_episodes_are_flagged(tmp_path, capsys):
    """A 300-step tiny run and a 2100-step run in one table would average two games: refused in one line; a run of
    fewer than 20 episodes says its CI is rough; one run gets no "± over runs" row."""
    a, b = seeded_run(tmp_path, "a", seed=0), RunDir(tmp_path / "b")
    b.bind_config(C.load(["doom_takecover", "small"], ["run.seed=1"]), None)
    write_eval(a, [100.0] * 30)
    write_eval(b, [900.0] * 30)
    with pytest.raises(WMError, match=r"the runs differ in env.max_steps \(300 in .*a, 2100 in .*b\)"):
        gather([str(a.path), str(b.path)], [], resamples=200)
    one = tmp_path / "one"
    assert wm_main(["results", "--runs", str(a.path), "--out", str(one), "--resamples", "200"]) == 0
    assert "all runs" not in (one / "results.md").read_text()
    few = seeded_run(tmp_path, "few", seed=2)
    write_eval(few, [1304.0, 1304.0, 1304.0])
    assert wm_main(["results", "--runs", str(few.path), "--out", str(tmp_path / "f"), "--resamples", "200"]) == 0
    assert "warning: fewer than 20 episodes" in capsys.readouterr().err
    assert "only 3 episodes: the CI is rough" in (tmp_path / "f" / "results.md").read_text()
