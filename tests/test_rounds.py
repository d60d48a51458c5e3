"""Round control: each pass's C is checked in the real game; rounds go on while that improves, the best
pass's C is the run's result, an exploiting C raises the next round's exploration. Driven with stub check scores
through the pipeline's own round loop (no training)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.helpers import tiny_cfg
from wm.core import config as C
from wm.core.errors import WMError
from wm.core.rundir import RunDir
from wm.envs.setup import setup
from wm.rounds import control, runner
from wm.rounds.iterate import (
    PassCheck,
    best_pass,
    check_seeds,
    final_candidates,
    gate_verdict,
    next_explore,
    result_index,
    stop_reason,
)
from wm.rounds.runner import PassOptions
from wm.tools import pipeline


def _cfg(*sets: str) -> C.Config:
    return tiny_cfg(
        "iterate.rounds=5",
        "iterate.check_episodes=10",
        "iterate.patience=1",
        "iterate.explore=0.3",
        "iterate.explore_exploit=0.6",
        *sets,
    )


def _drive(
    tmp_path,
    monkeypatch,
    scores: list[tuple[float, float]],
    *sets: str,
    random: float = 50.0,
    round_minutes: float = 0,
    recorded: dict[str, float] | None = None,
    saved: dict | None = None,
    total: float | None = None,
    learned: list[bool] | None = None,
    finals: dict[str, float] | None = None,
    mores: dict[str, float] | None = None,
    asked: list | None = None,
    stages: list | None = None,
):
    """Run the pipeline's round loop with check scores (real, dream) per pass and the random policy's check score;
    with `round_minutes`, on a fake clock where each round takes that long; with `recorded` ({pass: minutes}), as the
    rerun of a run whose rounds.json recorded those passes (and `total`, its minutes in all), and with `saved` as its
    clock.json. Returns (rounds run,
    explores, rounds.json); each round's `learned` flag (iterate.learned_set applies) is appended to `learned` when
    given; the final check's scores come from `finals` ({pass name: mean}) and `mores` (`iterate.final_more`'s), each
    request (pass, tag, episodes) appended to `asked` (final_more's with the seeds it skips); each pass whose stages
    run is appended to `stages` as (its folder's name, the `last` stage it runs to, its --force)."""
    cfg = _cfg(*sets)
    run = RunDir(tmp_path / "r")
    run.bind_config(cfg, None)
    if recorded:
        passes = [{"name": k, "minutes": v} for k, v in recorded.items()]
        doc = {"passes": passes, "result": passes[0], **({} if total is None else {"minutes": total})}
        run.rounds_path.write_text(json.dumps(doc))  # as write_rounds writes it
    if saved:
        run.clock_path.write_text(json.dumps(saved))
    explores: list[float] = []
    flags = [] if learned is None else learned
    calls = iter(scores)

    def fake_prepare(base, cfg_, k, explore=None, learned=False):
        explores.append(explore)
        flags.append(learned)
        child = RunDir(base.path / f"round{k}")
        child.path.mkdir(parents=True, exist_ok=True)
        return child

    def fake_check(where, cfg_, name):
        real, dream = next(calls)
        return PassCheck(name, str(where.path), real, dream)

    monkeypatch.setattr(control, "prepare_round", fake_prepare)
    monkeypatch.setattr(control, "check_pass", fake_check)
    monkeypatch.setattr(control, "random_check", lambda run_, cfg_: random)
    seen = stages if stages is not None else []

    def record_stages(*a, **k):
        seen.append((a[0].path.name, k.get("last"), a[2].force))

    monkeypatch.setattr(control, "run_stages", record_stages)  # a round's stages
    monkeypatch.setattr(runner, "run_stages", record_stages)  # the result's evaluate (evaluate_result)

    def fake_mean(where, cfg_, tag, what, n=None, skip=0, **kw):
        name = "first pass" if where.path == run.path else where.path.name
        (asked if asked is not None else []).append((name, tag, n) + ((skip,) if tag == "final-more" else ()))
        return (mores if tag == "final-more" else finals or {})[name]

    monkeypatch.setattr(control, "_check_mean", fake_mean)
    t0 = __import__("time").time()
    if round_minutes:

        class Clock:
            now = t0

            def time(self):
                return self.now

        clock = Clock()
        monkeypatch.setattr(control, "time", clock)

        def fake_stages(*a, tick=None, **k):
            clock.now += round_minutes * 60
            if tick:
                tick()

        monkeypatch.setattr(control, "run_stages", fake_stages)
        monkeypatch.setattr(runner, "run_stages", fake_stages)
    monkeypatch.setattr(RunDir, "load_config", lambda self: cfg)
    rounds = control.run_rounds(run, cfg, PassOptions(force=False), {}, t0=t0)
    return [r.path.name for r in rounds], explores, json.loads(run.rounds_path.read_text())


def test_rounds_continue_while_the_real_score_improves_and_keep_the_best_c(tmp_path, monkeypatch):
    # first pass exploits (dream 1500 vs real 165), round 1 too and is no better (an exploit earns another round
    # anyway), round 2 learns, round 3 is worse and honest: stop (patience 1)
    rounds, explores, doc = _drive(tmp_path, monkeypatch, [(165, 1500), (160, 800), (740, 890), (600, 650)])
    assert rounds == ["round1", "round2", "round3"]
    assert doc["result"]["name"] == "round2" and doc["result"]["params"].endswith("round2/controller/best.npz")
    assert "no better real check score in the last 1 round(s)" in doc["stopped"]
    assert explores == [0.6, 0.6, 0.3]  # raised after each exploiting C, back to `explore` after round 2
    assert [p["exploits"] for p in doc["passes"]] == [True, True, False, False]


def test_rounds_stop_at_the_round_budget_and_the_first_pass_can_be_the_result(tmp_path, monkeypatch):
    rounds, _, doc = _drive(
        tmp_path, monkeypatch, [(500, 600), (400, 450), (300, 310)], "iterate.rounds=2", "iterate.patience=5"
    )
    assert rounds == ["round1", "round2"] and doc["stopped"] == "iterate.rounds = 2 reached"
    assert doc["result"]["name"] == "first pass"


def test_a_passs_stages_read_the_pipelines_options_and_the_results_evaluation_never_forces(tmp_path, monkeypatch, capsys):
    """`PassOptions` is what a pass's stages read of the pipeline's command line: `force` clears each DONE and runs
    the stage again, `mpi` and `launcher` start the ranked ones (collect, train-controller, evaluate), `progress_every`
    reaches the loop that prints the progress lines, `until` ends the pass. The result pass's evaluation
    (`evaluate_result`) keeps the ranks and the launcher but not `force`: the result's trained stages are not redone."""
    import sys

    from wm.core.launcher import Launcher
    from wm.core.registry import STAGES

    started: list[tuple[str, str, float]] = []

    def fake_stage(cmd, run_, cfg_, verb, tag, every, tick=None):
        started.append((verb, cmd[0], every))
        run_.mark_done(verb)
        return 0

    monkeypatch.setattr(runner, "run_stage", fake_stage)
    run = RunDir(tmp_path / "r")
    cfg = run.bind_config(_cfg(), None)
    for s in STAGES:
        run.mark_done(s.verb)
    srun = Launcher.parse("srun", "--mpi=pmi2")
    opts = PassOptions(force=True, mpi=3, launcher=srun, progress_every=7.0)
    runner.run_stages(run, cfg, replace(opts, until="encode"), {})
    exe = sys.executable
    assert started == [("collect", "srun", 7.0), ("train-vae", exe, 7.0), ("encode", exe, 7.0)]
    assert "[1/6] collect: running: srun --mpi=pmi2 -n 3 " in capsys.readouterr().out
    started.clear()
    runner.evaluate_result(run, opts, {})  # no rounds: the run itself is the result, every stage DONE
    assert started == []
    run.clear_done("evaluate")
    runner.evaluate_result(run, opts, {})
    assert started == [("evaluate", "srun", 7.0)]
    out = capsys.readouterr().out
    assert "[5/6] train-controller: done, skipped" in out and "[6/6] evaluate: running: srun --mpi=pmi2 -n 3 " in out


def test_with_evaluate_passes_result_only_the_result_plays_the_evaluation_episodes(tmp_path, monkeypatch):
    """`iterate.evaluate_passes: result`: the rounds' stages stop after C's training (the checks score them), and once
    the rounds stop the pass round control chose, and no other, runs its evaluate stage; `all` evaluates each pass as
    it goes and nothing after."""
    scores = [(165, 1500), (160, 800), (740, 890), (600, 650)]  # round 2 is the result
    seen: list = []
    rounds, _, doc = _drive(tmp_path / "a", monkeypatch, scores, "iterate.evaluate_passes=result", stages=seen)
    assert doc["result"]["name"] == "round2"
    last = "train-controller"
    assert seen == [("round1", last, False), ("round2", last, False), ("round3", last, False), ("round2", None, False)]
    seen.clear()
    _drive(tmp_path / "b", monkeypatch, scores, "iterate.evaluate_passes=all", stages=seen)
    assert seen == [("round1", None, False), ("round2", None, False), ("round3", None, False)]
    # a --force run's final evaluation does not redo the result pass's finished stages
    seen.clear()
    cfg = _cfg("iterate.evaluate_passes=result")
    run = RunDir(tmp_path / "b" / "r")
    runner.evaluate_result(run, PassOptions(force=True, until=None), {})
    assert seen == [("round2", None, False)]
    assert runner.pass_last(cfg, PassOptions(until="collect")) is None  # --until: the first pass, as asked
    with pytest.raises(WMError, match=r"'iterate.evaluate_passes' must be all \| result, got 'best'"):
        pipeline.main(_main_args(tmp_path / "c", "iterate.evaluate_passes=best"))
    with pytest.raises(WMError, match="evaluate_passes=result evaluates only the pass round control picks"):
        pipeline.main(
            _main_args(tmp_path / "d", "iterate.evaluate_passes=result", "iterate.rounds=2", "iterate.check_episodes=0")
        )


def _main_args(path: Path, *sets: str, demo: bool = False) -> argparse.Namespace:
    return argparse.Namespace(
        run=str(path),
        configs=["doom_takecover", "tiny"],
        set=list(sets),
        until=None,
        force=False,
        demo=demo,
        mpi=0,
        progress_every=30.0,
    )


def test_patience_two_survives_one_bad_round(tmp_path, monkeypatch):
    rounds, _, doc = _drive(
        tmp_path, monkeypatch, [(200, 300), (180, 200), (650, 700), (640, 600), (630, 700)], "iterate.patience=2"
    )
    assert rounds == ["round1", "round2", "round3", "round4"] and doc["result"]["name"] == "round2"


def test_a_c_below_twice_random_earns_another_round(tmp_path, monkeypatch):
    # seed 2 of the small preset: the first pass exploits, round 1 is honest but no better and below random (210);
    # patience alone stopped here and kept a C worse than random. Now rounds go on until a C reaches 2 × random.
    scores = [(177.3, 566.2), (168.3, 326.0), (300.0, 330.0), (520.0, 600.0), (500.0, 520.0)]
    rounds, explores, doc = _drive(tmp_path, monkeypatch, scores, random=210.0)
    assert rounds == ["round1", "round2", "round3", "round4"] and doc["result"]["name"] == "round3"
    assert explores == [0.6, 0.6, 0.6, 0.3] and doc["random_check"] == 210.0
    assert "no better real check score" in doc["stopped"]
    # with the target off, patience stops after round 1 as before
    rounds, _, doc = _drive(tmp_path / "off", monkeypatch, scores, "iterate.target_ratio=0", random=210.0)
    assert rounds == ["round1"] and doc["result"]["name"] == "first pass"


def test_learned_set_reaches_only_the_rounds_after_a_c_that_plays(tmp_path, monkeypatch):
    # random 200 on the check seeds, target 2 × random = 400: the first pass and round 1 walk to a wall, round 2
    # learns (450), so rounds 3 and 4 are built with iterate.learned_set; round 3 below 400 does not undo it
    scores = [(170, 1500), (180, 900), (450, 500), (390, 420), (520, 560), (500, 510)]
    sets = ('iterate.learned_set=["mdnrnn.done_horizon=16"]', "iterate.patience=2")
    flags: list[bool] = []
    rounds, _, doc = _drive(tmp_path, monkeypatch, scores, *sets, random=200.0, learned=flags)
    assert rounds == ["round1", "round2", "round3", "round4", "round5"] and doc["result"]["name"] == "round4"
    assert flags == [False, False, True, True, True]
    # without learned_set nothing is flagged, whatever the scores
    flags2: list[bool] = []
    _drive(tmp_path / "off", monkeypatch, scores, "iterate.patience=2", random=200.0, learned=flags2)
    assert flags2 == [False] * 5


def test_no_round_starts_that_would_end_past_the_time_budget(tmp_path, monkeypatch):
    # each round takes 12 min on a fake clock; budget 35 min: rounds 1 and 2 end at 12 and 24, round 3 would end at
    # 36 > 35 and does not start (a round that merely starts before the budget ran to 36 before)
    scores = [(100, 110), (200, 210), (300, 310), (400, 410), (500, 510)]
    rounds, _, doc = _drive(tmp_path, monkeypatch, scores, "iterate.max_minutes=35", round_minutes=12)
    assert rounds == ["round1", "round2"]
    assert doc["stopped"].endswith("another round, as long as the last (12 min), would end at 36 min")
    assert doc["result"]["name"] == "round2"


def test_max_minutes_stops_a_run_whose_c_does_not_play_yet(tmp_path, monkeypatch, capsys):
    # 12-min rounds, max_minutes 35, random 50 (the target: 100). Three passes below the target earn more rounds, but
    # round 3 would end at 36 > 35: the budget stops the run, and its result is a C that does not play (80)
    scores = [(60, 70), (70, 80), (80, 90), (300, 310)]
    rounds, _, doc = _drive(tmp_path, monkeypatch, scores, "iterate.max_minutes=35", round_minutes=12)
    assert rounds == ["round1", "round2"] and doc["result"]["name"] == "round2"
    assert (
        doc["stopped"]
        == "time budget iterate.max_minutes = 35: another round, as long as the last (12 min), would end at 36 min"
    )
    out = capsys.readouterr().out.splitlines()  # each round's line says where the budget stands
    assert "minute 12 of iterate.max_minutes = 35;" in next(x for x in out if x.startswith("[round 2/≤5]"))


def test_the_work_clock_stops_the_rounds_by_the_passes_work_whatever_the_wall_clock_reads(tmp_path, monkeypatch, capsys):
    # iterate.clock: work. The passes' work (wm.rounds.workclock, stubbed here: 10 work minutes for the first pass, 12 for each
    # round) decides, not the machine's minutes: on a fake wall clock where each round takes 1 min the wall budget of
    # 35 would let all 5 rounds run (every C exploits its dream, so nothing else stops them); by work, rounds 1 and 2
    # end at 22 and 34, and round 3 would end at 46 > 35. On a machine 10x slower (10 wall min a round) the same.
    from wm.rounds import workclock

    work = {"r": 10.0}  # the first pass's folder is "r"

    def units(where, prev, cfg):
        return {**dict.fromkeys(workclock.UNITS, 0.0), "stage": work.get(where.path.name, 12.0)}

    monkeypatch.setattr(workclock, "pass_units", units)
    scores = [(100, 1000), (110, 1000), (120, 1000), (130, 1000), (140, 1000), (150, 1000)]
    sets = ("iterate.max_minutes=35", "iterate.clock=work", "iterate.work.stage=60")  # a "stage" unit: one minute
    for wall in (1, 10):
        rounds, _, doc = _drive(tmp_path / f"w{wall}", monkeypatch, scores, *sets, round_minutes=wall)
        assert rounds == ["round1", "round2"]
        assert doc["stopped"] == (
            "time budget iterate.max_minutes = 35: another round, as long as the last (12 work min), would end at 46 work min"
        )
        assert [p["work_minutes"] for p in doc["passes"]] == [10.0, 22.0, 34.0]
        assert [p["minutes"] for p in doc["passes"]] == pytest.approx([0.0, wall, 2 * wall], abs=1e-6)
        assert doc["clock"] == "work" and doc["work_minutes"] == 34.0
        assert doc["passes"][1]["work_units"]["stage"] == 12.0
        line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("[round 2/≤5]"))
        assert "; work minute 22 of iterate.max_minutes = 35; collect" in line
    # the wall clock, on the same fake clock, runs every round
    rounds, _, doc = _drive(tmp_path / "wall", monkeypatch, scores, "iterate.max_minutes=35", round_minutes=1)
    assert rounds == ["round1", "round2", "round3", "round4", "round5"] and doc["clock"] == "wall"
    assert "work_minutes" not in doc and "work_minutes" not in doc["passes"][0]
    # a work clock that prices nothing, or a clock that is neither, is refused in one line before anything is written
    ok = ("iterate.rounds=2", "iterate.check_episodes=10", "iterate.max_minutes=35")
    for bad, msg in (
        (("iterate.clock=work",), r"^iterate.clock: work needs iterate.work's seconds per unit"),
        (("iterate.clock=work", "iterate.work.stage=-1", "iterate.work.dream_step=1"), r"^iterate.clock: work needs"),
        (("iterate.clock=cpu",), r"^config key 'iterate.clock' must be wall \| work, got 'cpu'$"),
    ):
        with pytest.raises(WMError, match=msg):
            pipeline.main(_main_args(tmp_path / "bad", *ok, *bad))
        assert not (tmp_path / "bad").exists()
    from wm.tools import status

    capsys.readouterr()
    status.main(argparse.Namespace(run=str(tmp_path / "w10" / "r")))
    out = capsys.readouterr().out
    assert "    budget clock: work, 34.0 work min at the last check (wall clock: 20.0 min)\n" in out


def test_a_rerun_resumes_the_time_budget(tmp_path, monkeypatch, capsys):
    # budget 30 min; the first invocation's first pass ended at 8 min, round 1 at 20, then a kill in round 2. The
    # rerun passes over round 1 again (the clock set back to its recorded 20 min, round length 12) and does not start
    # round 2 (20 + 12 > 30); a fresh budget on every rerun ran rounds 1 and 2 as if no time had passed.
    scores = [(100, 110), (200, 210), (300, 310), (400, 410)]
    rec = {"first pass": 8.0, "round1": 20.0}
    rounds, _, doc = _drive(tmp_path, monkeypatch, scores, "iterate.max_minutes=30", round_minutes=12, recorded=rec)
    assert rounds == ["round1"] and doc["stopped"].endswith("would end at 32 min")
    assert [p["minutes"] for p in doc["passes"]] == [8.0, 20.0] and doc["minutes"] == 20.0
    assert "[rounds] resuming the time budget" in capsys.readouterr().out
    # without the record: a fresh budget, rounds 1 and 2 (0 → 12 → 24), the minutes of each pass recorded
    rounds, _, doc = _drive(tmp_path / "fresh", monkeypatch, scores, "iterate.max_minutes=30", round_minutes=12)
    assert rounds == ["round1", "round2"] and [p["minutes"] for p in doc["passes"]] == [0.0, 12.0, 24.0]


def test_a_round_a_kill_interrupted_keeps_the_time_its_finished_stages_took(tmp_path, monkeypatch, capsys):
    # budget 45 min, each invocation's stages take 12 min (fake clock); the first invocation checked the first pass at
    # 8 and round 1 at 20, and its clock.json says round 2 had reached minute 29 when it was killed. The rerun counts
    # those 9 min: round 2 ends at 41 (length 21), and a round 3 as long would end at 62: stop. Restarting round 2's
    # clock at 20 (the old rerun) ended it at 32 and ran round 3 to 44, a round an uninterrupted run would not run.
    scores = [(100, 110), (200, 210), (300, 310), (400, 410)]
    rec = {"first pass": 8.0, "round1": 20.0}
    saved = {"pass": "round2", "minutes": 29.0}
    sets = ("iterate.max_minutes=45",)
    rounds, _, doc = _drive(tmp_path, monkeypatch, scores, *sets, round_minutes=12, recorded=rec, saved=saved)
    assert rounds == ["round1", "round2"] and [p["minutes"] for p in doc["passes"]] == [8.0, 20.0, 41.0]
    assert doc["stopped"].endswith("another round, as long as the last (21 min), would end at 62 min")
    assert "round2 had taken 9.0 min before this rerun: counted" in capsys.readouterr().out
    assert json.loads(RunDir(tmp_path / "r").clock_path.read_text()) == {"pass": "round2", "minutes": 41.0}
    # a clock.json naming a pass already recorded (the kill came after round 1's check) credits nothing
    saved = {"pass": "round1", "minutes": 20.5}
    (tmp_path / "b" / "r").mkdir(parents=True)
    rounds, _, doc = _drive(tmp_path / "b", monkeypatch, scores, *sets, round_minutes=12, recorded=rec, saved=saved)
    assert rounds == ["round1", "round2", "round3"] and doc["passes"][2]["minutes"] == 32.0


def test_a_first_pass_a_kill_interrupted_keeps_its_time_and_a_tick_records_it(tmp_path):
    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    run.clock_path.write_text(json.dumps({"pass": "first pass", "minutes": 14.0}))
    clock = control.RunClock(run, t0=__import__("time").time())
    clock.enter("first pass")
    assert 14.0 <= clock.minutes() < 14.1
    clock.tick()
    assert json.loads(run.clock_path.read_text())["pass"] == "first pass"
    assert control.RunClock(run, t0=0.0, fresh=True).saved == {}  # --force: a fresh clock


def test_rerunning_a_finished_run_keeps_every_round(tmp_path, monkeypatch):
    # a run that stopped on its budget at 44 of its 45 minutes, rerun as is (its stages skipped; here the fake clock
    # still charges 12 min per pass): each pass's recorded minutes set the clock, so every round is passed over again
    # and the result stays round 2; carrying the final 44 minutes from the start stopped the rerun after round 1.
    scores = [(100, 110), (200, 210), (500, 510), (400, 410)]
    rec = {"first pass": 8.0, "round1": 20.0, "round2": 32.0, "round3": 44.0}
    rounds, _, doc = _drive(tmp_path, monkeypatch, scores, "iterate.max_minutes=45", round_minutes=12, recorded=rec)
    assert rounds == ["round1", "round2", "round3"] and doc["result"]["name"] == "round2"
    assert doc["stopped"].endswith("would end at 56 min") and doc["minutes"] == 44.0
    # its final check had taken 11.2 min after round 3's check (seed 0's run: 84.8 → 95.9): the rerun, which reuses
    # it, keeps them; recorded as 44.0 before, a replay made the run 11 min shorter than it was
    for d in ("t", "u"):
        (tmp_path / d / "r").mkdir(parents=True)
    _, _, doc = _drive(tmp_path / "t", monkeypatch, scores, "iterate.max_minutes=45", round_minutes=12, recorded=rec,
                       total=55.2)  # fmt: skip
    assert doc["minutes"] == 55.2
    # a rerun that runs a pass the earlier invocation had not checked measures its own time after it
    rec2 = {"first pass": 8.0, "round1": 20.0, "round2": 32.0}
    _, _, doc = _drive(tmp_path / "u", monkeypatch, scores, "iterate.max_minutes=45", round_minutes=12, recorded=rec2,
                       total=40.0)  # fmt: skip
    assert [p["minutes"] for p in doc["passes"]] == [8.0, 20.0, 32.0, 44.0] and doc["minutes"] == 44.0


# seed 14 of the small preset (README): random 206.4 on the check seeds, so 2 × random = 412.7; rounds 5-8 play
SEED14 = [(180.5, 1500), (166.0, 900), (325.0, 400), (177.3, 300), (399.4, 450), (589.3, 700), (813.1, 830)]
SEED14 += [(820.7, 840), (735.3, 760)]


def test_the_final_check_replays_the_best_learned_passes_and_keeps_the_best(tmp_path, monkeypatch, capsys):
    # the short check kept round 7 (820.7), which played 640.6 on the evaluation seeds; 100 check episodes each for
    # the three best learned passes (rounds 7, 6, 8; round 5 at 589.3 is fourth) give round 8, which played 775.4
    finals = {"round5": 451.0, "round6": 742.7, "round7": 737.6, "round8": 776.8}
    sets = ("iterate.rounds=9", "iterate.final_check=100")
    asked: list = []
    rounds, _, doc = _drive(tmp_path, monkeypatch, SEED14, *sets, random=206.4, finals=finals, asked=asked)
    assert rounds == [f"round{k}" for k in range(1, 9)] and doc["result"]["name"] == "round8"
    assert asked == [("round6", "final-check", 100), ("round7", "final-check", 100), ("round8", "final-check", 100)]
    assert [p["final"] for p in doc["passes"]] == [None] * 6 + [742.7, 737.6, 776.8] and doc["final_check"] == 100
    assert "the run's result is round8's C (real check 735.3, final check 776.8)" in capsys.readouterr().out
    # off (the default), the short check picks and nothing more is played
    asked.clear()
    _, _, doc = _drive(tmp_path / "off", monkeypatch, SEED14, "iterate.rounds=9", random=206.4, asked=asked)
    assert doc["result"]["name"] == "round7" and asked == [] and doc["passes"][-1]["final"] is None


# seed 1's two-draw run (runs/s1pk, README): random 206.4 on the check seeds; rounds 5 and 6 learned
SEED1 = [(176.2, 862.5), (178.2, 1769.6), (168.2, 377.9), (177.4, 1446.3), (178.0, 486.6), (768.2, 546.4), (660.6, 908.2)]


def test_final_more_plays_the_final_checks_best_two_again_and_keeps_the_better_over_all(tmp_path, monkeypatch, capsys):
    # seed 1: 100 final episodes kept round 5 (736.0 vs 695.1), which played 725.5 on the evaluation seeds; 200 more
    # each (724.1, 779.3) make it 728.1 vs 751.2 over 300: round 6, which played 861.8 (+136.3 ± 53.8 paired)
    finals, mores = {"round5": 736.0, "round6": 695.1}, {"round5": 724.1, "round6": 779.3}
    sets = ("iterate.rounds=6", "iterate.final_check=100")
    _, _, doc = _drive(tmp_path / "off", monkeypatch, SEED1, *sets, random=206.4, finals=finals, mores=mores)
    assert doc["result"]["name"] == "round5" and [p["final_episodes"] for p in doc["passes"]][-2:] == [100, 100]
    asked: list = []
    _, _, doc = _drive(tmp_path, monkeypatch, SEED1, *sets, "iterate.final_more=200", random=206.4, finals=finals,
                       mores=mores, asked=asked)  # fmt: skip
    assert asked[2:] == [("round5", "final-more", 200, 100), ("round6", "final-more", 200, 100)]
    assert doc["result"]["name"] == "round6" and doc["final_more"] == 200
    assert [round(p["final"], 2) for p in doc["passes"][-2:]] == [728.07, 751.23]
    assert [p["final_episodes"] for p in doc["passes"][-2:]] == [300, 300]
    assert "round6: real 779.3 on 200 more episodes: 751.2 on all 300 (the first 100: 695.1)" in capsys.readouterr().out
    # seed 14's three candidates: only the final check's best two (rounds 8 and 6) play more, and round 7, third on
    # its 100 episodes, is not the result though its 737.6 is above round 8's 725.6 over 300
    asked.clear()
    finals = {"round6": 742.7, "round7": 737.6, "round8": 776.8}
    _, _, doc = _drive(tmp_path / "s14", monkeypatch, SEED14, "iterate.rounds=9", "iterate.final_check=100",
                       "iterate.final_more=200", random=206.4, finals=finals, mores={"round6": 800.0, "round8": 700.0},
                       asked=asked)  # fmt: skip
    assert [a for a in asked if a[1] == "final-more"] == [
        ("round6", "final-more", 200, 100),
        ("round8", "final-more", 200, 100),
    ]
    assert doc["result"]["name"] == "round6" and doc["passes"][7]["final_episodes"] == 100


def test_final_more_seeds_follow_the_final_checks_and_stay_off_the_evaluation_seeds():
    cfg = _cfg("iterate.final_check=100", "iterate.final_more=200", "iterate.check_seed=5000000")
    assert check_seeds(cfg, 200, 100) == list(range(5000100, 5000300))
    with pytest.raises(WMError, match="overlaps the evaluation seeds"):
        check_seeds(_cfg("iterate.check_seed=800", "evaluate.seed=1000"), 200, 100)


# seed 16 of the small preset (README): random 206.4 on the check seeds; round 5 learns (the paper's dream), round 6,
# the first horizon round, is worse, round 7 walks to the wall (an exploit), rounds 8 and 9 play best
SEED16 = [(184.0, 222.3), (177.4, 709.5), (177.6, 1317.1), (176.0, 2019.9), (165.3, 997.9), (713.2, 333.8)]
SEED16 += [(447.1, 626.3), (165.2, 1516.9), (969.6, 735.3), (907.2, 730.9)]


def test_patience_two_carries_seed_16_past_its_worse_first_horizon_round(tmp_path, monkeypatch):
    finals = {"round5": 717.0, "round6": 472.3, "round8": 881.9, "round9": 886.5}
    sets = ("iterate.rounds=9", "iterate.final_check=100")
    # patience 1 (the preset before): stop after round 6 and keep round 5, which played 852.1
    rounds, _, doc = _drive(tmp_path, monkeypatch, SEED16, *sets, random=206.4, finals=finals)
    assert rounds == [f"round{k}" for k in range(1, 7)] and doc["result"]["name"] == "round5"
    # patience 2 (the preset now): round 7 runs, its exploit earns round 8, which checks best; round 9 is kept by the
    # final check among rounds 5, 8 and 9 (it played 974.6)
    asked: list = []
    rounds, _, doc = _drive(
        tmp_path / "p2", monkeypatch, SEED16, *sets, "iterate.patience=2", random=206.4, finals=finals, asked=asked
    )
    assert rounds == [f"round{k}" for k in range(1, 10)] and doc["stopped"] == "iterate.rounds = 9 reached"
    assert [a[0] for a in asked] == ["round5", "round8", "round9"] and doc["result"]["name"] == "round9"


def test_the_final_check_needs_two_learned_passes():
    cfg = _cfg("iterate.final_check=100", "iterate.final_passes=3")
    h = [PassCheck("first pass", "x", 170, 1500), PassCheck("round1", "y", 500, 520), PassCheck("round2", "z", 380, 400)]
    assert final_candidates(h, cfg, 200.0) == []  # only round 1 reached 400: its short check stands
    assert final_candidates(h, cfg, 150.0) == [1, 2]  # 2 × 150 = 300
    assert final_candidates(h, _cfg("iterate.final_check=100", "iterate.target_ratio=0"), 200.0) == [0, 1, 2]
    assert final_candidates(h, _cfg("iterate.final_check=100", "iterate.final_passes=1"), 150.0) == []
    assert final_candidates(h, _cfg(), 150.0) == []  # final_check 0
    assert result_index(h) == 1
    h[2] = replace(h[2], final=600.0)
    h[1] = replace(h[1], final=600.0)
    assert result_index(h) == 1  # the earliest of equal final checks


def test_control_helpers():
    h = [PassCheck("a", "x", 100, 500), PassCheck("b", "y", 300, 310), PassCheck("c", "z", 300, 900)]
    assert best_pass(h) == 1  # the earliest of equal real scores
    cfg = _cfg()
    assert next_explore(h, cfg) == 0.6 and next_explore(h[:2], cfg) == 0.3
    assert stop_reason(h[:1], cfg, 0.0) is None
    assert stop_reason([PassCheck("a", "x", 300, 310), PassCheck("b", "y", 100, 110)], cfg, 0.0).startswith("no better")
    assert stop_reason([PassCheck("a", "x", 300, 310), PassCheck("b", "y", 100, 900)], cfg, 0.0) is None  # exploit
    assert "time budget" in stop_reason(h[:1], _cfg("iterate.max_minutes=10"), 11.0)
    assert stop_reason(h[:2], _cfg("iterate.max_minutes=10", "iterate.patience=3"), 6.0, 0.0, 4.0) is None
    assert "would end at 11 min" in stop_reason(h[:2], _cfg("iterate.max_minutes=10", "iterate.patience=3"), 6.0, 0.0, 5.0)
    assert check_seeds(cfg)[:2] == [5000000, 5000001] and len(check_seeds(cfg)) == 10
    with pytest.raises(WMError, match="overlaps the evaluation seeds"):
        check_seeds(_cfg("iterate.check_seed=995", "evaluate.episodes=100"))


def test_gate_verdict_reads_the_dream_gap_against_the_real_one():
    # the CarRacing dream: C 669.2 vs random −27.3 in the game, −56.5 vs −78.0 in M's dream → stop
    why = gate_verdict(669.2, -27.3, -56.5, -78.0, 0.25)
    assert why is not None and "by 696.5 in the real game" in why and "by 21.5 in the dream" in why
    assert gate_verdict(800.0, 210.0, 600.0, 350.0, 0.25) is None  # Doom's dream shows 250 of 590: it transfers
    assert gate_verdict(165.0, 210.0, 1600.0, 350.0, 0.25) is None  # a C below random in the game tells nothing
    assert gate_verdict(669.2, -27.3, 160.0, -24.0, 0.25) is None  # 184 ≥ 0.25 × 696.5


def _gate_run(tmp_path, monkeypatch, means: dict[str, float], *sets: str):
    """A fixed one-round run training C in the dream, with the gate's evaluations stubbed by tag; returns the stages
    the round ran (train-controller only if the gate let it) and the evaluations asked for (where, tag, options)."""
    cfg = tiny_cfg("iterate.rounds=1", "iterate.check_episodes=0", "iterate.set=[es.fitness=dream]", *sets, env="carracing")
    run = RunDir(tmp_path / "r")
    run.bind_config(cfg, None)
    ran: list[str] = []
    asked: list[tuple[str, str, dict]] = []

    def fake_prepare(base, cfg_, k, explore=None, learned=False):
        child = RunDir(base.path / f"round{k}")
        child.path.mkdir(parents=True, exist_ok=True)
        return child

    def fake_stages(where, cfg_, args, timings, label="", before=None, tick=None, last=None):
        for verb in ("train-mdnrnn", "train-controller", "evaluate"):
            if before and verb in before:
                before[verb]()
            ran.append(verb)

    def fake_mean(where, cfg_, tag, what, n=None, **kw):
        asked.append((where.path.name, tag, kw))
        assert n == int(cfg_.iterate.dream_gate)
        return means[tag]

    monkeypatch.setattr(control, "prepare_round", fake_prepare)
    monkeypatch.setattr(control, "run_stages", fake_stages)
    monkeypatch.setattr(runner, "run_stages", fake_stages)
    monkeypatch.setattr(control, "_check_mean", fake_mean)
    monkeypatch.setattr(
        RunDir, "load_config", lambda self: pipeline.round_config(cfg, 1) if "round" in self.path.name else cfg
    )
    try:
        control.run_rounds(run, cfg, PassOptions(), {}, t0=0.0)
    except WMError as e:
        return ran, asked, str(e)
    return ran, asked, None


def test_the_dream_gate_stops_a_round_whose_dream_does_not_rank_the_real_c(tmp_path, monkeypatch):
    """The car's dream (C 669.2 vs random −27.3 real; −56.5 vs −78.0 dreamed): the round stops before C's
    training with one line; a dream that shows the gap lets it train; gate 0 never evaluates."""
    bad = {"gate-real": 669.2, "gate-random": -27.3, "gate-dream-c": -56.5, "gate-dream-random": -78.0}
    ran, asked, err = _gate_run(tmp_path / "a", monkeypatch, bad, "iterate.dream_gate=4")
    assert ran == ["train-mdnrnn"] and err is not None
    assert (
        err.startswith("dream gate (round1): the round's dream does not tell the previous C") and "iterate.dream_gate=0" in err
    )
    best = RunDir(tmp_path / "a" / "r").params("best")
    assert asked == [
        ("round1", "gate-real", {"params": best}),  # with the round's M, as in its dream
        ("r", "gate-random", {"random": True}),
        ("round1", "gate-dream-c", {"params": best, "dream": True}),
        ("round1", "gate-dream-random", {"random": True, "dream": True}),
    ]
    good = {**bad, "gate-dream-c": 160.0, "gate-dream-random": -24.0}
    ran, _, err = _gate_run(tmp_path / "b", monkeypatch, good, "iterate.dream_gate=4")
    assert err is None and ran == ["train-mdnrnn", "train-controller", "evaluate"]
    ran, asked, err = _gate_run(tmp_path / "c", monkeypatch, bad)
    assert err is None and asked == [] and ran == ["train-mdnrnn", "train-controller", "evaluate"]


def test_status_shows_each_pass_and_the_result(tmp_path, monkeypatch, capsys):
    from wm.tools import status

    _drive(tmp_path, monkeypatch, [(165, 1500), (740, 890), (600, 650)])
    monkeypatch.undo()
    status.main(argparse.Namespace(run=str(tmp_path / "r")))
    out = capsys.readouterr().out
    assert "first pass   real    165.0  dream   1500.0  exploits the dream" in out
    assert "round1       real    740.0  dream    890.0  ← result" in out
    assert "stopped: no better real check score" in out
    finals = {"round6": 742.7, "round7": 737.6, "round8": 776.8}
    _drive(tmp_path / "f", monkeypatch, SEED14, "iterate.rounds=9", "iterate.final_check=100", random=206.4, finals=finals)
    monkeypatch.undo()
    status.main(argparse.Namespace(run=str(tmp_path / "f" / "r")))
    out = capsys.readouterr().out
    assert "real check / dream on the same seeds / final check (100 episodes)" in out
    assert "round7       real    820.7  dream    840.0  final    737.6\n" in out
    assert "round8       real    735.3  dream    760.0  final    776.8  ← result" in out


def test_status_and_the_report_read_a_pass_left_to_the_result_as_result_only(tmp_path, capsys):
    """Under `iterate.evaluate_passes: result` a pass's evaluate that has not run reads "result only" in `status`, the
    TUI's rows (`stage_rows`) and the report, once its C is trained, though round control's checks have started its
    folder ("resumable" before); a single pass, or `all`, keeps the stage's own state."""
    from wm.rounds.iterate import round_config
    from wm.tools import status
    from wm.tools.report import render

    def evaluate_state(*sets: str, name: str = "r", train: bool = True) -> str:
        cfg = _cfg(*sets)
        run = RunDir(tmp_path / f"{'-'.join(sets)}-{train}" / name)
        run.bind_config(round_config(cfg, 1) if name.startswith("round") else cfg, None)
        if train:
            run.mark_done("train-controller")
            run.eval_dir("check").mkdir(parents=True)  # round control's check: the stage has started
        return dict((v, st) for v, st, _ in status.stage_rows(run))["evaluate"]

    on = "iterate.evaluate_passes=result"
    assert evaluate_state(on) == evaluate_state(on, name="round3") == "result only"
    assert evaluate_state(on, train=False) == "not started"  # its C not trained yet
    assert evaluate_state(on, "iterate.rounds=0") == "resumable"  # a single pass evaluates itself
    assert evaluate_state("iterate.evaluate_passes=all", name="round3") == "resumable"
    run = RunDir(tmp_path / f"{on}-True" / "round3")
    status.main(argparse.Namespace(run=str(run.path)))
    assert "evaluate          result only" in capsys.readouterr().out
    assert "| evaluate | result only |" in render(run)
    run.mark_done("evaluate")
    assert dict((v, st) for v, st, _ in status.stage_rows(run))["evaluate"] == "done"


def test_the_demo_table_marks_only_the_result_c(tmp_path, capsys):
    import numpy as np

    from wm.core.atomic import atomic_write_json
    from wm.rollouts.evaluation import write_results

    run, r1 = RunDir(tmp_path / "r"), RunDir(tmp_path / "r" / "round1")
    for where, tags in ((run, ("real", "dream", "random", "random-dream")), (r1, ("real", "dream"))):
        for tag in tags:
            write_results(where, tag, [1, 2], np.array([100.0, 200.0]), np.array([100, 200]), {})
    atomic_write_json(run.rounds_path, {"passes": [], "result": {"name": "first pass", "path": str(run.path)}})
    pipeline._demo_table(run, [r1])
    lines = [line for line in capsys.readouterr().out.splitlines() if "← the run's result" in line]
    assert len(lines) == 1 and lines[0].lstrip().startswith("C, first pass") and " real " in lines[0]


def test_the_dream_gate_reads_round_controls_random_check_on_the_same_seeds(tmp_path, monkeypatch):
    """With `iterate.check_episodes` equal to the gate's count, the random policy's real episodes are round control's
    own check (eval/check-random): read back, not played again. The previous C's check is not: it played with its
    own M, and the gate plays it with the round's."""
    cfg = tiny_cfg(
        "iterate.check_episodes=4", "iterate.dream_gate=4", "es.fitness=dream", "mdnrnn.predict_reward=true", env="carracing"
    )
    asked: list[tuple[str, str]] = []
    means = {"gate-real": 350.5, "check-random": -27.3, "gate-dream-c": 160.0, "gate-dream-random": -24.0}

    def fake_mean(where, cfg_, tag, what, n=None, **kw):
        asked.append((where.path.name, tag))
        return means[tag]

    monkeypatch.setattr(control, "_check_mean", fake_mean)
    run = RunDir(tmp_path / "r")
    control.dream_gate(run, run, RunDir(tmp_path / "r" / "round1"), cfg)
    r1 = "round1"
    assert asked == [(r1, "gate-real"), ("r", "check-random"), (r1, "gate-dream-c"), (r1, "gate-dream-random")]


def test_the_demo_report_reads_the_stage_times_of_the_same_command(tmp_path, monkeypatch):
    """`pipeline --demo` writes the report after the stages: their times (pipeline_timings.jsonl, the report's
    per-pass time column) and every round's dream evaluation must be on disk by then, or a fresh run's report shows
    "—" for them."""
    import subprocess

    from wm.tools.report import render

    run = RunDir(tmp_path / "r")

    def fake_rounds(run_, cfg_, args_, timings, t0, clock=None):
        timings.update({"collect": 60.0, "round 1/collect": 30.0, "round 1/train-controller": 45.0})
        child = RunDir(run_.path / "round1")
        child.path.mkdir(parents=True, exist_ok=True)
        return [child]

    seen: dict[str, str] = {}
    calls: list[tuple[str, ...]] = []

    def fake_run(cmd, check=True):
        where = cmd[cmd.index("--run") + 1]
        calls.append((Path(where).name, *cmd[3 : cmd.index("--run")]))
        if "report" in cmd and where == str(run.path):
            seen["report"] = render(run)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(pipeline, "run_stages", lambda *a, **k: None)
    monkeypatch.setattr(pipeline, "run_rounds", fake_rounds)
    monkeypatch.setattr(pipeline, "_demo_table", lambda *a: None)
    monkeypatch.setattr(pipeline.subprocess, "run", fake_run)
    assert pipeline.main(_main_args(run.path, demo=True)) == 0
    rows = [line for line in seen["report"].splitlines() if line.startswith("| [round1]")]
    assert len(rows) == 1 and "| 1m15s |" in rows[0], rows
    # the run's report comes after every round's dream evaluation (its "dream (eval)" column reads them)
    assert calls.index(("round1", "evaluate", "--dream")) < calls.index(("r", "report")) == len(calls) - 1, calls


@pytest.mark.parametrize("mode", ["result", "all"])
def test_with_evaluate_passes_result_the_first_pass_stops_after_c_and_the_demo_dreams_only_the_result(
    tmp_path, monkeypatch, mode
):
    """The first pass, too, stops after C's training under `iterate.evaluate_passes: result`, and `--demo` plays 100
    dream episodes with the result's C alone (round 1 here), where `all` plays them with every pass's."""
    import subprocess

    run = RunDir(tmp_path / "r")
    firsts: list = []
    calls: list[tuple[str, ...]] = []

    def fake_rounds(run_, cfg_, args_, timings, t0, clock=None):
        kids = [RunDir(run_.path / f"round{k}") for k in (1, 2)]
        for kid in kids:
            kid.path.mkdir(parents=True, exist_ok=True)
        res = {"name": "round1", "path": str(kids[0].path)}
        run_.rounds_path.write_text(json.dumps({"passes": [], "result": res}))
        return kids

    def fake_run(cmd, check=True):
        calls.append((Path(cmd[cmd.index("--run") + 1]).name, *cmd[3 : cmd.index("--run")]))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(pipeline, "run_stages", lambda *a, **k: firsts.append(k.get("last")))
    monkeypatch.setattr(pipeline, "run_rounds", fake_rounds)
    monkeypatch.setattr(pipeline, "_demo_table", lambda *a: None)
    monkeypatch.setattr(pipeline.subprocess, "run", fake_run)
    sets = (f"iterate.evaluate_passes={mode}", "iterate.rounds=2", "iterate.check_episodes=10")
    assert pipeline.main(_main_args(run.path, *sets, demo=True)) == 0
    assert firsts == (["train-controller"] if mode == "result" else [None])
    played = [c[0] for c in calls if c[1:] == ("evaluate", "--dream")]
    assert played == (["round1"] if mode == "result" else ["r", "round1", "round2"])
    assert ("r", "evaluate", "--random") in calls and ("round2", "report") in calls


def test_a_resumed_runs_report_times_each_pass_by_its_stages_where_the_pipeline_did_not(tmp_path, monkeypatch):
    """A killed pipeline writes no stage times (pipeline_timings.jsonl is written at its end), so after a resume the
    earlier passes' stages take their metrics spans: seed 1's resumed run read "—" for round 1 and 39 s (only its
    evaluate) for round 2."""
    import time

    from wm.tools.report import rounds_section

    _drive(tmp_path, monkeypatch, SEED14[:3], "iterate.rounds=2")
    monkeypatch.undo()
    run = RunDir(tmp_path / "r")
    start = time.time() - 1000  # before the DONE files below: a span ends at its stage's DONE
    for where, spans in ((run, {"collect": 200.0}), (RunDir(run.path / "round1"), {"collect": 90, "train-controller": 120})):
        for verb, span in spans.items():
            path = where.metrics_path(verb)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f'{{"time": {start}}}\n{{"time": {start + span}, "step": 1}}\n')
            where.stage_dir(verb).mkdir(parents=True, exist_ok=True)
            (where.stage_dir(verb) / "DONE").write_text("{}")
    timed = {"train-vae": 600.0, "round 1/evaluate": 30.0, "round 2/collect": 60.0, "total_s": 690.0}
    rows = {line.split(" |")[0]: line for line in rounds_section(run, timed) if line.startswith("| ")}
    assert rows["| first pass"].split(" | ")[6] == "13m20s"  # V 600 s timed, collect 200 s from its metrics
    assert rows["| [round1](round1/report.md)"].split(" | ")[6] == "4m00s"  # 90 + 120 + the timed 30
    assert rows["| [round2](round2/report.md)"].split(" | ")[6] == "1m00s"


