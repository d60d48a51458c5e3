"""The stage registry is the one list of stages: verbs, status rows, TUI rows, report plots, the README's
stage table and the artifact names all come from, or are checked against, `wm.core.registry` / `wm.core.rundir.ARTIFACTS`."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers import tiny_cfg
from wm.core import registry
from wm.core.rundir import ARTIFACTS, RunDir

ROOT = Path(__file__).resolve().parents[1]


def test_every_registered_verb_is_a_cli_verb_and_nothing_else():
    from wm.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert {s.verb for s in registry.STAGES} | {t.verb for t in registry.TOOLS} == set(sub.choices)
    assert "sweep" in sub.choices  # `python -m wm sweep` replaced the separate `python -m wm.tools.sweep`
    # every verb is documented for its users: the README or the guide shows it as a command
    text = (ROOT / "README.md").read_text() + "".join(p.read_text() for p in (ROOT / "docs" / "guide").glob("*.md"))
    undocumented = [v.verb for v in registry.VERBS if not re.search(rf"\b(wm|python -m wm) {re.escape(v.verb)}\b", text)]
    assert not undocumented, undocumented


def test_stage_records_are_consistent():
    for s in registry.STAGES:
        assert s.role in ("data", "world", "controller", "eval")
        assert set(s.reads) | set(s.writes) <= set(ARTIFACTS), s.verb
        for key in s.writes:  # a stage writes into its own folder
            assert ARTIFACTS[key][0] == s.verb, (s.verb, key)
        assert s.key_figures and all(
            k.startswith(("collect/", "vae/", "encode/", "mdnrnn/", "es/", "pick/", "eval/")) for k in s.key_figures
        )
        assert registry.stage(s.verb) is registry.stage(s.name) is registry.stage(s.dir) is s
    with pytest.raises(KeyError):
        registry.stage("nope")
    assert [s.verb for s in registry.stages_with_role("data", "world")] == ["collect", "train-vae", "encode", "train-mdnrnn"]


def test_every_stage_options_field_is_a_flag_of_its_subparser():
    """Each stage's `Options` is a frozen dataclass whose every field is a flag `--<name>` of its subparser
    (`wm.cli.build_parser`) with the field's default, and every flag of the subparser beyond the shared ones
    (`wm.core.commands.add_run_args`) is a field: the dataclass is the one declaration of the stage's flags."""
    import dataclasses

    from wm.cli import build_parser
    from wm.core.commands import add_run_args

    shared = argparse.ArgumentParser()
    add_run_args(shared)
    shared_dests = {a.dest for a in shared._actions}
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for s in registry.STAGES:
        mod = registry.load_stage(s.verb)
        assert dataclasses.is_dataclass(mod.Options), s.verb
        with pytest.raises(dataclasses.FrozenInstanceError):
            mod.Options().x = 1  # frozen: what run and the hooks read cannot change under them
        actions = {a.dest: a for a in sub.choices[s.verb]._actions}
        for f in dataclasses.fields(mod.Options):
            assert f.name in actions, (s.verb, f.name)
            assert f"--{f.name.replace('_', '-')}" in actions[f.name].option_strings, (s.verb, f.name)
            default = actions[f.name].default
            assert (tuple(default) if isinstance(default, list) else default) == f.default, (s.verb, f.name)
        assert set(actions) - shared_dests - {"help"} == {f.name for f in dataclasses.fields(mod.Options)} - shared_dests
        parsed = sub.choices[s.verb].parse_args(["--run", "r"])
        assert registry.options(mod, parsed) == mod.Options(), s.verb  # every field has its flag's default


def test_a_field_added_to_a_stage_options_is_its_flag_with_no_other_edit(monkeypatch):
    """A field declared with `flag` in a stage's `Options` is in the stage's --help and in the `Options` the CLI
    builds, without a line anywhere else."""
    import dataclasses

    from wm.cli import build_parser
    from wm.core.errors import WMError
    from wm.core.flags import flag

    mod = registry.load_stage("evaluate")
    extra = [("new_knob", int | None, flag(None, "a knob only Options declares", metavar="K"))]
    Options = dataclasses.make_dataclass("Options", extra, bases=(mod.Options,), frozen=True)
    monkeypatch.setattr(mod, "Options", Options)
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    text = sub.choices["evaluate"].format_help()
    assert "--new-knob K" in text and "a knob only Options declares" in text
    assert text.index("--tag TAG") < text.index("--new-knob K")  # after the fields before it
    opts = registry.options(mod, sub.choices["evaluate"].parse_args(["--run", "r", "--new-knob", "4", "--dream"]))
    assert opts == Options(new_knob=4, dream=True)
    with pytest.raises(WMError, match="--episodes must be"):
        registry.options(mod, sub.choices["evaluate"].parse_args(["--run", "r", "--episodes", "0"]))  # __post_init__


@pytest.mark.parametrize(
    "options, problem",
    [("", "has no Options"), ("Options = dict", "Options is not a dataclass"), ("Options = 1", "Options is not a dataclass")],
)
def test_a_stage_without_an_options_dataclass_is_refused(options, problem):
    import types

    mod = types.ModuleType("wm.stages.untyped")
    exec("def run(inp, run, opts):\n    pass\n" + options, mod.__dict__)
    with pytest.raises(TypeError, match=f"^stage untyped: wm.stages.untyped.*{problem}"):
        registry.check_stage_module(mod, "untyped")


