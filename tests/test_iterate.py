"""Iterative training (paper §5): round configs, round directories made of hard links, and the agent data policy
(a trained run's V + M + C acting in real ViZDoom, with random hold segments for exploration)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from wm.config import load
from wm.data.episodes import write_episode
from wm.errors import WMError
from wm.iterate import PassCheck, prepare_redraw, prepare_round, redraw_world, round_config
from wm.rundir import RunDir, atomic_savez

SETS = ["iterate.episodes=5", "iterate.generations=3", "iterate.mdnrnn_epochs=2"]


def _cfg(*extra: str):
    return load(["doom_takecover", "tiny"], SETS + list(extra))


def test_round_config_chains_rounds():
    cfg = _cfg()
    r1, r3 = round_config(cfg, 1), round_config(cfg, 3)
    assert r1.collect.episodes == 12 + 5 and r3.collect.episodes == 12 + 15  # cumulative data
    assert (r1.collect.policy, r1.collect.agent_run, r3.collect.agent_run) == ("agent", "..", "../round2")
    assert r1.mdnrnn.init_from == "../mdnrnn/mdnrnn.weights.h5" and r3.mdnrnn.init_from == "../round2/mdnrnn/mdnrnn.weights.h5"
    assert r1.es.init_from == ""  # C afresh by default; from the previous round's with warm_start_c
    assert round_config(_cfg("iterate.warm_start_c=true"), 3).es.init_from == "../round2/controller/best.npz"
    # round control's pick (`warm_start_pass`) overrides the previous pass's
    assert round_config(_cfg("iterate.warm_start_c=true"), 3, start_from=0).es.init_from == "../controller/best.npz"
    assert round_config(_cfg(), 4, start_from=2).es.init_from == "../round2/controller/best.npz"
    assert (r1.mdnrnn.epochs, r1.es.generations, r1.collect.min_length, r1.iterate.rounds) == (2, 3, 0, 0)
    assert r1.vae.to_dict() == cfg.vae.to_dict() and r1.env.to_dict() == cfg.env.to_dict()


def test_iterate_set_overrides_every_round_after_its_own_settings():
    cfg = _cfg('iterate.set=["es.fitness=real", "es.generations=7", "mdnrnn.dropout=0.1"]')
    r1, r2 = round_config(cfg, 1), round_config(cfg, 2)
    assert (r1.es.fitness, r2.es.fitness, r1.es.generations, r2.mdnrnn.dropout) == ("real", "real", 7, 0.1)
    assert cfg.es.fitness == "dream" and r1.collect.agent_run == ".."  # the base run and the round's own keys stay
    with pytest.raises(WMError, match="iterate.set cannot change iterate.rounds"):
        round_config(_cfg('iterate.set=["iterate.rounds=3"]'), 1)
    with pytest.raises(WMError, match="unknown config key 'es.fitnes' in iterate.set"):
        round_config(_cfg('iterate.set=["es.fitnes=real"]'), 1)


def test_learned_set_applies_over_iterate_set_only_to_a_learned_round():
    cfg = _cfg('iterate.set=["mdnrnn.done_horizon=4", "es.generations=7"]', 'iterate.learned_set=["mdnrnn.done_horizon=16"]')
    before, after = round_config(cfg, 2), round_config(cfg, 2, learned=True)
    assert (before.mdnrnn.done_horizon, after.mdnrnn.done_horizon) == (4, 16)
    assert before.es.generations == after.es.generations == 7 and after.collect.agent_run == "../round1"
    with pytest.raises(WMError, match="iterate.learned_set cannot change iterate.patience"):
        round_config(_cfg('iterate.learned_set=["iterate.patience=3"]'), 1, learned=True)


def test_small_doom_preset_keeps_the_papers_dream_until_c_has_learned():
    # the recipe measured on seeds 9-13 (README): the one-frame done head and the cutoff in the first pass and in every
    # round before a C reaches 2 x random; the 16-frame head with sampled deaths in the rounds after; up to 9 rounds
    cfg = load(["doom_takecover", "small"])
    first, before, after = cfg, round_config(cfg, 3), round_config(cfg, 3, learned=True)
    assert [(c.mdnrnn.done_horizon, c.dream.done_sampling) for c in (first, before, after)] == [
        (1, "threshold"),
        (1, "threshold"),
        (16, "bernoulli"),
    ]
    assert (cfg.iterate.rounds, cfg.iterate.max_minutes, cfg.iterate.target_ratio, cfg.iterate.patience) == (9, 85, 2.0, 2)
    assert cfg.iterate.unlearned_minutes == 120  # a seed not yet learned by minute 85 goes on (a slower machine)
    assert before.mdnrnn.to_dict() | {"done_horizon": 16} == after.mdnrnn.to_dict()  # nothing else differs in M


def test_pipeline_refuses_a_round_config_before_the_first_pass(tmp_path, repo_root):
    run = tmp_path / "car"
    sets = ["iterate.rounds=1", 'iterate.set=["es.fitness=dream"]']  # CarRacing's dream without the reward head
    cmd = [sys.executable, "-m", "wm", "pipeline", "--configs", "carracing", "tiny", "--run", str(run), "--set", *sets]
    done = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "needs M's reward head" in done.stderr.strip().splitlines()[-1]
    assert not run.exists()  # nothing written


@pytest.mark.parametrize(
    ("option", "off"),
    [
        ('iterate.learned_set=["mdnrnn.done_horizon=16"]', "iterate.learned_set=[]"),
        ("iterate.warm_start_learned=true", "iterate.warm_start_learned=false"),
    ],
)
def test_pipeline_refuses_learned_options_without_round_control(tmp_path, repo_root, option, off):
    run = tmp_path / "doom"
    sets = ["iterate.rounds=2", "iterate.check_episodes=0", option]
    cmd = [sys.executable, "-m", "wm", "pipeline", "--configs", "doom_takecover", "tiny", "--run", str(run), "--set", *sets]
    done = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=120)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0 and "needs round control" in last and f"or set '{off}'" in last
    assert not run.exists()  # nothing written


@pytest.mark.parametrize(
    ("sets", "says"),
    [
        (["iterate.check_episodes=0"], "iterate.final_check picks among the passes round control checked"),
        (["evaluate.seed=5000050"], "iterate.check_seed 5000000…5000099 overlaps the evaluation seeds"),
        # final_more's episodes follow the final check's: 5000100…5000299 meet evaluation seeds from 5000250
        (["iterate.final_more=200", "evaluate.seed=5000250"], "iterate.check_seed 5000000…5000299 overlaps"),
    ],
)
def test_pipeline_refuses_a_final_check_it_cannot_play(tmp_path, repo_root, sets, says):
    run = tmp_path / "doom"
    sets = ["iterate.rounds=2", "iterate.check_episodes=10", "iterate.final_check=100", *sets]
    cmd = [sys.executable, "-m", "wm", "pipeline", "--configs", "doom_takecover", "tiny", "--run", str(run), "--set", *sets]
    done = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and says in done.stderr.strip().splitlines()[-1]
    assert not run.exists()  # nothing written


def _fake_base(path, cfg, done=("collect", "train-vae", "encode", "train-mdnrnn", "train-controller")) -> RunDir:
    run = RunDir(path)
    run.bind_config(cfg)
    ep = {
        "obs": np.zeros((3, 64, 64, 3), np.uint8),
        "action": np.zeros((3, 1), np.float32),
        "reward": np.ones(3, np.float32),
        "done": np.array([0, 0, 1], bool),
        "seed": np.int64(1),
    }
    for i in range(2):
        write_episode(run.stage_dir("collect") / f"ep_{i:06d}.npz", **ep)
        write_episode(
            run.stage_dir("encode") / f"ep_{i:06d}.npz",
            mu=np.zeros((3, 64), np.float16),
            logvar=np.zeros((3, 64), np.float16),
            action=ep["action"],
            reward=ep["reward"],
            done=ep["done"],
        )
    run.stage_dir("train-vae").mkdir(parents=True, exist_ok=True)
    (run.stage_dir("train-vae") / "vae.weights.h5").write_bytes(b"weights")
    for verb in done:
        run.mark_done(verb, {"z_dim": 64} if verb == "train-vae" else {})
    return run


def test_a_redraw_links_its_worlds_data_v_and_m_and_trains_only_c_with_other_seeds(tmp_path):
    cfg = _cfg("iterate.rounds=3")
    base = _fake_base(tmp_path / "run", cfg)
    world = _fake_base(base.path / "round1", round_config(cfg, 1))
    (world.stage_dir("train-mdnrnn") / "mdnrnn.weights.h5").write_bytes(b"m")
    (world.stage_dir("train-mdnrnn") / "model.json").write_text("{}")
    (world.stage_dir("encode") / "initial_z.npz").write_bytes(b"z")
    r = prepare_redraw(base, 3, world, "round1", 2)
    assert r.path.name == "round3"
    for rel in ("episodes/ep_000001.npz", "series/initial_z.npz", "vae/vae.weights.h5", "mdnrnn/model.json"):
        assert (r.path / rel).stat().st_ino == (world.path / rel).stat().st_ino  # hard links, nothing copied
    for verb in ("collect", "train-vae", "encode", "train-mdnrnn"):
        assert r.is_done(verb) and r.done_info(verb)["linked_from"] == str(world.path)
    assert not r.is_done("train-controller") and not r.is_done("evaluate")  # C is trained (and evaluated) afresh
    rc, wc = r.load_config(), world.load_config()
    assert rc.es.seed == wc.es.seed + 200 and rc.iterate.redraw_of == "round1" and rc.iterate.rounds == 0
    assert rc.collect.agent_run == wc.collect.agent_run and rc.mdnrnn.to_dict() == wc.mdnrnn.to_dict()
    assert prepare_redraw(base, 3, world, "round1", 2).path == r.path  # idempotent
    world.clear_done("train-mdnrnn")
    with pytest.raises(WMError, match="needs its finished train-mdnrnn"):
        prepare_redraw(base, 4, world, "round1", 1)


def test_redraws_take_the_learned_honest_worlds_in_turn_best_first():
    cfg = _cfg("iterate.target_ratio=2", "iterate.exploit_ratio=2")
    h = [
        PassCheck("first pass", "p0", 300.0, 1500.0),  # above 2 × random but exploits its dream: not a world
        PassCheck("round1", "p1", 700.0, 650.0),
        PassCheck("round2", "p2", 90.0, 100.0),  # below 2 × random (50)
        PassCheck("round3", "p3", 650.0, 600.0),
    ]
    assert [redraw_world(h, cfg, 50.0, r) for r in (1, 2, 3)] == [1, 3, 1]
    h.append(PassCheck("round4", "p4", 800.0, 700.0, world="round3"))  # a redraw lifts round3's world above round1's
    assert [redraw_world(h, cfg, 50.0, r) for r in (1, 2)] == [3, 1]
    assert redraw_world(h[:1], cfg, 50.0, 1) is None


def test_prepare_round_links_data_and_keeps_v(tmp_path):
    cfg = _cfg("iterate.rounds=2")
    base = _fake_base(tmp_path / "run", cfg)
    r1 = prepare_round(base, cfg, 1)
    assert r1.path == base.path / "round1" and r1.load_config().to_dict() == round_config(cfg, 1).to_dict()
    for stage, name in (("collect", "ep_000001.npz"), ("encode", "ep_000000.npz"), ("train-vae", "vae.weights.h5")):
        assert (r1.stage_dir(stage) / name).stat().st_ino == (base.stage_dir(stage) / name).stat().st_ino
    assert r1.is_done("train-vae") and r1.done_info("train-vae")["z_dim"] == 64
    assert not r1.is_done("collect") and not (r1.stage_dir("encode") / "initial_z.npz").exists()
    assert prepare_round(base, cfg, 1).path == r1.path  # idempotent
    # round 2 needs a finished round 1: one line naming what is missing, nothing created
    with pytest.raises(WMError, match=r"round 2 needs a finished collect in .*round1"):
        prepare_round(base, cfg, 2)
    assert not (base.path / "round2").exists()
    # a changed iterate setting is refused by the round's stored config, not silently applied
    with pytest.raises(WMError, match="collect.episodes"):
        prepare_round(base, _cfg("iterate.rounds=2", "iterate.episodes=9"), 1)
    # while the base run itself accepts any iterate.* change (no stage of it reads them)
    base.bind_config(_cfg("iterate.rounds=4", "iterate.episodes=9"), None)


def test_prepare_round_refuses_unfinished_base(tmp_path):
    cfg = _cfg("iterate.rounds=1")
    base = _fake_base(tmp_path / "run", cfg, done=("collect", "train-vae", "encode", "train-mdnrnn"))
    with pytest.raises(WMError, match="train-controller"):
        prepare_round(base, cfg, 1)


# ---------------------------------------------------------------- the agent data policy, real ViZDoom


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory):
    """A run with untrained-but-real V (z 64), M (LSTM 32) and zero C params on disk."""
    from wm.models.controller import Controller
    from wm.models.mdnrnn import MDNRNN, save_config
    from wm.models.vae import ConvVAE
    from wm.training import save_weights

    path = tmp_path_factory.mktemp("agent")
    cfg = _cfg("mdnrnn.hidden=32", "env.max_steps=60", "collect.min_length=0")
    run = RunDir(path / "src")
    run.bind_config(cfg)
    for d in ("vae", "mdnrnn", "controller"):
        (run.path / d).mkdir(parents=True)
    save_weights(ConvVAE(64), run.path / "vae" / "vae.weights.h5")
    m = MDNRNN(64, 1, 32, 5, True)
    save_weights(m, run.path / "mdnrnn" / "mdnrnn.weights.h5")
    save_config(m, run.path / "mdnrnn" / "model.json")
    n = Controller.from_config(cfg, 1).n_params
    atomic_savez(run.path / "controller" / "best.npz", params=np.zeros(n))
    return cfg, run


def _episode(cfg, run_dir, slot, *sets):
    from wm import config as C
    from wm.envs import make_env
    from wm.stages.collect import collect_slot

    cfg = C.update(cfg, {"collect.policy": "agent", "collect.agent_run": "src", **dict(s.split("=") for s in sets)})
    env = make_env(cfg)
    try:
        return collect_slot(cfg, env, 1, slot, run_dir)[0]
    finally:
        env.close()


@pytest.mark.env
def test_agent_policy_acts_with_c_and_explores_with_holds(agent_run):
    cfg, run = agent_run
    root = run.path.parent
    # C with zero weights outputs tanh(0) = 0 on every step, so without exploration every action is 0
    ep = _episode(cfg, root, 0, "collect.explore=0.0")
    assert len(ep["action"]) > 10 and np.all(ep["action"] == 0.0)
    # always exploring: uniform actions held for 1..10 steps, never C's 0
    ep = _episode(cfg, root, 0, "collect.explore=1.0")
    a = ep["action"][:, 0]
    assert np.all(a != 0.0) and np.all(np.abs(a) <= 1.0)
    changes = np.flatnonzero(np.diff(a)) + 1
    runs = np.diff(np.concatenate([[0], changes, [len(a)]]))
    assert runs.max() <= 10 and len(runs) >= 3
    # mixed: some segments are C's (0), some random; and a slot's episode is reproducible
    e1, e2 = (_episode(cfg, root, 3, "collect.explore=0.5") for _ in range(2))
    assert 0 < np.mean(e1["action"] == 0.0) < 1
    np.testing.assert_array_equal(e1["action"], e2["action"])
    np.testing.assert_array_equal(e1["obs"], e2["obs"])
    # the agent's models are built from its own run's config, not the collecting round's: a round may give its new M
    # other heads or sizes (the CarRacing dream recipe adds a done head) while the previous pass's C plays
    from wm import config as C

    other = C.update(cfg, {"mdnrnn.predict_done": False, "mdnrnn.hidden": 64})
    np.testing.assert_array_equal(_episode(other, root, 3, "collect.explore=0.5")["action"], e1["action"])


def test_agent_policy_refuses_missing_artifacts(tmp_path):
    from wm.agent import check_agent_run

    with pytest.raises(WMError, match="not a run directory"):
        check_agent_run(tmp_path / "nope")
    (tmp_path / "src" / "vae").mkdir(parents=True)
    (tmp_path / "src" / "vae" / "vae.weights.h5").write_bytes(b"x")
    with pytest.raises(WMError, match=r"mdnrnn\.weights\.h5 missing"):
        check_agent_run(tmp_path / "src")


def test_pipeline_force_refuses_to_orphan_rounds(tmp_path, repo_root):
    import subprocess
    import sys

    cfg = _cfg("iterate.rounds=1")
    base = _fake_base(tmp_path / "run", cfg)
    prepare_round(base, cfg, 1)
    before = sorted(p.relative_to(base.path) for p in base.path.rglob("*"))
    proc = subprocess.run(
        [sys.executable, "-m", "wm", "pipeline", "--run", str(base.path), "--force"],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "--force would redo" in proc.stderr and "round1" in proc.stderr
    assert sorted(p.relative_to(base.path) for p in base.path.rglob("*")) == before and base.is_done("collect")


def test_round_retraining_v_fine_tunes_the_previous_v_and_leaves_earlier_rounds_untouched(tmp_path):
    """`iterate.vae_epochs > 0`: the round's V starts from the previous V (exact with lr 0), trains on the newest
    `vae_episodes` episodes, and every episode is re-encoded into the round's own series; the base run's V and
    series are byte-for-byte what they were."""
    import argparse

    from wm.metrics import make_logger
    from wm.models.vae import ConvVAE, load_vae
    from wm.stages import encode, train_vae
    from wm.training import save_weights

    sets = ("iterate.rounds=1", "iterate.vae_epochs=1", "iterate.vae_episodes=2", "vae.lr=0", "vae.val_fraction=0.5")
    cfg = _cfg(*sets, "vae.batch_size=8")
    base = _fake_base(tmp_path / "run", cfg)
    rng = np.random.default_rng(0)
    for i in range(2):  # real frames, so that base and round series differ if the round's V differs
        obs = rng.integers(0, 255, (20, 64, 64, 3), np.uint8)
        write_episode(
            base.episodes_dir / f"ep_{i:06d}.npz",
            obs=obs,
            action=np.zeros((20, 1), np.float32),
            reward=np.ones(20, np.float32),
            done=np.arange(20) == 19,
            seed=np.int64(i),
        )
    save_weights(ConvVAE(64), base.vae_weights)
    before = {p: p.read_bytes() for p in [base.vae_weights, *sorted(base.series_dir.glob("ep_*.npz"))]}

    r1 = prepare_round(base, cfg, 1)
    assert not r1.is_done("train-vae") and not list(r1.series_dir.glob("ep_*.npz"))  # nothing linked: V and z are new
    assert (r1.load_config().vae.init_from, r1.load_config().vae.pick) == ("../vae/vae.weights.h5", "last")
    for i in (2, 3):  # what the round's collect adds: the episodes the previous C played (the newest)
        write_episode(
            r1.episodes_dir / f"ep_{i:06d}.npz",
            obs=rng.integers(0, 255, (30, 64, 64, 3), np.uint8),
            action=np.zeros((30, 1), np.float32),
            reward=np.ones(30, np.float32),
            done=np.arange(30) == 29,
            seed=np.int64(i),
        )
    r1.mark_done("collect", {})
    rcfg = r1.load_config()
    with make_logger(r1, "train-vae", console=False) as log:
        info = train_vae.train(rcfg, r1, log)
    # the newest two (30 frames each), not the first two (20) nor all four
    assert (info["train_episodes"] + info["val_episodes"], info["train_frames"] + info["val_frames"]) == (2, 60)
    new, old = load_vae(r1.vae_weights, 64), load_vae(base.vae_weights, 64)
    assert all(np.array_equal(a, b) for a, b in zip(new.get_weights(), old.get_weights(), strict=True))  # warm start
    encode.run(rcfg, r1, argparse.Namespace(force=False))
    series = sorted(p.name for p in r1.series_dir.glob("ep_*.npz"))
    assert series == [f"ep_{i:06d}.npz" for i in range(4)]
    for name in ("ep_000000.npz", "ep_000001.npz"):  # re-encoded into the round's own files, not written through links
        assert (r1.series_dir / name).stat().st_ino != (base.series_dir / name).stat().st_ino
    assert {p: p.read_bytes() for p in before} == before  # the base run is untouched


def test_round_compare_rebuilds_a_round_beside_the_run_and_writes_nothing_into_it(tmp_path, repo_root):
    import importlib.util

    spec = importlib.util.spec_from_file_location("round_compare", repo_root / "bench" / "round_compare.py")
    rc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rc)
    cfg = _cfg("iterate.rounds=2")
    base = _fake_base(tmp_path / "run", cfg)
    _fake_base(base.path / "round1", round_config(cfg, 1))
    before = sorted(p.relative_to(base.path) for p in base.path.rglob("*"))
    out = tmp_path / "screen"
    child = rc.setup(base.path, 2, out, ["iterate.explore=0.0"])
    assert child.path == out / "round2" and (out / "round1").resolve() == (base.path / "round1").resolve()
    ccfg = child.load_config()
    assert (ccfg.collect.explore, ccfg.collect.agent_run, ccfg.collect.episodes) == (0.0, "../round1", 12 + 2 * 5)
    assert ccfg.mdnrnn.init_from == "../round1/mdnrnn/mdnrnn.weights.h5"
    name, r1 = "ep_000001.npz", RunDir(base.path / "round1")
    assert (child.stage_dir("collect") / name).stat().st_ino == (r1.stage_dir("collect") / name).stat().st_ino
    assert sorted(p.relative_to(base.path) for p in base.path.rglob("*")) == before  # the run is untouched
    assert rc.side(child) is None  # not evaluated yet: the JSON's side is null, not a crash
    with pytest.raises(WMError, match="--round must be >= 2"):
        rc.setup(base.path, 1, tmp_path / "x", [])
    with pytest.raises(WMError, match="round3 has no finished train-controller"):
        rc.setup(base.path, 4, tmp_path / "y", [])
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_branch_run_keeps_the_passes_up_to_r_links_data_and_copies_the_rest(tmp_path, repo_root):
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("branch_run", repo_root / "bench" / "branch_run.py")
    br = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(br)
    cfg = _cfg("iterate.rounds=3")
    base = _fake_base(tmp_path / "run", cfg)
    for k in (1, 2):
        _fake_base(base.path / f"round{k}", round_config(cfg, k))
    passes = [{"name": n, "real": 100.0 * i, "minutes": 10.0 * i} for i, n in enumerate(["first pass", "round1", "round2"])]
    base.rounds_path.write_text(json.dumps({"passes": passes, "stopped": "patience", "result": {"name": "round2"}}))
    (base.path / "pipeline_timings.jsonl").write_text('{"total_s": 1}\n')
    base.clock_path.write_text('{"pass": "round2", "minutes": 31.0}')  # RUN's last pass: OUT's round2 is another
    out = tmp_path / "branch"
    assert br.branch(base, 1, out) == ["first pass", "round1"]
    assert (out / "round1").is_dir() and not (out / "round2").exists()  # rounds after R are left out
    doc = json.loads((out / "rounds.json").read_text())
    assert [p["name"] for p in doc["passes"]] == ["first pass", "round1"] and doc["stopped"] is None
    ep = "round1/episodes/ep_000001.npz"
    assert (out / ep).stat().st_ino == (base.path / ep).stat().st_ino  # data: a hard link
    for f in ("pipeline_timings.jsonl", "config.yaml", "round1/config.yaml"):  # the rest: copies, appends stay in OUT
        assert (out / f).read_bytes() == (base.path / f).read_bytes()
        assert (out / f).stat().st_ino != (base.path / f).stat().st_ino
    assert not (out / "clock.json").exists()
    assert len(json.loads(base.rounds_path.read_text())["passes"]) == 3  # RUN untouched
    with pytest.raises(SystemExit, match="exists"):
        br.branch(base, 1, out)
    with pytest.raises(SystemExit, match="no round5"):
        br.branch(base, 5, tmp_path / "b2")
    assert not (tmp_path / "b2").exists()
    # --without-evaluate: each check's minutes less the evaluate stages up to it (the pipeline's timing where it has
    # one, else the stage's metrics span), the run's minutes less all of them
    doc = {"passes": passes, "stopped": "patience", "result": {"name": "round2"}, "minutes": 33.0}
    base.rounds_path.write_text(json.dumps(doc))
    (base.path / "pipeline_timings.jsonl").write_text('{"total_s": 1, "evaluate": 60, "round 1/evaluate": 90}\n')
    with pytest.raises(SystemExit, match="round2 of .* has no evaluate time"):
        br.branch(base, 2, tmp_path / "b3", without_evaluate=True)
    assert not (tmp_path / "b3").exists() and not list(tmp_path.glob("b3*"))
    metrics = RunDir(base.path / "round2").metrics_path("evaluate")
    metrics.parent.mkdir(parents=True, exist_ok=True)
    metrics.write_text('{"time": 100.0}\n{"time": 130.0}\n')
    br.branch(base, 2, tmp_path / "b3", without_evaluate=True)
    doc = json.loads((tmp_path / "b3" / "rounds.json").read_text())
    assert [p["minutes"] for p in doc["passes"]] == [-1.0, 7.5, 17.0] and doc["minutes"] == 30.0