def test_the_report_shows_the_final_check_beside_the_short_one(tmp_path, monkeypatch, capsys):
    from wm.tools import status
    from wm.tools.report import rounds_section

    finals = {"round6": 742.7, "round7": 737.6, "round8": 776.8}
    _drive(tmp_path, monkeypatch, SEED14, "iterate.rounds=9", "iterate.final_check=100", random=206.4, finals=finals)
    monkeypatch.undo()
    rows = {line.split(" |")[0]: line for line in rounds_section(RunDir(tmp_path / "r"), {}) if line.startswith("| ")}
    assert "| final check |" in rows["| pass"]
    assert rows["| [round7](round7/report.md)"].startswith("| [round7](round7/report.md) | — | — | 821 | 840 | 738 |")
    assert rows["| [round8](round8/report.md)"].endswith("| 735 | 760 | 777 | — | **the run's result** |")
    assert rows["| [round5](round5/report.md)"].endswith("| 589 | 700 | — | — |  |")
    assert any(
        "played 100 real check episodes each (final check); the best of them" in line
        for line in rounds_section(RunDir(tmp_path / "r"), {})
    )
    # iterate.final_more: the best two's finals are over 300 episodes, marked so, and the note says which played more
    mores = {"round6": 800.0, "round8": 700.0}
    sets = ("iterate.rounds=9", "iterate.final_check=100", "iterate.final_more=200")
    _drive(tmp_path / "m", monkeypatch, SEED14, *sets, random=206.4, finals=finals, mores=mores)
    monkeypatch.undo()
    lines = rounds_section(RunDir(tmp_path / "m" / "r"), {})
    rows = {line.split(" |")[0]: line for line in lines if line.startswith("| ")}
    assert rows["| [round6](round6/report.md)"].endswith("| 781 (300) | — | **the run's result** |")
    assert rows["| [round7](round7/report.md)"].endswith("| 738 | — |  |")
    assert any("the best two, round6 and round8, played 300 in all (`iterate.final_more`)" in line for line in lines)
    status.main(argparse.Namespace(run=str(tmp_path / "m" / "r")))
    assert "round8       real    735.3  dream    760.0  final    725.6 (300 episodes)\n" in capsys.readouterr().out
    assert not any("iterate.evaluate_passes" in line for line in lines)
    _drive(
        tmp_path / "e", monkeypatch, SEED14, *sets, "iterate.evaluate_passes=result", random=206.4, finals=finals, mores=mores
    )
    monkeypatch.undo()
    assert any(
        line.startswith("Under `iterate.evaluate_passes: result` only the run's result")
        for line in rounds_section(RunDir(tmp_path / "e" / "r"), {})
    )


