"""Config merge order and strict errors."""

from __future__ import annotations

import pytest
import yaml

from wm.core import config as C
from wm.core.errors import WMError


def test_every_block_only_overrides_known_keys():
    # Loading each block alone proves it names only keys that exist in base.yaml with fitting types.
    default_env = C.load([]).env.name
    for name, block in C.blocks().items():
        sections = block.get("for_env") or {}
        if not sections or default_env in sections:  # a block for other envs only is refused alone (below)
            C.load([name], [f"env.name={default_env}"])  # a recipe block alone names no env: refused without one
        for env in sections:  # and each per-env section after its env's block (named as the env, or naming it)
            env_blocks = [b for b, body in C.blocks().items() if b == env or (body.get("env") or {}).get("name") == env]
            assert env_blocks, f"block {name!r} has settings for {env!r}, which no env block names"
            C.load([env_blocks[0], name])


def test_a_preset_applies_the_section_of_the_env_named_before_it(tmp_path):
    doom, car = C.load(["doom_takecover", "small"]), C.load(["carracing", "small"])
    sections = C.blocks()["small"]["for_env"]
    assert doom.collect.episodes == sections["doom_takecover"]["collect"]["episodes"] == 1000
    assert car.collect.episodes == sections["carracing"]["collect"]["episodes"] == 300
    assert (doom.es.fitness, car.es.fitness) == ("dream", "real")  # the env blocks survive the preset
    assert car.iterate.rounds == 0 and doom.iterate.rounds > 0  # no Doom setting leaks into the car recipe
    assert car.env.renderer == "fast" and doom.env.renderer == "official"
    assert car.env.indicators and not C.load(["carracing"]).env.indicators  # the paper preset keeps the paper's crop
    # the car recipe's C and M read V's μ (version 3); the paper's preset and Doom's recipe keep the sampled z (§6)
    paper = C.load(["carracing"])
    assert (car.controller.z_input, paper.controller.z_input, doom.controller.z_input) == ("mean", "sampled", "sampled")
    boxing = C.load(["atari_boxing", "small"])
    assert (boxing.collect.episodes, boxing.es.fitness, boxing.es.curriculum) == (300, "real", [600, 0])
    freeway = C.load(["atari_freeway", "small"])
    assert (freeway.collect.policy, freeway.mdnrnn.seq_len, freeway.es.curriculum) == ("random_agent", 2048, [600, 0])
    with pytest.raises(WMError, match="Freeway-v5 only, not env 'gym:Pong"):
        (tmp_path / "pong.yaml").write_text("env:\n  name: gym:Pong-v5\n")
        C.load([str(tmp_path / "pong.yaml"), "small"])
    # the env block named after the preset applies first all the same; an env changed by --set would keep the other
    # game's recipe: refused, one line
    assert C.load(["small", "carracing"]).to_dict() == car.to_dict()
    with pytest.raises(WMError, match=r"then env.name became 'carracing': .* --configs carracing small"):
        C.load(["doom_takecover", "small"], ["env.name=carracing"])