def test_status_rows_come_from_the_registry(tmp_path):
    from wm.tools.status import stage_rows

    run = RunDir(tmp_path / "r")
    run.episodes_dir.mkdir(parents=True)
    for i in range(3):
        (run.episodes_dir / f"ep_{i:06d}.npz").write_bytes(b"x")
    run.metrics_path("train-vae").parent.mkdir(parents=True)
    run.metrics_path("train-vae").write_text(json.dumps({"step": 5, "vae/loss": 2.5, "vae/other": 1}) + "\n")
    run.mark_done("train-controller", {"es/eval_best": 9.0, "pick/generation": 20, "pick/real": 429.2})
    rows = stage_rows(run)
    assert [r[0] for r in rows] == [s.verb for s in registry.STAGES]
    figs = dict((v, f) for v, _, f in rows)
    assert figs["collect"] == {"collect/episodes": 3}  # the registry's `figures` read from files
    assert figs["train-vae"] == {"vae/loss": 2.5}  # only the registry's key figures of the last record
    assert figs["train-controller"] == {"pick/generation": 20, "pick/real": 429.2}  # es.pick_real's choice (DONE)


def test_pipeline_progress_comes_from_the_registry(tmp_path):
    from wm.core.progress import stage_progress

    cfg = tiny_cfg("collect.episodes=4", "es.generations=8")
    run = RunDir(tmp_path / "r")
    run.episodes_dir.mkdir(parents=True)
    (run.episodes_dir / "ep_000000.npz").write_bytes(b"x")
    assert stage_progress(run, cfg, "collect") == 0.25
    run.metrics_path("train-controller").parent.mkdir(parents=True)
    run.metrics_path("train-controller").write_text(json.dumps({"es/generation": 2}) + "\n")
    assert stage_progress(run, cfg, "train-controller") == 0.25
    two = tiny_cfg("collect.episodes=4", "es.generations=8", "es.draws=2")
    assert stage_progress(run, two, "train-controller") == 0.125  # generation 2 of 2 draws × 8
    assert stage_progress(run, cfg, "train-vae") is None  # nothing logged yet


def test_report_plots_come_from_the_registry(tiny_run):
    from wm.tools.report import make_plots

    run = tiny_run
    for st, plot in registry.plots():
        path = run.metrics_path(st.verb)
        path.parent.mkdir(parents=True, exist_ok=True)
        key = plot.series[0][1]
        path.write_text("".join(json.dumps({"step": i, key: float(i)}) + "\n" for i in range(3)))
    made = make_plots(run)
    assert [p.name for _, p in made] == [plot.file for _, plot in registry.plots()]
    assert [t for t, _ in made] == [plot.title for _, plot in registry.plots()]


def test_tui_rows_and_plots_come_from_the_registry():
    from wm.tui.model import PLOTS

    assert set(PLOTS) == {s.name for s in registry.STAGES}
    for s in registry.STAGES:
        assert PLOTS[s.name] == (s.watch, s.rate)


def test_readme_stage_table_matches_the_registry():
    text = (ROOT / "README.md").read_text()
    table = text[text.index("| Stage (verb) | Reads | Writes |") :].split("\n\n")[0].splitlines()[2:]
    rows = [re.match(r"\| `([a-z-]+)` \| (.*) \| (.*) \|$", line) for line in table]
    assert [m.group(1) for m in rows] == [s.verb for s in registry.STAGES]
    for m in rows:
        writes = m.group(3)
        for key in registry.stage(m.group(1)).writes:
            verb, name = ARTIFACTS[key]
            shown = name or registry.stage(verb).dir + "/"
            assert shown in writes, (m.group(1), shown)


def test_no_artifact_file_name_outside_the_run_dir_module():
    """Every artifact's file name is spelled once, in wm/core/rundir.py: consumers ask RunDir."""
    names = sorted({name for _, name in ARTIFACTS.values() if name})
    files = [p for d in ("wm", "tui", "mpi", "bench") for p in (ROOT / d).rglob("*.py") if p.name != "rundir.py"]
    offenders = []
    for p in files:
        for i, line in enumerate(p.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            for n in names:
                if f'"{n}"' in code or f"'{n}'" in code or f"/ {n!r}" in code or f'/{n}"' in code:
                    offenders.append(f"{p.relative_to(ROOT)}:{i}: {n}")
    assert not offenders, offenders


def test_sweep_verb_prepares_tau_runs(tmp_path, repo_root):
    """`python -m wm sweep prepare` (a registered tool verb) refuses a run whose upstream stages are not done."""
    import sys

    run = tmp_path / "r"
    res = subprocess.run(
        [sys.executable, "-m", "wm", "sweep", "prepare", "--run", str(run), "--taus", "1.0"],
        capture_output=True,
        text=True,
        cwd=repo_root,
        timeout=120,
    )
    assert res.returncode == 2 and res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1
