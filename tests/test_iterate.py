"""Iterative training (paper §5): round configs, round directories made of hard links, and the agent data policy
(a trained run's V + M + C acting in real ViZDoom, with random hold segments for exploration)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import tiny_cfg
from wm.core.atomic import atomic_savez
from wm.core.config import load
from wm.core.errors import WMError
from wm.core.rundir import RunDir
from wm.data.episodes import write_episode
from wm.rounds.iterate import prepare_round, round_config

SETS = ["iterate.episodes=5", "iterate.generations=3", "iterate.mdnrnn_epochs=2"]


def _cfg(*extra: str):
    return tiny_cfg(*SETS, *extra)


def test_round_config_chains_rounds():
    cfg = _cfg()
    r1, r3 = round_config(cfg, 1), round_config(cfg, 3)
    assert r1.collect.episodes == 12 + 5 and r3.collect.episodes == 12 + 15  # cumulative data
    assert (r1.collect.policy, r1.collect.agent_run, r3.collect.agent_run) == ("agent", "..", "../round2")
    assert r1.mdnrnn.init_from == "../mdnrnn/mdnrnn.weights.h5" and r3.mdnrnn.init_from == "../round2/mdnrnn/mdnrnn.weights.h5"
    assert (r1.mdnrnn.epochs, r1.es.generations, r1.collect.min_length, r1.iterate.rounds) == (2, 3, 0, 0)
    assert r1.es.to_dict() == cfg.es.to_dict() | {"generations": 3}  # C afresh: only its generations are the round's
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
    assert before.mdnrnn.to_dict() | {"done_horizon": 16} == after.mdnrnn.to_dict()  # nothing else differs in M


def test_pipeline_refuses_a_round_config_before_the_first_pass(tmp_path, repo_root):
    run = tmp_path / "car"
    sets = ["iterate.rounds=1", 'iterate.set=["es.fitness=dream"]']  # CarRacing's dream without the reward head
    cmd = [sys.executable, "-m", "wm", "pipeline", "--configs", "carracing", "tiny", "--run", str(run), "--set", *sets]
    done = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "needs M's reward head" in done.stderr.strip().splitlines()[-1]
    assert not run.exists()  # nothing written


def test_pipeline_refuses_learned_set_without_round_control(tmp_path, repo_root):
    run = tmp_path / "doom"
    sets = ["iterate.rounds=2", "iterate.check_episodes=0", 'iterate.learned_set=["mdnrnn.done_horizon=16"]']
    cmd = [sys.executable, "-m", "wm", "pipeline", "--configs", "doom_takecover", "tiny", "--run", str(run), "--set", *sets]
    done = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=120)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode != 0 and "needs round control" in last and "or set 'iterate.learned_set=[]'" in last
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
    from wm.envs.setup import setup
    from wm.models.mdnrnn import MDNRNN, save_config
    from wm.models.training import save_weights
    from wm.models.vae import ConvVAE

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
    n = setup(cfg).n_params
    atomic_savez(run.path / "controller" / "best.npz", params=np.zeros(n))
    return cfg, run


def _episode(cfg, run_dir, slot, *sets):
    from wm.core import config as C
    from wm.envs import make_env
    from wm.stages.collect import collect_slot
    from wm.stages.contract import stage_input

    cfg = C.update(cfg, {"collect.policy": "agent", "collect.agent_run": "src", **dict(s.split("=") for s in sets)})
    env = make_env(cfg)
    try:
        return collect_slot(stage_input(cfg, "collect"), env, slot, run_dir)[0]
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
    from wm.core import config as C

    other = C.update(cfg, {"mdnrnn.predict_done": False, "mdnrnn.hidden": 64})
    np.testing.assert_array_equal(_episode(other, root, 3, "collect.explore=0.5")["action"], e1["action"])


def test_agent_policy_refuses_missing_artifacts(tmp_path):
    from wm.rollouts.agent import check_agent_run

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