def test_the_car_recipe_is_the_one_its_results_page_describes(repo_root):
    """`carracing small`'s C budget, resolved, is the sentence the results page opens with: a preset changed without
    its page (or the page without the preset) fails here."""
    es = C.load(["carracing", "small"]).es
    assert es.fitness == "real" and es.generations % es.eval_every == 0  # the last generation is a check
    words = "zero one two three four five six seven eight nine ten eleven twelve".split()
    checks = words[es.generations // es.eval_every]
    said = (
        f"population {es.popsize} × {es.trials} tracks × {es.generations} generations, "
        f"the best of {checks} {es.eval_episodes}-track checks kept"
    )
    page = " ".join((repo_root / "docs" / "results" / "carracing-small.md").read_text().split())
    assert said in page


def test_merge_left_to_right_then_set():
    cfg = C.load(["doom_takecover", "tiny"], ["vae.epochs=3"])
    assert cfg.env.name == "doom_takecover"  # from doom_takecover
    assert cfg.collect.episodes == C.blocks()["tiny"]["collect"]["episodes"]  # tiny wins over doom
    assert cfg.vae.epochs == 3  # --set wins over both
    assert cfg.vae.z_dim == 64  # doom value survives tiny
    cfg2 = C.load(["tiny", "doom_takecover"])
    assert cfg2.collect.episodes == 12  # the env block applies first whatever the order: tiny still wins


def test_paper_numbers_in_presets():
    car = C.load(["carracing"])
    doom = C.load(["doom_takecover"])
    assert (car.vae.z_dim, car.mdnrnn.hidden, car.controller.mode, car.controller.bias) == (32, 256, "zh", True)
    assert (doom.vae.z_dim, doom.mdnrnn.hidden, doom.controller.mode, doom.controller.bias) == (64, 512, "zch", False)
    assert doom.dream.temperature == 1.25 and doom.env.doom_skill == 4 and doom.env.max_steps == 2100
    assert (doom.es.popsize, doom.es.trials, doom.es.sigma0, doom.es.eval_every, doom.es.eval_episodes) == (
        64,
        16,
        0.1,
        25,
        1024,
    )
    assert doom.vae.lr == 1e-4 and doom.vae.adam_eps == 1e-8 and doom.vae.kl_tolerance == 0.5
    assert car.mdnrnn.steps == 4000 and car.mdnrnn.lr_decay == 1.0 and doom.mdnrnn.epochs == 400


def test_unknown_key_names_it_and_the_nearest():
    with pytest.raises(WMError, match=r"unknown config key 'vae.z_dimm'.*'vae.z_dim'"):
        C.load(["doom_takecover", "tiny"], ["vae.z_dimm=3"])
    with pytest.raises(WMError, match=r"unknown config block 'doom'.*doom_takecover"):
        C.load(["doom"])


def test_bad_type_names_key_value_and_type():
    with pytest.raises(WMError, match=r"'vae.epochs'.*'many'.*int"):
        C.load([], ["vae.epochs=many"])
    with pytest.raises(WMError, match=r"'controller.bias'.*bool"):
        C.load([], ["controller.bias=3"])
    with pytest.raises(WMError, match=r"'vae.epochs'.*2.5.*int"):
        C.load([], ["vae.epochs=2.5"])


def test_casts_to_default_type():
    cfg = C.load([], ["vae.lr=1e-3", "dream.temperature=1", "vae.epochs=4.0"])
    assert cfg.vae.lr == 1e-3 and isinstance(cfg.vae.lr, float)
    assert isinstance(cfg.dream.temperature, float) and isinstance(cfg.vae.epochs, int)
    assert C.load([], ["vae.jit_compile=true"]).vae.jit_compile == "true"  # YAML's bool, for a word key


def test_yaml_file_as_block(tmp_path):
    p = tmp_path / "mine.yaml"
    p.write_text(yaml.safe_dump({"vae": {"epochs": 7}}))
    assert C.load(["doom_takecover", "tiny", str(p)]).vae.epochs == 7
    p.write_text(yaml.safe_dump({"vae": {"epoch": 7}}))
    with pytest.raises(WMError, match="vae.epoch"):
        C.load([str(p)])


def test_config_is_immutable():
    cfg = C.load([])
    with pytest.raises(TypeError):
        cfg.vae = 3
    assert cfg["vae.z_dim"] == cfg.vae.z_dim


def test_the_car_dream_preset_trains_a_round_in_the_dream_on_a_finished_small_run():
    """`--configs carracing small dream`: the first pass is `small`'s, unchanged, and one round trains C
    only in M's dream with a new M that has done and reward heads and dropout; only `iterate` differs, which may
    change on a finished run."""
    from wm.rounds.iterate import round_config

    small, dream = C.load(["carracing", "small"]), C.load(["carracing", "small", "dream"])
    diff = {k for k, v in C.flatten(dream.to_dict()).items() if C.flatten(small.to_dict())[k] != v}
    assert diff and all(k.startswith("iterate.") for k in diff)
    r = round_config(dream, 1)
    assert (r.es.fitness, r.mdnrnn.init_from, r.mdnrnn.predict_done, r.mdnrnn.predict_reward) == ("dream", "", True, True)
    assert r.mdnrnn.dropout == 0.1 and r.dream.max_steps == 1000 and r.es.curriculum == [] and r.es.no_progress_steps == 0
    assert r.collect.policy == "agent" and r.collect.episodes == 500 and r.iterate.rounds == 0
    assert (r.es.draws, r.es.pick_real) == (4, 16) and (small.es.draws, small.es.pick_real) == (1, 0)
    with pytest.raises(WMError, match="'dream' has settings for carracing only"):
        C.load(["doom_takecover", "small", "dream"])


def test_retired_key_at_its_default_is_dropped_and_any_other_value_refused(tmp_path):
    """An older run's config.yaml may hold a retired lever's key: at the old default it loads (the key is dropped);
    a value that needs the retired code is refused, naming the key and the commit that has it."""
    from wm.core.config import RETIRED, RETIRED_AT

    key = "dream.critics"
    assert key in RETIRED
    cfg = C.update(C.defaults(), {"dream": {"critics": []}}, source="config.yaml")
    assert "critics" not in cfg.dream
    with pytest.raises(WMError, match=rf"'{key}'.*retired lever.*{RETIRED_AT}"):
        C.update(C.defaults(), {"dream": {"critics": ["../other"]}}, source="config.yaml")
    # a lever retired later names its own last commit
    assert C.update(C.defaults(), {"es": {"common_seeds": False}}, source="config.yaml").es.popsize == 64
    with pytest.raises(WMError, match=r"'es.common_seeds'.*retired lever.*1a17aa4"):
        C.update(C.defaults(), {"es": {"common_seeds": True}}, source="config.yaml")
    # the shipped CarRacing agent's stored config still names separable CMA-ES at its old default
    assert "cma_diagonal" not in C.update(C.defaults(), {"es": {"cma_diagonal": False}}, source="config.yaml").es
    with pytest.raises(WMError, match=r"'es.cma_diagonal'.*retired lever.*f7ffdf8"):
        C.update(C.defaults(), {"es": {"cma_diagonal": True}}, source="config.yaml")
    # a retired key is never in the defaults (else the table lies)
    flat = C.flatten(C.defaults().to_dict())
    assert not [k for k in RETIRED if k in flat]


@pytest.mark.parametrize("names", [["small"], ["tiny"], ["small", "dream"]])
def test_a_size_preset_without_an_env_is_refused_naming_the_env_blocks(names):
    with pytest.raises(WMError, match=r"names no env: put the env.s block first, e.g. --configs doom_takecover .*carracing"):
        C.load(names)
    assert C.load(["tiny"], ["env.name=gym:CartPole-v1", "env.actions=discrete:2"]).env.name == "gym:CartPole-v1"
