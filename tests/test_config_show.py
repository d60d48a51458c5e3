"""`wm config`: the resolved config with each key's why, a run's stored config, and the blocks."""

from __future__ import annotations

from tests.helpers import tiny_run_at
from wm import cli
from wm.core import config as C
from wm.tools.config_show import key_comments


def test_every_key_prints_with_its_value_its_default_when_changed_and_its_comment(capsys):
    assert cli.main(["config", "--configs", "carracing", "small", "--set", "es.generations=120"]) == 0
    out = capsys.readouterr().out.splitlines()
    flat = C.flatten(C.load(["carracing", "small"], ["es.generations=120"]).to_dict())
    assert sum(1 for ln in out if ln.startswith("  ")) == len(flat)  # every key, one line each
    assert "  generations: 120  (default 1800)" in out
    assert "  trials: 4  (default 16)  # rollouts per member; fitness = mean return" in out
    comments = key_comments((C.CONFIG_DIR / "base.yaml").read_text())
    assert comments["es.popsize"] == "" and comments["vae.kl_tolerance"].startswith("KL floor")


def test_a_runs_config_a_section_and_the_blocks(tmp_path, capsys):
    run = tiny_run_at(tmp_path / "r", "es.popsize=6")
    assert cli.main(["config", "--run", str(run.path), "--section", "es.popsize"]) == 0
    assert capsys.readouterr().out.splitlines() == ["es:", "  popsize: 6  (default 64)"]
    assert cli.main(["config", "--blocks"]) == 0
    names = [ln.split()[0] for ln in capsys.readouterr().out.splitlines()]
    assert sorted(names) == sorted(C.blocks())
    assert cli.main(["config", "--configs", "small"]) == 2  # a recipe without its env
    assert "names no env" in capsys.readouterr().err
