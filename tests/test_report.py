"""Run report and its figures: every relative link resolves, plots are valid PNGs of the expected size (the figures
themselves: tests/test_plots.py)."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import tiny_run_at
from wm.core.atomic import atomic_write_json
from wm.core.media import save_gif, save_png
from wm.core.metrics import make_logger
from wm.core.rundir import RunDir
from wm.tools import report as R

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _fixture_run(tmp_path, evals: bool = True) -> RunDir:
    run = tiny_run_at(tmp_path / "run")
    with make_logger(run, "train-vae", console=False) as log:
        for s in range(1, 6):
            log.scalars(s * 10, {"vae/loss": 100.0 / s, "vae/recon": 60.0 / s, "vae/kl": 32.0})
        log.scalars(50, {"vae/epoch": 1, "vae/loss": 20.0, "vae/val_loss": 25.0})
    run.mark_done("train-vae", {"vae/val_loss": 25.0})
    with make_logger(run, "train-mdnrnn", console=False) as log:
        for s in range(1, 4):
            log.scalars(s, {"mdnrnn/step": s, "mdnrnn/nll": 1.5 - 0.2 * s, "mdnrnn/done_loss": 0.3})
    with make_logger(run, "train-controller", console=False) as log:
        for g in range(1, 5):
            rec = {"es/generation": g, "es/mean": 100.0 + g, "es/max": 150.0 + g, "es/best": 150.0 + g}
            if g % 2 == 0:
                rec["es/eval_mean"] = 120.0 + g
            log.scalars(g, rec)
    save_png(run.stage_dir("train-vae") / "reconstructions.png", np.zeros((10, 10, 3), np.uint8))
    if evals:
        for tag, mode, mean, n in (
            ("real", "real", 512.0, 100),
            ("random", "real-random", 205.0, 100),
            ("few", "real", 1304.0, 3),
        ):
            s = {
                "episodes": n,
                "mean": mean,
                "std": 10.0,
                "min": 1.0,
                "median": 2.0,
                "max": 3.0,
                "len_mean": 2.0,
                "seeds": [1, 2, 3],
                "config_hash": "x",
                "params_file": None,
                "mode": mode,
                "tag": tag,
            }
            atomic_write_json(run.stage_dir("evaluate") / tag / "summary.json", s)
            (run.stage_dir("evaluate") / tag / "episodes.jsonl").write_text("{}\n")
        save_gif(run.stage_dir("evaluate") / "real" / "episode_000.gif", np.zeros((2, 8, 8, 3), np.uint8))
        (run.stage_dir("evaluate") / "temperature_sweep.md").write_text(
            "# t\n\n| τ | dream |\n|---|---|\n| 1.15 | 900 ± 5 |\n"
        )
    return run


def _links(md: str) -> list[str]:
    return [m for m in LINK.findall(md) if "://" not in m]


def test_report_links_resolve_and_plots_are_pngs(tmp_path, repo_root):
    from PIL import Image

    run = _fixture_run(tmp_path)
    res = subprocess.run(
        [sys.executable, "-m", "wm", "report", "--run", str(run.path)], capture_output=True, text=True, cwd=repo_root
    )
    assert res.returncode == 0, res.stderr
    md = (run.path / "report.md").read_text()
    links = _links(md)
    assert links and all((run.path / link).is_file() for link in links), [x for x in links if not (run.path / x).is_file()]
    for name in ("vae_loss.png", "mdnrnn_nll.png", "es.png"):
        assert f"plots/{name}" in links
        with Image.open(run.path / "plots" / name) as im:
            assert im.format == "PNG" and im.size == (640, 400)
    assert "vae/reconstructions.png" in links and "mdnrnn/dream_preview.gif" not in md  # links only to existing files
    assert "eval/real/episode_000.gif" in links
    # evaluation rows with the paper's numbers (§9); the default real evaluation comes first
    rows = [line for line in md.splitlines() if line.startswith("| real |") or line.startswith("| random |")]
    assert rows[0].startswith("| real |") and "**512.0 ± 10.0**" in rows[0] and "1092 ± 556" in rows[0]
    assert "210 ± 108" in rows[1]
    # a 3-episode mean is neither set off nor set beside the paper's
    few = next(line for line in md.splitlines() if line.startswith("| few |"))
    assert "| 1304.0 ± 0.0 |" not in few and "| 1304.0 ± 10.0 |" in few and "— (fewer than 20 episodes)" in few
    assert "1092" not in few
    assert "| 1.15 | 900 ± 5 |" in md
    assert "| train-vae | done |" in md and "val_loss 25" in md


def test_report_on_empty_run_has_no_dangling_links(tmp_path):
    run = tiny_run_at(tmp_path / "empty")
    md = R.render(run)
    assert _links(md) == ["config.yaml"] and "No evaluation yet" in md and "No training metrics yet" in md
    assert not (run.path / "plots").exists()


def test_the_report_lists_cs_checks_with_their_real_pick_and_marks_best(tmp_path):
    """`## C's checks`: each kept check's own score beside the real score `es.pick_real` gave it, and the check
    best.npz holds (the pick's, not the best check's)."""
    from wm.core.atomic import atomic_savez

    run = _fixture_run(tmp_path, evals=False)
    assert "## C's checks" not in R.render(run)
    for g, draw, score, real in ((2, 0, 120.0, 300.0), (4, 0, 130.0, 250.0), (6, 1, 140.0, -20.0)):
        run.check_params(g).parent.mkdir(parents=True, exist_ok=True)
        atomic_savez(
            run.check_params(g),
            params=np.full(3, float(g)),
            score=np.float64(score),
            generation=np.int64(g),
            draw=np.int64(draw),
            real=np.float64(real),
            real_std=np.float64(5.0),
            real_episodes=np.int64(16),
        )
    atomic_savez(run.params("best"), params=np.full(3, 2.0))
    md = R.render(run)
    assert "| generation | draw | check (dream, 8 episodes) | real (the pick, 16 training-side episodes) |" in md
    assert "| 2 | 0 | 120.0 | 300.0 ± 5.0 ← best.npz |" in md
    assert "| 6 | 1 | 140.0 | -20.0 ± 5.0 |" in md and md.count("← best.npz") == 1


def test_series_dedupes_resumed_steps():
    recs = [{"step": 2, "k": 1.0}, {"step": 1, "k": 5.0}, {"step": 2, "k": 3.0}, {"step": 3, "k": "nan"}, {"step": 4}]
    xs, ys = R.series_of(recs, "k")
    assert xs == [1.0, 2.0, 3.0] and ys[:2] == [5.0, 3.0] and np.isnan(ys[2])


def test_the_report_draws_the_rounds_and_the_sweep_figures(tmp_path):
    """Under round control `plots/rounds.png` sits in the rounds section; with a sweep's JSON
    `plots/temperature_sweep.png` in the sweep section (Doom: the paper's points beside)."""
    from PIL import Image

    from tests.helpers import rounds_run, tau_sweep_rows

    run = rounds_run(tmp_path)
    md = R.render(run)
    assert "## Iterative training" not in md and "rounds.png" not in md  # no round dirs: no rounds section
    for k in (1, 2):
        (run.path / f"round{k}").mkdir()
    atomic_write_json(run.artifact("tau_sweep"), {"seeds": [1], "config_hash": "x", "rows": tau_sweep_rows()})
    run.artifact("tau_sweep_table").write_text("# t\n\n| τ | dream |\n|---|---|\n| 1.15 | 950 ± 300 |\n")
    md = R.render(run)
    links = [x for x in _links(md) if not x.endswith("/report.md")]  # a round's own report: the pipeline writes it
    assert all((run.path / link).is_file() for link in links), [x for x in links if not (run.path / x).is_file()]
    rounds = md[md.index("## Iterative training") : md.index("## Evaluation")]
    sweep = md[md.index("## Temperature sweep") : md.index("## Training curves")]
    assert "(plots/rounds.png)" in rounds and "(plots/temperature_sweep.png)" in sweep
    assert "Round control stopped: the rounds ran out." in rounds and "**the run's result**" in rounds
    for name in ("rounds.png", "temperature_sweep.png"):
        with Image.open(run.path / "plots" / name) as im:
            assert im.format == "PNG" and im.size == (800, 450)
    # a sweep table without its JSON: the table, no figure
    run.artifact("tau_sweep").unlink()
    (run.plots_dir / "temperature_sweep.png").unlink()
    md = R.render(run)
    assert "| 1.15 | 950 ± 300 |" in md and "temperature_sweep.png" not in md


def test_report_missing_run_dir_is_an_error(tmp_path):
    from wm.core.errors import WMError

    with pytest.raises(WMError, match="does not exist"):
        R.main(type("A", (), {"run": str(tmp_path / "nope")})())


def test_pipeline_timings_merge_every_command_on_the_run(tmp_path):
    """A run resumed by a second pipeline command (its later rounds) keeps the first command's stage times."""
    import json

    from wm.core.rundir import RunDir
    from wm.tools.report import pipeline_timings

    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    recs = [
        {"time": 1.0, "total_s": 100.0, "collect": 60.0, "round 1/collect": 40.0},
        {"time": 2.0, "total_s": 50.0, "round 2/collect": 30.0, "round 1/collect": 20.0},
    ]
    run.timings_path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    t = pipeline_timings(run)
    assert (t["collect"], t["round 1/collect"], t["round 2/collect"], t["total_s"]) == (60.0, 20.0, 30.0, 150.0)
    assert pipeline_timings(RunDir(tmp_path / "none")) == {}


def test_key_figures_drop_their_namespace_unless_the_name_is_shown_already():
    """train-controller's line: the ES generation and the real pick's generation are two figures, told apart."""
    from wm.core.format import figures

    figs = {"es/generation": 60, "es/best": 798.1, "pick/generation": 50, "pick/real": 731.04}
    assert figures(figs) == "generation 60  best 798.1  pick generation 50  real 731"
    assert figures({"vae/loss": 41.2, "vae/val_loss": 40.0}, ", ") == "loss 41.2, val_loss 40"
