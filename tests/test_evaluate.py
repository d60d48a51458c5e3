"""Evaluate stage, τ sweep and GIFs: seed list, summary fields, random baseline, one table row per τ."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import evaluate_run, stage_run
from wm.core import config as C
from wm.core.errors import WMError
from wm.core.rundir import RunDir
from wm.envs.setup import setup
from wm.rollouts import evaluation as EV
from wm.rollouts import recording
from wm.rollouts.engine import kind_of
from wm.stages import evaluate as E


def test_seed_list_summary_and_formatting():
    cfg = C.load(["doom_takecover"], ["evaluate.seed=1000"])
    assert EV.seed_list(cfg) == list(range(1000, 1100))
    assert EV.seed_list(cfg, 3) == [1000, 1001, 1002]
    r = np.array([141.0, 2100.0, 831.0, 500.0])
    s = EV.summarize(r, np.array([141, 2100, 831, 500]))
    assert s["std"] == pytest.approx(math.sqrt(((r - r.mean()) ** 2).mean()))  # np.std, ddof 0 (§9)
    assert (s["episodes"], s["min"], s["median"], s["max"]) == (4, 141.0, 665.5, 2100.0)
    assert EV.format_summary(s).startswith(f"{r.mean():.1f} ± ") and " over 4 episodes (min 141," in EV.format_summary(s)
    one = EV.summarize(r[:1], np.array([141]))
    assert EV.format_summary(one) == "141.0 ± 0.0 over 1 episode (min 141, median 141.0, max 141)"
    assert kind_of(True, True) == "random-dream" and kind_of(False, False) == "real" and kind_of(False, True) == "random"
    assert not E.side_run(E.Options()) and E.side_run(E.Options(random=True)) and E.side_run(E.Options(tag="x"))


def test_missing_controller_is_a_clear_error(tmp_path):
    cfg, run = evaluate_run(tmp_path, with_models=False)
    with pytest.raises(WMError, match=r"controller/best\.npz not found"):
        stage_run("evaluate", cfg, run)
    with pytest.raises(WMError, match=r"nope\.npz not found"):
        stage_run("evaluate", cfg, run, params=str(tmp_path / "nope.npz"))
    assert not run.is_done("evaluate")


def test_dream_evaluation_and_gif(tmp_path):
    cfg, run = evaluate_run(tmp_path)
    stage_run("evaluate", cfg, run, dream=True, temperature=1.15)
    s = json.loads((run.path / "eval/dream/summary.json").read_text())
    assert s["seeds"] == [500, 501, 502] and s["mode"] == "dream" and s["temperature"] == 1.15
    assert s["config_hash"] == cfg.hash() and s["params_file"].endswith("controller/best.npz")
    from wm.rollouts.evaluation import input_digest

    assert s["inputs"] == input_digest(setup(cfg), run, run.params("best"), dream=True)
    assert set(s["inputs"]) >= {"mdnrnn", "params"}
    rows = [json.loads(line) for line in (run.path / "eval/dream/episodes.jsonl").read_text().splitlines()]
    assert [r["seed"] for r in rows] == [500, 501, 502]
    assert s["mean"] == pytest.approx(np.mean([r["return"] for r in rows]))
    assert all(1 <= r["length"] <= 24 for r in rows)
    assert not run.is_done("evaluate") and not (run.path / "eval/summary.json").exists()  # a side run
    # the GIF replays episode 0: one decoded dream panel between its label strips, ceil(length / stride) frames
    from PIL import Image

    with Image.open(run.path / "eval/dream/episode_000.gif") as im:
        assert im.size == (recording.PANEL_SIZE, recording.PANEL_SIZE + 2 * recording.STRIP)
        assert im.n_frames == math.ceil(rows[0]["length"] / 2)
    # the recording's rewards (the return in its labels) are the evaluated episode's
    from wm.rollouts.world import load_world

    params = load_world(setup(cfg), run, need=("params",), params=run.params("best")).params
    cfg_t = C.update(cfg, {"dream": {"temperature": 1.15}}, source="test")
    rec = recording.record_episode(setup(cfg_t), run, "dream", params, 500)
    assert len(rec["reward"]) == len(rec["dream"]) == rows[0]["length"]
    assert rec["reward"].sum() == pytest.approx(rows[0]["return"])


def test_episode_panels_shape():
    frames = {k: np.zeros((7, 64, 64, 3), np.uint8) for k in ("input", "reconstruction")}
    frames["real"] = np.zeros((7, 240, 320, 3), np.uint8)
    out = recording.episode_panels(frames, stride=3)
    size, strip = recording.PANEL_SIZE, recording.STRIP
    assert out.shape == (3, size + 2 * strip, 3 * (size + 4) - 4, 3)  # names above, the step below


@pytest.mark.env
def test_random_baseline_needs_no_model(tmp_path, repo_root):
    """`--random` in a fresh run dir (nothing trained) through the CLI, with 2 worker processes."""
    run = tmp_path / "fresh"
    cmd = [
        sys.executable,
        "-m",
        "wm",
        "evaluate",
        "--configs",
        "doom_takecover",
        "tiny",
        "--run",
        str(run),
        "--random",
        "--episodes",
        "3",
        "--set",
        "env.max_steps=30",
        "evaluate.workers=2",
        "evaluate.gif_episodes=0",
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=repo_root, timeout=300)
    assert res.returncode == 0, res.stderr
    s = json.loads((run / "eval/random/summary.json").read_text())
    assert s["episodes"] == 3 and s["params_file"] is None and s["mode"] == "real-random"
    assert s["seeds"] == [1000, 1001, 1002]
    assert 1 <= s["min"] <= s["max"] <= 30  # +1 per tic, capped at max_steps (§1b)
    assert "random: " in res.stdout and not (run / "eval/DONE").exists()


@pytest.mark.env
def test_real_evaluation_marks_done_and_records_gif(tmp_path):
    cfg, run = evaluate_run(tmp_path)
    stage_run("evaluate", cfg, run)
    s = json.loads((run.path / "eval/summary.json").read_text())
    assert s == json.loads((run.path / "eval/real/summary.json").read_text())
    for k in ("episodes", "mean", "std", "min", "median", "max", "len_mean", "seeds", "config_hash", "params_file", "mode"):
        assert k in s
    assert s["seeds"] == [500, 501, 502] and s["mode"] == "real" and "temperature" not in s
    assert run.is_done("evaluate")
    done = json.loads((run.stage_dir("evaluate") / "DONE").read_text())
    assert done["eval/mean"] == s["mean"] and done["eval/episodes"] == 3 and done["params_file"] == s["params_file"]
    from wm.core.metrics import last_record

    rec = last_record(run.metrics_path("evaluate"))
    assert rec["eval/mean"] == pytest.approx(s["mean"]) and rec["eval/episodes"] == 3
    rows = [json.loads(line) for line in (run.path / "eval/real/episodes.jsonl").read_text().splitlines()]
    from PIL import Image

    with Image.open(run.path / "eval/real/episode_000.gif") as im:
        size, strip = recording.PANEL_SIZE, recording.STRIP
        assert im.size == (3 * (size + 4) - 4, size + 2 * strip)  # real screen | 64×64 input | V reconstruction
        assert im.n_frames == math.ceil(rows[0]["length"] / 2)
    from wm.rollouts.world import load_world

    rec = recording.record_episode(
        setup(cfg), run, "real", load_world(setup(cfg), run, ("params",), run.params("best")).params, 500
    )
    assert len(rec["reward"]) == len(rec["real"]) == rows[0]["length"]
    assert rec["reward"].sum() == pytest.approx(rows[0]["return"])  # the return the labels show, step by step


@pytest.mark.env
def test_sweep_has_one_row_per_temperature(tmp_path):
    cfg, run = evaluate_run(tmp_path)
    stage_run("evaluate", cfg, run, sweep=True, episodes=2)
    data = json.loads((run.path / "eval/temperature_sweep.json").read_text())
    assert [r["temperature"] for r in data["rows"]] == [0.5, 1.15] and data["seeds"] == [500, 501]
    assert data["rows"][0]["real"] == data["rows"][1]["real"]  # one controller: its real score is τ-free
    md = (run.path / "eval/temperature_sweep.md").read_text()
    table = [line for line in md.splitlines() if line.startswith("| ") and not line.startswith("| τ")]
    assert len(table) == 2 and table[1].startswith("| 1.15 |") and "1092 ± 556" in table[1]


@pytest.mark.env
def test_the_sweeps_rows_play_over_the_ranks_of_one_mpi_job_as_in_one_process(tmp_path, repo_root):
    """`mpirun -n 3 python -m wm evaluate --sweep` with a second C trained at another τ: one MPI pool plays both
    controllers' real episodes (its ranks get the second C as a new context) and the table equals the serial one's
    (before: the pool of the first row stopped the ranks and the second played in local processes)."""
    from wm.core.atomic import atomic_savez
    from wm.tools.sweep import prepare_tau_run

    cfg, run = evaluate_run(tmp_path)
    for verb in ("collect", "train-vae", "encode", "train-mdnrnn"):
        run.mark_done(verb, {})
    other = prepare_tau_run(run, 0.5)
    n = np.load(run.params("best"))["params"].size
    theta = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    atomic_savez(other.params("best"), params=theta, score=np.float64(1.0), generation=np.int64(1))
    other.mark_done("train-controller", {})
    mpirun = str(Path(sys.executable).with_name("mpirun"))
    rows = {}
    for ranks in (1, 3):
        argv = [sys.executable, "-m", "wm", "evaluate", "--run", str(run.path), "--sweep", "--episodes", "3"]
        res = subprocess.run(
            [*([mpirun, "-n", "3"] if ranks > 1 else []), *argv, "--sweep-runs", str(other.path)],
            capture_output=True, text=True, cwd=repo_root, timeout=300,
        )  # fmt: skip
        assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
        rows[ranks] = json.loads((run.path / "eval/temperature_sweep.json").read_text())["rows"]
    log = run.log_path("evaluate").read_text()
    assert log.count("MPI pool: 2 worker ranks ready with a new context") == 2  # one per controller
    assert [r["controller_run"] for r in rows[3]] == [str(other.path), str(run.path)]
    assert [r["real"] for r in rows[3]] == [r["real"] for r in rows[1]]
    assert rows[3][0]["params_file"] != rows[3][1]["params_file"]  # two controllers: two real evaluations


def test_prepare_tau_run_links_upstream_stages(tmp_path):
    from wm.tools.sweep import controller_sources, prepare_tau_run

    cfg, run = evaluate_run(tmp_path, with_models=False)
    with pytest.raises(WMError, match="not done"):
        prepare_tau_run(run, 1.15)
    for verb in ("collect", "train-vae", "encode", "train-mdnrnn"):
        run.stage_dir(verb).mkdir(parents=True, exist_ok=True)
        run.mark_done(verb, {})
    dst = prepare_tau_run(run, 1.15)
    assert dst.path.name == "run-tau1.15" and dst.load_config().dream.temperature == 1.15
    assert dst.is_done("train-mdnrnn") and not dst.stage_dir("train-vae").is_symlink()
    # the τ run's folders are its own, their files the source's bytes (hard links): no link leads out of the run
    done = dst.stage_dir("train-vae") / "DONE"
    assert done.stat().st_ino == (run.stage_dir("train-vae") / "DONE").stat().st_ino
    assert not dst.is_done("train-controller")
    src = controller_sources(cfg, run, [0.5, 1.15], [str(dst.path)])
    assert src[0.5] is run and src[1.15].path == dst.path
    # `sweep run` resumes: the τ run made from this run at this τ is reused, anything else refused
    from wm.tools.sweep import reuse_or_prepare

    assert reuse_or_prepare(run, 1.15).path == dst.path
    # the source run's evaluate settings may change after the τ runs were made (`sweep run` sets its temperatures)
    run.bind_config(C.update(cfg, {"evaluate": {"temperatures": [1.15]}}, source="test"), "evaluate")
    assert reuse_or_prepare(run, 1.15).path == dst.path
    other = prepare_tau_run(run, 0.5)
    other.config_path.write_text(other.config_path.read_text().replace("temperature: 0.5", "temperature: 0.7"))
    with pytest.raises(WMError, match="is not .*'s config at τ 0.5"):
        reuse_or_prepare(run, 0.5)


def test_the_sweep_table_is_current_only_for_the_same_rows_played_after_their_controllers(tmp_path):
    """`sweep run` skips the table on a rerun only when it holds these τ, each played by its τ run's C over these
    episodes, and was written after every C's parameters (a C retrained since, another τ or count: played again)."""
    import os

    from wm.core.atomic import atomic_write_json
    from wm.tools.sweep import table_is_current

    src = RunDir(tmp_path / "run")
    made = [RunDir(tmp_path / f"run-tau{t}") for t in (0.5, 1.3)]
    for d in made:
        d.stage_dir("train-controller").mkdir(parents=True)
        np.savez(d.params("best"), params=np.zeros(3))
    rows = [
        {"temperature": t, "episodes": 2, "controller_run": str(d.path), "params_file": str(d.params("best"))}
        for t, d in zip((0.5, 1.3), made, strict=True)
    ]
    assert not table_is_current(src, [0.5, 1.3], made, 2)  # no table yet
    atomic_write_json(src.artifact("tau_sweep"), {"rows": rows})
    assert table_is_current(src, [0.5, 1.3], made, 2)
    assert not table_is_current(src, [0.5, 1.3], made, 3)  # other episodes
    assert not table_is_current(src, [0.5], made[:1], 2)  # other τ
    assert not table_is_current(src, [1.3, 0.5], made[::-1], 2)  # another order
    later = src.artifact("tau_sweep").stat().st_mtime + 5
    os.utime(made[1].params("best"), (later, later))  # C retrained after the table
    assert not table_is_current(src, [0.5, 1.3], made, 2)


