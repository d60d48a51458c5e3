"""The work clock (`iterate.clock: work`, wm.rounds.workclock): a pass's work read from its run directory, unit by unit,
against figures computed by hand from the files written here; the preset's prices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import tiny_cfg
from wm.core import config as C
from wm.core.atomic import atomic_write_json
from wm.core.rundir import RunDir
from wm.rounds.workclock import UNITS, WorkLedger, pass_units, seconds, stage_units


def _pass(path: Path, cfg: C.Config, frames: int, written: int, episodes: int, vae_linked: bool) -> RunDir:
    """A checked pass as the pipeline leaves it: its stages' DONE figures, C's metrics, round control's evaluations
    and those the work clock must not count (the final check, the --demo baselines)."""
    run = RunDir(path)
    run.bind_config(cfg, None)
    run.mark_done("collect", {"collect/frames": frames, "collect/episodes": episodes})
    run.mark_done("train-vae", {"steps": 10, "linked_from": "elsewhere"} if vae_linked else {"steps": 10})
    run.mark_done("encode", {"written": written, "episodes": episodes})
    run.mark_done("train-mdnrnn", {"mdnrnn/step": 7})
    recs = [
        {"step": 1, "es/len_mean": 999.0},  # generation 1 of a killed run: replaced by the resumed record below
        {"step": 1, "es/len_mean": 100.0},
        {"step": 2, "es/len_mean": 200.0, "es/eval_mean": 180.0},
        {"step": 2, "es/best": 5.0},  # not a generation record
    ]
    run.metrics_path("train-controller").parent.mkdir(parents=True, exist_ok=True)
    run.metrics_path("train-controller").write_text("".join(json.dumps(r) + "\n" for r in recs))
    run.mark_done("train-controller", {})
    for tag, mode, length, n in (
        ("check", "real", 50.0, 10),
        ("check-dream", "dream", 80.0, 10),
        ("final-check", "real", 60.0, 100),  # after the rounds: no decision follows it
        ("random", "real", 40.0, 100),  # --demo's baseline
    ):
        atomic_write_json(run.eval_summary(tag), {"mode": mode, "len_mean": length, "episodes": n})
    return run


def test_a_pass_s_work_is_read_from_its_files_unit_by_unit(tmp_path):
    cfg = tiny_cfg()
    es, m = cfg.es, cfg.mdnrnn
    first = _pass(tmp_path / "r", cfg, frames=1000, written=5, episodes=5, vae_linked=False)
    atomic_write_json(first.eval_summary("check-random"), {"mode": "real", "len_mean": 40.0, "episodes": 10})
    rcfg = C.update(cfg, {"collect.policy": "agent"})
    round1 = _pass(tmp_path / "r" / "round1", rcfg, frames=1600, written=2, episodes=7, vae_linked=True)
    c_dream = 100.0 * es.popsize * es.trials + 200.0 * (es.popsize * es.trials + es.eval_episodes)
    u = stage_units(first, None, cfg)
    assert u["collect"]["collect_frame"] == 1000 and u["collect"]["agent_frame"] == 0
    assert u["train-vae"]["vae_sample"] == 10 * cfg.vae.batch_size
    assert u["encode"]["encode_frame"] == 1000  # every episode written: all frames
    assert u["train-mdnrnn"]["mdnrnn_sample"] == 7 * m.batch_size * m.seq_len
    assert u["train-controller"]["dream_step"] == c_dream
    assert u["checks"]["real_step"] == 50 * 10 + 40 * 10 and u["checks"]["dream_step"] == 80 * 10
    assert u["checks"]["stage"] == 3 and all(u[s]["stage"] == 1 for s in u if s != "checks")
    r = stage_units(round1, first, rcfg)
    assert "train-vae" not in r  # linked from the previous pass: no work here
    assert r["collect"]["agent_frame"] == 600 and r["collect"]["collect_frame"] == 0  # 1600 - the 1000 it extended
    assert r["encode"]["encode_frame"] == 600  # 2 of 7 episodes written: the new frames only
    assert r["checks"]["real_step"] == 500 and r["checks"]["stage"] == 2
    total = pass_units(round1, first, rcfg)
    assert total["stage"] == 6 and total["dream_step"] == c_dream + 800
    # with real fitness C's episodes are real steps; with es.pick_real each check's tracks at env.max_steps
    real = C.update(rcfg, {"es.fitness": "real", "es.pick_real": 3})
    for g in (10, 20):
        real_dir = round1.check_params(g)
        real_dir.parent.mkdir(parents=True, exist_ok=True)
        real_dir.write_bytes(b"")
    cu = stage_units(round1, first, real)["train-controller"]
    assert cu["dream_step"] == 0 and cu["real_step"] == c_dream + 2 * 3 * real.env.max_steps
    # the ledger prices the units, pass after pass
    prices = {**dict.fromkeys(UNITS, 0.0), "stage": 6.0, "agent_frame": 0.3}
    ledger = WorkLedger(C.update(rcfg, {f"iterate.work.{k}": v for k, v in prices.items()}))
    ledger.add("first pass", first, None, cfg)
    ledger.add("round1", round1, first, rcfg)
    # the first pass: 5 stages and 3 checks; round 1: 4 stages (V linked), 2 checks and 600 frames by C
    assert ledger.marks == pytest.approx({"first pass": 8 * 6 / 60, "round1": 8 * 6 / 60 + (6 * 6 + 600 * 0.3) / 60})
    assert seconds(total, prices) == 6 * 6 + 600 * 0.3


def test_the_doom_small_preset_counts_work_minutes_at_the_reference_machine_s_prices():
    it = C.load(["doom_takecover", "small"], []).iterate
    assert it.clock == "work" and it.max_minutes == 85
    assert dict(it.work) == {
        "stage": 11.4,
        "collect_frame": 0.000553,
        "agent_frame": 0.00172,
        "vae_sample": 0.00304,
        "encode_frame": 0.000226,
        "mdnrnn_sample": 7.78e-05,
        "dream_step": 1.34e-05,
        "real_step": 0.00106,
    }
    assert tiny_cfg().iterate.clock == "wall"
