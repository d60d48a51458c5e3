"""`wm.envs.setup`: a config's env facts resolved once, each equal to what the suite computed from the config before
(the family record, the action size, C's parameter count and layout), each refused with its own error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from wm.core.config import Config, blocks, load
from wm.core.errors import WMError
from wm.envs import action_dim, action_post
from wm.envs.family import family
from wm.envs.setup import MODES, DreamSettings, Sizes, family_of, setup
from wm.models.controller import Controller

# every env block of configs/ (the paper's two games and the Atari blocks), and the gym action kinds no block uses
ENVS = [[name] for name, block in sorted(blocks().items()) if "name" in (block.get("env") or {})]
ENVS += [["atari_boxing", "env.actions=joystick:18"], ["atari_boxing", "env.actions=box:2"]]


def test_every_env_block_is_covered():
    names = {e[0] for e in ENVS}
    assert {"doom_takecover", "carracing", "atari_boxing", "atari_freeway"} <= names


def _built(cfg: Config, a: int) -> Controller:
    """C built from the config's keys by hand (what `Controller.from_config` did): the oracle the setup must match."""
    c = cfg.controller
    return Controller(c.mode, cfg.vae.z_dim, cfg.mdnrnn.hidden, a, c.bias, c.hidden_units, post=action_post(cfg))


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("env", ENVS, ids=lambda e: "+".join(e))
def test_the_setup_is_what_the_config_gave_before(env, mode, bias):
    cfg = load([env[0]], [*env[1:], f"controller.mode={mode}", f"controller.bias={str(bias).lower()}"])
    s, a = setup(cfg), action_dim(cfg)
    c = _built(cfg, a)
    assert (s.action_dim, s.post, s.family) == (a, action_post(cfg), family(cfg)) == (a, c.post, family_of(cfg.env.name))
    assert s.n_params == c.n_params > 0
    assert (s.controller.inputs, s.controller.input_dim, list(s.controller.pieces)) == (c.inputs, c.input_dim, c.layout)
    assert (s.z_dim, s.hidden) == (cfg.vae.z_dim, cfg.mdnrnn.hidden) == (c.z_dim, c.hidden)
    rebuilt = Controller.from_setup(s)
    assert (rebuilt.layout, rebuilt.post, rebuilt.bias, rebuilt.hidden_units) == (c.layout, c.post, c.bias, c.hidden_units)


def test_the_sizes_and_dream_settings_are_the_configs():
    cfg = load(["doom_takecover", "tiny"], ["mdnrnn.dropout=0.25", "mdnrnn.done_horizon=16", "dream.temperature=1.15"])
    s, m, d = setup(cfg), cfg.mdnrnn, cfg.dream
    assert s.sizes == Sizes(cfg.vae.z_dim, 1, m.hidden, m.num_mixtures, True, False, 0.25)
    assert s.dream == DreamSettings(1.15, d.max_steps, d.done_sampling, m.done_weight, 16)
    assert s.dream.done_options() == {"done_sampling": d.done_sampling, "done_weight": m.done_weight, "done_horizon": 16}
    assert s.env.max_steps == cfg.env.max_steps and s.scoring is s  # Doom has one renderer


def test_scores_are_played_on_the_official_renderer():
    fast = setup(load(["carracing", "small"], []))
    assert fast.env.renderer == "fast" and fast.scoring.env.renderer == "official"
    assert fast.scoring.scoring is fast.scoring and fast.scoring.n_params == fast.n_params


