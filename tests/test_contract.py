"""The stage contract's inputs (`wm.stages.contract`): a stage receives the env facts resolved once and the config
blocks its registry record declares, nothing else; what it reads of a block it did not declare is refused by name,
and its code derives no env fact again."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

from tests.helpers import tiny_cfg
from wm.core.config import defaults
from wm.core.registry import STAGES, load_stage
from wm.envs.setup import setup
from wm.stages.contract import stage_input

STAGE_DIR = Path(__file__).resolve().parents[1] / "wm" / "stages"
BLOCKS = set(defaults())


def test_a_stage_holds_the_blocks_it_declares_and_nothing_else():
    cfg = tiny_cfg()
    inp = stage_input(cfg, "encode")
    assert set(inp.cfg) == {"run", "env", "encode", "vae", "data"}
    assert inp.setup is setup(cfg) and inp.config_hash == cfg.hash() and inp.verb == "encode"
    assert inp.cfg.vae.z_dim == cfg.vae.z_dim and inp.cfg["data.max_bad_share"] == cfg.data.max_bad_share
    assert "vae" in inp.cfg and "es" not in inp.cfg  # asking is not reading
    with pytest.raises(AttributeError, match=r"stage encode reads the config block 'es', which it does not declare"):
        inp.cfg.es  # noqa: B018
    with pytest.raises(AttributeError, match=r"'es', which it does not declare"):
        inp.cfg["es.popsize"]
    with pytest.raises(TypeError, match=r"StageInput.config_hash"):
        inp.cfg.hash()  # the hash of some blocks would pass for the run's
    with pytest.raises(TypeError, match=r"not a stage's blocks: read StageInput.setup"):
        setup(inp.cfg)  # a setup of some blocks would resolve facts from a part of the config


def test_the_inputs_travel_to_a_worker_as_they_are():
    """collect's workers and ranks get the stage's inputs pickled: the same blocks, still refusing the others, and
    the one setup of that config in the receiving process."""
    inp = stage_input(tiny_cfg(), "collect")
    back = pickle.loads(pickle.dumps(inp))
    assert back.cfg.to_dict() == inp.cfg.to_dict() and back.setup is inp.setup and back.config_hash == inp.config_hash
    with pytest.raises(AttributeError, match=r"stage collect reads the config block 'vae'"):
        back.cfg.vae  # noqa: B018


def _block_reads(tree: ast.AST) -> set[tuple[int, str]]:
    """(line, block) of each `cfg.<block>` read: the stages name their blocks `cfg` (`cfg = inp.cfg`)."""
    return {
        (n.lineno, n.attr)
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and n.attr in BLOCKS and isinstance(n.value, ast.Name) and n.value.id == "cfg"
    }


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.verb)
def test_a_stage_reads_only_its_declared_blocks_and_derives_no_env_fact(stage):
    """Read in the stage's code: every `cfg.<block>` it reads is one its record declares (the run's tiny pipeline
    checks the helpers it calls at run time); it takes `inp`, and never resolves a setup, a scoring config or a hash
    from a config, nor reaches around its inputs for the whole config (`inp.setup.cfg`)."""
    mod = load_stage(stage.verb)
    tree = ast.parse(Path(mod.__file__).read_text())
    declared = set(stage.blocks)
    undeclared = sorted(f"{Path(mod.__file__).name}:{line} cfg.{b}" for line, b in _block_reads(tree) if b not in declared)
    assert not undeclared, undeclared
    run = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run")
    assert run.args.args[0].arg == "inp" and ast.unparse(run.args.args[0].annotation) == "StageInput"
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            f = n.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in ("scoring_config", "hash", "action_dim", "family", "action_post") or (
                isinstance(f, ast.Name) and f.id == "setup"  # wm.envs.setup's (`tf_setup.setup()` starts TensorFlow)
            ):
                found.append(f"{n.lineno}: calls {name}")
        if isinstance(n, ast.Attribute) and n.attr == "cfg" and isinstance(n.value, ast.Attribute) and n.value.attr == "setup":
            found.append(f"{n.lineno}: reads the setup's whole config")
    assert not found, found


def test_the_block_scan_sees_a_read():
    tree = ast.parse("cfg = inp.cfg\nx = cfg.es.popsize\ny = cfg.vae.z_dim\nz = other.es\n")
    assert _block_reads(tree) == {(2, "es"), (3, "vae")}