@pytest.mark.env
def test_a_carracing_evaluation_records_how_each_episode_was_driven(tmp_path, capsys):
    """Each episode's tiles, lap, exits, speed, gas and brake go to episodes.jsonl, their summary to summary.json, and
    status, report and results show them beside the score."""
    from wm import cli

    run = tmp_path / "car"
    argv = ["evaluate", "--configs", "carracing", "tiny", "--run", str(run), "--random", "--episodes", "3"]
    assert cli.main([*argv, "--set", "env.max_steps=80", "evaluate.workers=1", "evaluate.gif_episodes=0"]) == 0
    rows = [json.loads(line) for line in (run / "eval" / "random" / "episodes.jsonl").read_text().splitlines()]
    assert [sorted(r) for r in rows] == [
        ["brake", "episode", "gas", "lap_steps", "length", "off_track", "return", "seed", "speed", "tiles"]
    ] * 3
    summary = json.loads((run / "eval" / "random" / "summary.json").read_text())
    want = {"tiles": round(float(np.mean([r["tiles"] for r in rows])), 4), "laps": 0, "lap_steps": 0.0}
    assert {k: summary["drive"][k] for k in want} == want
    assert 0.2 < summary["drive"]["gas"] < 0.8  # uniform random a₁: gas (a₁ + 1) / 2 averages 0.5
    capsys.readouterr()
    # the random evaluation as C's, for the readers that show the default evaluation
    import shutil

    shutil.copytree(run / "eval" / "random", run / "eval" / "real")
    shutil.copy(run / "eval" / "random" / "summary.json", run / "eval" / "summary.json")
    assert cli.main(["status", "--run", str(run)]) == 0
    assert "tiles 0." in capsys.readouterr().out
    assert cli.main(["results", "--runs", str(run), "--out", str(tmp_path / "res"), "--resamples", "200"]) == 0
    assert "| laps finished |" in (tmp_path / "res" / "results.md").read_text()