def test_the_world_loader_and_the_evaluators_take_a_setup_not_the_config():
    """The rooms that load and play a world (the world loader, the real and dream evaluators, the dream envs, the
    recorder, the agent data policy, one-episode helpers) read a resolved `Setup`: none names `Config`, takes or reads
    a `cfg`."""
    import ast

    rooms = ("world", "rollout", "dream", "gym_dream", "recording", "agent", "episodes")
    root = Path(__file__).resolve().parents[1] / "wm" / "rollouts"
    found = []
    for room in rooms:
        tree = ast.parse((root / f"{room}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in ("Config", "cfg"):
                found.append(f"{room}.py:{node.lineno} {node.id}")
            if isinstance(node, ast.alias) and node.name == "Config":
                found.append(f"{room}.py:{node.lineno} imports Config")
            if isinstance(node, ast.arg) and node.arg == "cfg":
                found.append(f"{room}.py:{node.lineno} a cfg argument")
    assert not found, found


def test_the_engine_resolves_the_spec_once_and_its_worker_side_reads_no_config():
    """`EvalSpec.of` is the engine's one reader of a config: the spec carries the setup and the few `es` / `evaluate`
    values the workers use, pickles (to a process or an MPI rank) as the setup's plain dict, and the rest of
    `wm.rollouts.engine` names no `Config` and takes or reads no `cfg`."""
    import ast
    import pickle

    from wm.core import config as C
    from wm.rollouts.engine import EvalSpec

    cfg = C.update(C.defaults(), {"es": {"real_envs_per_worker": 7, "task_timeout": 33.0}, "evaluate": {"gif_stride": 3}})
    spec = EvalSpec.of("dream", cfg, "some/run", temperature=0.4)
    assert (spec.real_envs, spec.task_timeout, spec.gif_stride, spec.facts.dream.temperature) == (7, 33.0, 3, 0.4)
    back = pickle.loads(pickle.dumps(spec))
    assert back.facts is spec.facts  # the same config resolves to the one setup of this process
    assert (back.facts.controller, back.facts.dream, back.facts.sizes) == (
        spec.facts.controller,
        spec.facts.dream,
        spec.facts.sizes,
    )
    with pytest.raises(WMError, match="unknown evaluation kind 'dreams'"):
        EvalSpec.of("dreams", cfg, "some/run")

    tree = ast.parse((Path(__file__).resolve().parents[1] / "wm" / "rollouts" / "engine.py").read_text())
    boundary = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "of")
    inside = {id(n) for n in ast.walk(boundary)}
    found = [
        f"engine.py:{n.lineno}"
        for n in ast.walk(tree)
        if id(n) not in inside
        and (
            (isinstance(n, ast.Name) and n.id in ("Config", "cfg"))
            or (isinstance(n, ast.arg) and n.arg == "cfg")
            or (isinstance(n, ast.Attribute) and n.attr in ("config", "cfg"))
        )
    ]
    assert not found, found


def test_one_setup_per_config():
    cfg = load(["carracing"])
    assert setup(cfg) is setup(load(["carracing"]))
    other = setup(load(["carracing"], ["controller.mode=z"]))
    assert other is not setup(cfg) and other.n_params == 99 and setup(cfg).n_params == 867  # the paper's Car C (§6)


def test_each_fact_is_refused_with_its_own_error():
    """A fact is resolved when read: an env name none of the families knows, a gym env's bad `env.actions` and an
    unknown controller mode are refused by the fact that needs them, with the message the suite gave before."""
    d = load(["doom_takecover"]).to_dict()
    bad_name = Config(d | {"env": d["env"] | {"name": "pong"}})
    s = setup(bad_name)
    for fact, fn in (("family", family), ("action_dim", action_dim)):
        with pytest.raises(WMError) as before:
            fn(bad_name)
        with pytest.raises(WMError) as now:
            getattr(s, fact)
        assert str(now.value) == str(before.value)
    with pytest.raises(WMError, match="expected one of"):
        _ = s.n_params
    bad_actions = load(["atari_boxing"], ["env.actions=discrete:many"])
    assert setup(bad_actions).family is family(bad_actions)  # the family needs no action spec
    with pytest.raises(WMError, match="env.actions must be"):
        _ = setup(bad_actions).n_params
    d = load(["carracing"]).to_dict()
    bad_mode = Config(d | {"controller": d["controller"] | {"mode": "zz"}})  # config.RULES refuses it when loaded
    with pytest.raises(WMError) as before:
        _built(bad_mode, action_dim(bad_mode))
    with pytest.raises(WMError) as now:
        _ = setup(bad_mode).n_params
    assert str(now.value) == str(before.value) and "controller mode 'zz'" in str(now.value)
    assert setup(bad_mode).action_dim == 3  # the facts that do not need the mode still resolve


def test_the_setup_imports_no_tensorflow():
    code = "import sys, wm.envs.setup; sys.exit('tensorflow' in sys.modules or 'keras' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
