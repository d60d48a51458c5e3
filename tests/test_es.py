"""CMA-ES wrapper (learning, weight-decay sign, antithetic seeds, exact resume) and the train-controller stage
run serially with the toy fitness (resume equivalence, retries of a failing task, refusal without upstream)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import history, stage, tiny_cfg, toy_cfg
from wm.core.bounded import read_jsonl
from wm.core.errors import WMError
from wm.core.rundir import RunDir
from wm.envs.setup import setup
from wm.es import state as es_state
from wm.es.cmaes import CMAES, episode_seeds, member_seeds, penalized_fitness


def test_cmaes_learns_a_10d_quadratic():
    target = np.linspace(-1.0, 1.0, 10)
    es = CMAES(10, popsize=16, sigma0=0.5, weight_decay=0.0, seed=3)
    for _ in range(80):
        x = es.ask()
        es.tell(-np.sum((x - target) ** 2, axis=1))
    assert np.sum((es.mean - target) ** 2) < 1e-3


def test_weight_decay_penalises_mean_square():
    rng = np.random.default_rng(0)
    params, returns = rng.normal(size=(6, 5)), rng.normal(size=6)
    np.testing.assert_allclose(penalized_fitness(returns, params, 0.01), returns - 0.01 * (params**2).sum(1) / 5)
    # With no reward at all only the decay acts: the mean must shrink towards 0 (the authors' sign grows it, §10.5).
    es = CMAES(8, popsize=16, sigma0=0.1, weight_decay=0.01, seed=1, x0=np.ones(8))
    for _ in range(30):
        es.ask()
        es.tell(np.zeros(16))
    assert np.linalg.norm(es.mean) < 0.9 * np.linalg.norm(np.ones(8))


def test_antithetic_seed_layout():
    s = member_seeds(np.random.default_rng(5), 8, antithetic=True)
    assert np.array_equal(s[:4], s[4:]) and len(set(s[:4].tolist())) == 4
    es = CMAES(3, popsize=8, seed=2)
    es.ask()
    ep = es.seeds(5)
    assert ep.shape == (8, 5) and ep.dtype == np.int64
    assert np.array_equal(ep[:4], ep[4:]) and len(set(ep[:4].ravel().tolist())) == 20
    assert np.array_equal(episode_seeds(s[:1], 5), episode_seeds(s[:1], 5))
    plain = member_seeds(np.random.default_rng(5), 8, antithetic=False)
    assert len(set(plain.tolist())) == 8


def test_state_round_trip_continues_identically(tmp_path):
    es = CMAES(6, popsize=8, sigma0=0.3, seed=7)
    for _ in range(3):
        x = es.ask()
        es.tell(-np.sum(x**2, 1))
    es_state.save(tmp_path / "s.npz", es.state_dict())
    twin = CMAES.from_state(es_state.load(tmp_path / "s.npz"))
    np.random.seed(123)  # a stray user of the global RNG must not matter
    for _ in range(3):
        a, b = es.ask(), twin.ask()
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(es.seeds(2), twin.seeds(2))
        es.tell(-np.sum(a**2, 1))
        twin.tell(-np.sum(b**2, 1))


def test_nan_member_gets_the_worst_fitness():
    es = CMAES(4, popsize=8, seed=0)
    es.ask()
    told = es.tell(np.array([1.0, np.nan, 3.0, 0.5, 2.0, 2.0, 2.0, 2.0]))
    assert told[1] == told.min() == told[3]


# ---------------------------------------------------------------- the stage, serially, toy fitness


def test_resume_equivalence(tmp_path):
    straight = stage(toy_cfg(), tmp_path / "a")
    with pytest.raises(KeyboardInterrupt):
        stage(toy_cfg(), tmp_path / "b", stop_after=2)
    b = RunDir(tmp_path / "b")
    assert not b.is_done("train-controller") and len(history(b)) == 2
    # a torn/extra line after the checkpoint (a crash mid-generation) must be dropped on resume
    with open(b.metrics_path("train-controller"), "a") as f:
        f.write('{"step": 3, "es/generation": 3, "es/mean": 0.0}\n')
    stage(toy_cfg(), tmp_path / "b")
    assert history(b) == history(straight) and [r["es/generation"] for r in history(b)] == [1, 2, 3, 4]
    assert b.is_done("train-controller")
    with np.load(b.path / "controller" / "best.npz") as f, np.load(straight.path / "controller" / "best.npz") as g:
        np.testing.assert_array_equal(f["params"], g["params"])
        assert f["params"].shape == (192,) and int(f["generation"]) in (2, 4)
        assert float(f["score"]) == max(r["es/eval_best"] for r in history(b) if "es/eval_best" in r)
    # every check's mean is kept (the points of a real learning curve), the best one equal to best.npz
    checks = {int(r["es/generation"]): r["es/eval_mean"] for r in history(b) if "es/eval_mean" in r}
    assert sorted(p.name for p in (b.path / "controller" / "checks").iterdir()) == [f"gen_{g:04d}.npz" for g in checks]
    for g, score in checks.items():
        with np.load(b.check_params(g)) as f:
            assert int(f["generation"]) == g and float(f["score"]) == score and f["params"].shape == (192,)
    stale = b.check_params(99)
    stale.write_bytes(b"a longer earlier training's check")
    stage(toy_cfg(), tmp_path / "b", force=True)  # starts afresh: the earlier checks go
    assert not stale.exists() and b.check_params(4).exists()
    keys = set(read_jsonl(b.metrics_path("train-controller"))[-1])
    assert {
        "es/generation",
        "es/elapsed",
        "es/mean",
        "es/min",
        "es/max",
        "es/std",
        "es/best",
        "es/sigma",
        "es/len_mean",
        "es/len_max",
        "es/evals_per_s",
        "es/eval_mean",
        "es/eval_std",
        "es/eval_best",
    } <= keys


def checks_of(run: RunDir) -> dict[int, dict]:
    return {int(c["generation"]): c for _, c in run.checks()}


def test_draws_train_afresh_one_after_another_and_the_pick_plays_every_check(tmp_path):
    """es.draws: draw 0 is the one-draw training bit for bit, draw 1 CMA-ES afresh with es.seed + 1 (its first
    population that of a fresh start with that seed); es.pick_real: every check plays the same seeds, best.npz is the
    best of those, a rerun plays only the checks without a result; a kill inside draw 2 resumes exactly."""
    from wm.rollouts.engine import ToyEvaluator
    from wm.stages.train_controller import pick_seeds

    two = toy_cfg(**{"es.draws": 2, "es.pick_real": 3})
    run = stage(two, tmp_path / "d")
    one = stage(toy_cfg(), tmp_path / "one")
    h = history(run)
    assert [r["es/generation"] for r in h] == list(range(1, 9)) and [r["es/draw"] for r in h] == [1] * 4 + [2] * 4
    assert [r["es/mean"] for r in h[:4]] == [r["es/mean"] for r in history(one)]
    checks = checks_of(run)
    assert sorted(checks) == [2, 4, 6, 8] and [int(c["draw"]) for c in checks.values()] == [0, 0, 1, 1]
    for g in (2, 4):
        np.testing.assert_array_equal(checks[g]["params"], checks_of(one)[g]["params"])
    seeds = pick_seeds(run.load_config())
    assert len(seeds) == 3 and (seeds >= 2**24).all()
    toy = ToyEvaluator(192, 111)
    for c in checks.values():
        assert int(c["real_episodes"]) == 3
        assert float(c["real"]) == pytest.approx(float(toy.evaluate(c["params"][None], seeds[None])[0].mean()), abs=1e-12)
    top = max(checks.values(), key=lambda c: float(c["real"]))
    with np.load(run.params("best")) as f:
        np.testing.assert_array_equal(f["params"], top["params"])
    done = run.done_info("train-controller")
    assert done["pick/generation"] == int(top["generation"]) and done["pick/real"] == float(top["real"])
    # a check without its result (a kill during the pick) is played again, alone
    c6 = dict(checks[6])
    for k in ("real", "real_std", "real_episodes"):
        c6.pop(k)
    np.savez(run.check_params(6), **c6)
    stage(two, run.path)
    assert "pick: 1 of 4 checks × 3 real episodes" in run.log_path("train-controller").read_text()
    assert float(checks_of(run)[6]["real"]) == float(checks[6]["real"])
    # killed at the end of draw 1: the checkpoint holds draw 2's fresh CMA-ES (seed es.seed + 1); resumed, the
    # same history, checks and pick
    from wm.es.checkpoint import state_path
    from wm.es.others import es_from_state, make_es

    with pytest.raises(KeyboardInterrupt):
        stage(two, tmp_path / "k", stop_after=4)
    st = es_state.load(state_path(RunDir(tmp_path / "k")))
    assert st["draw"] == 1 and st["generation"] == 4
    fresh = make_es(run.load_config().es, 192, seed=112)
    np.testing.assert_array_equal(es_from_state(st["es"]).ask(), fresh.ask())
    k = stage(two, tmp_path / "k")
    assert history(k) == h and k.done_info("train-controller")["pick/generation"] == done["pick/generation"]
    with pytest.raises(WMError, match=r"es\.draws.? must be"):  # the config's range check, or check_fitness's
        stage(toy_cfg(**{"es.draws": 0}), tmp_path / "z")


def test_a_pick_task_lost_for_good_keeps_the_other_results_and_a_rerun_plays_only_its_checks(tmp_path, monkeypatch):
    faults = tmp_path / "faults"
    faults.mkdir()
    monkeypatch.setenv("WM_TOY_FAULTS", str(faults))
    run = stage(toy_cfg(**{"es.draws": 2}), tmp_path / "r")  # trained, no pick
    (faults / "raise-1").write_text("")  # the task of draw 1's checks raises once; no retries
    cfg = toy_cfg(**{"es.draws": 2, "es.pick_real": 3, "es.task_retries": 0})
    with pytest.raises(WMError, match="pick: the real episodes of gen_0002.npz, gen_0004.npz were lost"):
        stage(cfg, run.path)
    checks = checks_of(run)
    assert ["real" in c for c in checks.values()] == [False, False, True, True]
    assert "pick/real" not in run.done_info("train-controller")
    stage(cfg, run.path)
    assert "pick: 2 of 4 checks × 3 real episodes" in run.log_path("train-controller").read_text()
    assert all(int(c["real_episodes"]) == 3 for c in checks_of(run).values())
    assert "pick/real" in run.done_info("train-controller")


def test_toy_stage_improves(tmp_path):
    run = stage(toy_cfg(**{"es.generations": 30, "es.sigma0": 0.05, "es.eval_every": 30}), tmp_path / "r")
    h = history(run)
    assert h[-1]["es/mean"] > h[0]["es/mean"] + 1.0


def test_failing_task_is_retried_and_logged(tmp_path, monkeypatch):
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "raise-3").write_text("")
    monkeypatch.setenv("WM_TOY_FAULTS", str(faults))
    run = stage(toy_cfg(**{"es.generations": 2}), tmp_path / "r")
    clean = stage(toy_cfg(**{"es.generations": 2}), tmp_path / "clean")
    assert not (faults / "raise-3").exists()
    log = run.log_path("train-controller").read_text()
    assert "raised on rank 0 (attempt 1/3): RuntimeError: injected fault for member 3" in log
    assert history(run) == history(clean)


def test_refuses_without_upstream(tmp_path):
    run = RunDir(tmp_path / "r")
    with pytest.raises(WMError, match="train-mdnrnn"):
        stage(toy_cfg(**{"es.fitness": "dream"}), run.path)
    assert not (run.path / "controller" / "es_state.npz").exists() and not (run.path / "controller").exists()


@pytest.mark.env
def test_real_rollouts_depend_only_on_seed_and_params():
    """Random-weight V/M in real Doom: the same (params, seed) episode gives the same return whichever slot and
    batch it runs in (2 envs stepped together vs 1), and a different member gets its own parameters."""
    from wm.core import tf_setup

    tf_setup.setup(threads=1, gpu=False)
    from wm.models.controller import Controller
    from wm.models.mdnrnn import MDNRNN
    from wm.models.vae import ConvVAE
    from wm.rollouts.rollout import RealEvaluator

    cfg = tiny_cfg("env.max_steps=60")
    vae, m = ConvVAE(cfg.vae.z_dim), MDNRNN(cfg.vae.z_dim, 1, cfg.mdnrnn.hidden, 5, True)
    m.step(np.zeros((1, cfg.vae.z_dim), np.float32), np.zeros((1, 1), np.float32), m.initial_state(1), np.ones(1, np.float32))
    ctl = Controller.from_setup(setup(cfg))
    params = np.random.default_rng(0).normal(0, 1.0, (2, ctl.n_params))
    seeds = np.array([[3, 4, 5], [3, 4, 5]])
    two, one = RealEvaluator(setup(cfg), vae, m, ctl, n_envs=2), RealEvaluator(setup(cfg), vae, m, ctl, n_envs=1)
    try:
        r2, l2 = two.evaluate(params, seeds, record=1)
        r1, l1 = one.evaluate(params[1:], seeds[1:, ::-1])
    finally:
        two.close()
        one.close()
    np.testing.assert_array_equal(r2[1], r1[0, ::-1])
    np.testing.assert_array_equal(l2, r2.astype(np.int64))  # TakeCover: +1 per step survived
    assert (l2 <= 60).all() and len(two.frames) == 1 and len(two.frames[0]) == l2[0, 0] + 1


def test_extend_continues_a_finished_training_from_its_checkpoint(tmp_path, capsys):
    from wm.cli import main

    straight = stage(toy_cfg(), tmp_path / "a")  # 4 generations in one go
    b = RunDir(tmp_path / "b")
    b.bind_config(toy_cfg(**{"es.generations": 2}))  # the run exists (train-controller starts no run)
    cmd = ["train-controller", "--configs", "doom_takecover", "tiny", "--run", str(b.path)]
    sets = ["--set", "es.fitness=toy", "es.eval_every=2"]
    assert main([*cmd, *sets, "es.generations=2"]) == 0 and b.is_done("train-controller")
    assert main([*cmd, *sets, "es.generations=4"]) == 0  # DONE: not rerun, the change not applied
    out = capsys.readouterr().out
    assert "already done" in out and "--extend" in out and len(history(b)) == 2
    # nothing to add: refused in one line before DONE or the config is touched
    before = b.config_path.read_text()
    assert main([*cmd, "--extend", *sets, "es.generations=2"]) != 0
    assert "2 generations are trained" in capsys.readouterr().err
    assert b.is_done("train-controller") and b.config_path.read_text() == before and len(history(b)) == 2
    assert main([*cmd, "--extend", *sets, "es.generations=4"]) == 0
    assert history(b) == history(straight) and [r["es/generation"] for r in history(b)] == [1, 2, 3, 4]
    assert b.is_done("train-controller")
    assert main([*cmd, "--extend", *sets, "es.generations=6", "es.draws=2"]) != 0  # one draw continues, not several
    assert "--extend continues one CMA-ES draw" in capsys.readouterr().err and len(history(b)) == 4