def test_the_input_digest_names_the_dream_settings_and_what_c_reads(tmp_path):
    """The digest of the dream's settings is the one stored checks were written with (sha256 of the `dream` section
    with M's dropout, sorted JSON); C's reading of μ (`controller.z_input: mean`) is part of what a real check played
    with, the paper's sampled z adds nothing (stored digests stay valid)."""
    import hashlib

    from wm.rollouts.evaluation import input_digest

    run = RunDir(tmp_path / "run")
    for path, data in ((run.vae_weights, b"V"), (run.mdnrnn_weights, b"M"), (run.params("best"), b"C")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    cfg = C.update(C.defaults(), {"dream": {"temperature": 0.9}, "mdnrnn": {"dropout": 0.1}})
    want = json.dumps(cfg.dream.to_dict() | {"dropout": 0.1}, sort_keys=True, default=str).encode()
    dreamed = input_digest(setup(cfg), run, run.params("best"), dream=True)
    assert dreamed["dream"] == hashlib.sha256(want).hexdigest()[:16]
    assert dreamed["vae"] == hashlib.sha256(b"V").hexdigest()[:16] and "z_input" not in dreamed
    mean = C.update(cfg, {"controller": {"z_input": "mean"}})
    assert input_digest(setup(mean), run, run.params("best"))["z_input"] == "mean"
    assert "z_input" not in input_digest(setup(mean), run, None)  # the random policy reads no z