def test_a_stored_check_is_reused_only_with_the_same_seeds_v_m_and_c(tmp_path, monkeypatch):
    """`_check_mean` replays a check when its seeds or the files it played with changed: a gate rerun after the
    previous pass's C was retrained, or a round's M retrained, must not read the old score (`input_digest`); in the
    dream, nor when the dream's settings changed."""
    from wm.rollouts.evaluation import input_digest, played_params, write_results

    cfg = _cfg()
    run = RunDir(tmp_path / "r")
    for path, data in ((run.vae_weights, b"V"), (run.mdnrnn_weights, b"M"), (run.params("best"), b"C")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    other = tmp_path / "prev_best.npz"
    other.write_bytes(b"another C")
    played: list[tuple[str, ...]] = []

    def fake_evaluate(where, verb_args):  # what `evaluate` writes: the mean, the seeds, the files' digest
        played.append(tuple(verb_args))
        tag, first, n = (verb_args[verb_args.index(k) + 1] for k in ("--tag", "--seed", "--episodes"))
        spec = verb_args[verb_args.index("--params") + 1] if "--params" in verb_args else None
        pfile = None if "--random" in verb_args else played_params(where, spec or cfg.evaluate.params)
        seeds = list(range(int(first), int(first) + int(n)))
        digest = input_digest(setup(where.load_config() or cfg), where, pfile, "--dream" in verb_args)  # evaluate's own cfg
        write_results(where, tag, seeds, [float(len(played))] * len(seeds), [1] * len(seeds), {"inputs": digest})

    monkeypatch.setattr(control, "_evaluate", fake_evaluate)
    mean = control._check_mean
    assert mean(run, cfg, "check", "C") == 1.0
    assert mean(run, cfg, "check", "C") == 1.0 and len(played) == 1  # the same files: reused
    run.params("best").write_bytes(b"C retrained")
    assert mean(run, cfg, "check", "C") == 2.0  # C changed: played again
    assert mean(run, cfg, "gate", "prev C", params=other) == 3.0
    assert mean(run, cfg, "gate", "prev C", params=other) == 3.0 and len(played) == 3
    assert played[-1][:2] == ("--params", str(other))
    other.write_bytes(b"the previous pass's C, retrained")
    assert mean(run, cfg, "gate", "prev C", params=other) == 4.0
    assert mean(run, cfg, "rand", "random", random=True) == 5.0
    run.params("best").write_bytes(b"C once more")
    assert mean(run, cfg, "rand", "random", random=True) == 5.0  # the random policy reads no C
    run.mdnrnn_weights.write_bytes(b"M retrained")
    assert mean(run, cfg, "rand", "random", random=True) == 6.0  # but it runs on V and M
    assert mean(run, cfg, "rand", "random", n=4, random=True) == 7.0  # other seeds
    legacy = json.loads(run.eval_summary("rand").read_text())
    legacy.pop("inputs")
    run.eval_summary("rand").write_text(json.dumps(legacy))
    assert mean(run, cfg, "rand", "random", n=4, random=True) == 8.0  # a summary from before the digest: replayed
    assert mean(run, cfg, "dream", "C, dream", dream=True) == 9.0 and played[-1][0] == "--dream"
    assert mean(run, cfg, "dream", "C, dream", dream=True) == 9.0
    assert mean(run, cfg, "real", "C") == 10.0
    # the dream's settings, as the run's config.yaml holds them (what `evaluate` reads; a round's learned_set may
    # differ from the base run's): a check dreamed at another temperature or M's dropout is not this one's
    run.config_path.write_text(cfg.to_yaml())
    assert mean(run, cfg, "dream", "C, dream", dream=True) == 9.0  # the same settings: reused
    run.config_path.write_text(_cfg("dream.temperature=1.5").to_yaml())
    assert mean(run, cfg, "dream", "C, dream", dream=True) == 11.0
    assert mean(run, cfg, "dream", "C, dream", dream=True) == 11.0  # reused: the run's own settings match
    run.config_path.write_text(_cfg("dream.temperature=1.5", "mdnrnn.dropout=0.2").to_yaml())
    assert mean(run, cfg, "dream", "C, dream", dream=True) == 12.0
    assert mean(run, cfg, "real", "C") == 10.0 and len(played) == 12  # the real game reads no dream setting


def test_the_final_check_counts_the_short_checks_episodes_without_playing_them_again(tmp_path, monkeypatch):
    """The final check's first seeds are the short check's, and a C plays a seed the same way twice (seed 0's run:
    its three final checks' first 30 episodes equal their short checks', bit for bit): only the seeds after them
    play, and the mean is over all. A rerun plays nothing; a final check stored whole (runs before this) is read as
    it is; a C retrained since its short check plays every seed."""
    from wm.rollouts.evaluation import input_digest, played_params, write_results

    cfg = _cfg("iterate.check_episodes=30")
    run = RunDir(tmp_path / "r")
    for path, data in ((run.vae_weights, b"V"), (run.mdnrnn_weights, b"M"), (run.params("best"), b"C")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    played: list[list[int]] = []
    base = pipeline.check_seeds(cfg, 1)[0]

    def fake_evaluate(where, verb_args):  # a seed's return is its offset from the first check seed
        tag, first, n = (verb_args[verb_args.index(k) + 1] for k in ("--tag", "--seed", "--episodes"))
        seeds = list(range(int(first), int(first) + int(n)))
        played.append(seeds)
        digest = input_digest(setup(cfg), where, played_params(where, cfg.evaluate.params), False)
        write_results(where, tag, seeds, [float(s - base) for s in seeds], [1] * len(seeds), {"inputs": digest})

    monkeypatch.setattr(control, "_evaluate", fake_evaluate)
    mean = control._check_mean
    assert mean(run, cfg, "check", "C") == 14.5  # seeds 0…29
    assert mean(run, cfg, "final-check", "C (final)", 100, reuse="check") == 49.5  # the mean over 0…99
    assert [(s[0] - base, len(s)) for s in played] == [(0, 30), (30, 70)]
    assert mean(run, cfg, "final-check", "C (final)", 100, reuse="check") == 49.5 and len(played) == 2
    assert mean(run, cfg, "final-more", "C (more)", 200, skip=100) == 199.5  # seeds 100…299, nothing to reuse
    assert played[-1][0] - base == 100 and len(played[-1]) == 200
    whole = RunDir(tmp_path / "whole")  # a final check stored with all 100 seeds is reused as it is
    for src in (run.vae_weights, run.mdnrnn_weights, run.params("best")):
        dst = whole.path / src.relative_to(run.path)
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(src.read_bytes())
    fake_evaluate(whole, ["--tag", "check", "--seed", str(base), "--episodes", "30"])
    fake_evaluate(whole, ["--tag", "final-check", "--seed", str(base), "--episodes", "100"])
    n = len(played)
    assert mean(whole, cfg, "final-check", "C (final)", 100, reuse="check") == 49.5 and len(played) == n
    run.params("best").write_bytes(b"C retrained")  # its short check no longer counts: all 100 play
    assert mean(run, cfg, "final-check", "C (final)", 100, reuse="check") == 49.5
    assert (played[-1][0] - base, len(played[-1])) == (0, 100)


def test_round_controls_real_checks_run_over_the_pipelines_ranks_and_its_dream_checks_in_one_process(tmp_path, monkeypatch):
    """The pipeline's `--mpi N` and launcher reach round control's checks (`run_rounds` → `checks_over`): a real-game
    check is `evaluate` under the launcher with N ranks, a dream check one process (the dream batches on rank 0);
    outside the rounds, or with `--mpi 1`, every check is a plain `python -m wm evaluate`."""
    import sys

    from wm.core.launcher import Launcher

    cmds: list[list[str]] = []
    monkeypatch.setattr(control.subprocess, "run", lambda cmd, check: cmds.append(cmd))
    where = RunDir(tmp_path / "r")
    real = ["--tag", "check", "--seed", "5000000", "--episodes", "30", "--gifs", "0"]
    plain = [sys.executable, "-m", "wm", "evaluate", "--run", str(where.path)]

    def checks(run_, cfg_):  # what run_rounds' first call (the random check) would launch
        control._evaluate(where, ["--random", *real])
        control._evaluate(where, ["--dream", *real])
        raise WMError("stop here")

    monkeypatch.setattr(control, "random_check", checks)
    opts = PassOptions(force=False, mpi=3, launcher=Launcher.parse("srun", "--mpi=pmi2"))
    with pytest.raises(WMError, match="stop here"):
        control.run_rounds(where, _cfg(), opts, {}, t0=0.0)
    control._evaluate(where, real)  # the block is left: one process again
    assert cmds == [
        ["srun", "--mpi=pmi2", "-n", "3", *plain, "--random", *real],
        [*plain, "--dream", *real],
        [*plain, *real],
    ]
    cmds.clear()
    with pytest.raises(WMError, match="stop here"):
        control.run_rounds(where, _cfg(), PassOptions(force=False, mpi=1), {}, t0=0.0)
    assert cmds == [[*plain, "--random", *real], [*plain, "--dream", *real]]
