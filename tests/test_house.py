"""The house rules that keep the code and its docs navigable: the stage contract, env names only in wm/envs, every
relative link of the README and docs resolving, every quick-start command accepted by the CLI's own parser."""

from __future__ import annotations

import ast
import dataclasses
import re
import shlex
import types
from pathlib import Path

import pytest

from wm.cli import build_parser
from wm.core import registry

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_registered_stage_implements_the_contract():
    """Each record names the module of its own verb (load_stage raises when a module breaks the contract)."""
    for s in registry.STAGES:
        mod = registry.load_stage(s.verb)
        assert s.verb in (mod.__doc__ or "")[:300], (s.verb, s.module)  # its docstring opens with its verb


@dataclasses.dataclass(frozen=True)
class _Options:
    force: bool = False


@pytest.mark.parametrize(
    "body, problem",
    [
        ("x = 1", "has no run"),
        ("def run(cfg):\n    pass", "takes 1 parameters"),
        ("def run(inp, run, opts):\n    pass\nside_run = True", "side_run is not a function"),
        # a stage's flags are its Options' fields (wm.core.flags): an add_args left beside them would go unread
        ("def run(inp, run, opts):\n    pass\ndef add_args(p):\n    pass", "add_args is not read"),
    ],
)
def test_the_registry_refuses_a_stage_that_breaks_the_contract(body, problem):
    mod = types.ModuleType("wm.stages.broken")
    exec(body, mod.__dict__)
    mod.Options = _Options
    with pytest.raises(TypeError, match=problem):
        registry.check_stage_module(mod, "broken")
    ok = types.ModuleType("wm.stages.fine")
    exec("def run(inp, run, opts):\n    pass", ok.__dict__)
    ok.Options = _Options
    assert registry.check_stage_module(ok, "fine") is ok and registry.hooks(ok) == registry.StageHooks()


# a comparison with an env's name, or a table keyed by one (naming a config block, `--configs carracing`, is fine)
ENV_LITERALS = re.compile(
    r"""(==|!=|\bin)\s*\(?["'](doom_takecover|carracing)["']|["'](doom_takecover|carracing)["']\s*(==|!=|:)|startswith\(["']gym:"""
)


def test_no_env_name_is_compared_outside_wm_envs():
    """Code outside wm/envs reads the env family's record (wm.envs.family), never an env name."""
    offenders = []
    for d in ("wm", "tui", "mpi", "bench"):
        for p in (ROOT / d).rglob("*.py"):
            if (ROOT / "wm" / "envs") in p.parents:
                continue
            for i, line in enumerate(p.read_text().splitlines(), 1):
                code = line.split("#", 1)[0]
                if ENV_LITERALS.search(code) and not code.lstrip().startswith(('"', "'")):  # docstrings may name them
                    offenders.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not offenders, offenders


# the env facts a config resolves to once (wm.envs.setup); C is built from the setup (`Controller.from_setup`)
ENV_FACTS = ("action_dim", "family")


def env_fact_calls(source: str) -> list[tuple[int, str]]:
    """(line, what) of each call of an env fact (or import of one under any name), and of `Controller.from_config`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("wm.envs"):
            found += [(node.lineno, f"imports {a.name}") for a in node.names if a.name in ENV_FACTS]
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        if name in ENV_FACTS:
            found.append((node.lineno, f"calls {name}"))
        elif name == "from_config" and isinstance(f.value, ast.Name) and f.value.id == "Controller":
            found.append((node.lineno, "calls Controller.from_config"))
    return sorted(found)


def test_env_facts_are_resolved_once_in_wm_envs():
    """Outside wm/envs code reads `wm.envs.setup.setup(cfg)` (or is handed what it resolved), never recomputes the
    action size, the family record or C's parameter count from a config."""
    offenders = []
    for d in ("wm", "tui", "mpi"):
        for p in (ROOT / d).rglob("*.py"):
            if (ROOT / "wm" / "envs") in p.parents:
                continue
            rel = p.relative_to(ROOT).as_posix()
            offenders += [f"{rel}:{line}: {what}" for line, what in env_fact_calls(p.read_text())]
    assert not offenders, "\n".join(offenders)


def test_the_env_fact_scan_sees_every_form():
    src = (
        "from wm.envs import action_dim as A\nfrom wm.envs.family import EnvFamily\n"
        "A(cfg)\nfam.family(cfg)\nController.from_config(cfg, 3)\nsetup(cfg).action_dim\n"
    )
    assert env_fact_calls(src) == [(1, "imports action_dim"), (4, "calls family"), (5, "calls Controller.from_config")]


# a Config's every value is already of its default's type (wm.core.config.update casts it): casting it again says
# the code does not trust that, and hides a value that is not (a Config built around the cast)
SCALAR_CASTS = {"int": int, "float": float, "str": str, "bool": bool}


def redundant_casts(source: str, flat: dict) -> list[tuple[int, str]]:
    """(line, call) of each `int|float|str|bool(<…>.block.key)` whose key's default (`flat`: the flattened defaults)
    is of exactly that type (bool is not int here); a cast to another type (`float(cfg.es.popsize)`) is not one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in SCALAR_CASTS):
            continue
        if len(node.args) != 1 or node.keywords or not isinstance(node.args[0], ast.Attribute):
            continue
        parts, arg = [], node.args[0]
        while isinstance(arg, ast.Attribute):
            parts.insert(0, arg.attr)
            arg = arg.value
        if isinstance(arg, ast.Name):
            parts.insert(0, arg.id)
        keys = [k for n in range(2, len(parts) + 1) if (k := ".".join(parts[-n:])) in flat]
        if keys and type(flat[keys[0]]) is SCALAR_CASTS[node.func.id]:
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def test_config_values_are_not_cast_again():
    """`int(cfg.es.popsize)`, `str(cfg.env.name)`: the config already holds an int and a str."""
    from wm.core.config import defaults, flatten

    flat = flatten(defaults().to_dict())
    offenders = []
    for d in ("wm", "tui", "mpi"):
        for p in sorted((ROOT / d).rglob("*.py")):
            rel = p.relative_to(ROOT).as_posix()
            offenders += [f"{rel}:{line}: {call}" for line, call in redundant_casts(p.read_text(), flat)]
    assert not offenders, f"{len(offenders)} casts of config values already of that type:\n" + "\n".join(offenders)


def test_the_cast_scan_sees_every_form():
    flat = {"es.popsize": 64, "es.fitness": "dream", "vae.lr": 1e-4, "env.indicators": False, "iterate.work.stage": 0.0}
    src = (
        "int(cfg.es.popsize)\nstr(self.cfg.es.fitness)\nfloat(run.load_config().vae.lr)\nbool(cfg.env.indicators)\n"
        "float(cfg.iterate.work.stage)\nint(es.popsize)\n"
        "float(cfg.es.popsize)\nint(cfg.vae.lr)\nint(cfg.env.indicators)\nint(args.popsize)\nint(cfg.es.popsize or 2)\n"
    )
    assert redundant_casts(src, flat) == [
        (1, "int(cfg.es.popsize)"),
        (2, "str(self.cfg.es.fitness)"),
        (3, "float(run.load_config().vae.lr)"),
        (4, "bool(cfg.env.indicators)"),
        (5, "float(cfg.iterate.work.stage)"),
        (6, "int(es.popsize)"),
    ]


LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(md: str) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    out = set()
    for h in re.findall(r"^#+ (.+)$", md, re.M):
        slug = re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def test_every_relative_link_of_the_readme_and_docs_resolves():
    broken = []
    for doc in DOCS:
        text = doc.read_text()
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text()):
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken


def _commands(md: str) -> list[list[str]]:
    """The `wm …` / `python -m wm …` commands of a Markdown file's bash blocks (with `srun -n N` in front, too)."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", md, re.S):
        for line in block.splitlines():
            line = line.split(" # ", 1)[0].split("   #", 1)[0].strip()
            for part in line.split("&&"):
                words = shlex.split(part)
                while words and words[0] in ("srun", "mpirun", "-n") or words[:1] and words[0].isdigit():
                    words = words[1:]
                if words[:3] == ["python", "-m", "wm"]:
                    words = ["wm", *words[3:]]
                if words[:1] == ["wm"] and len(words) > 1:
                    out.append(words[1:])
    return out


def test_the_readme_quick_starts_parse_with_the_cli_parser():
    cmds = _commands((ROOT / "README.md").read_text())
    assert len(cmds) >= 8, cmds  # the quick starts are there
    parser = build_parser()
    for words in cmds:
        try:
            parser.parse_args(words)
        except SystemExit as e:
            if e.code:
                pytest.fail(f"the README's `wm {' '.join(words)}` is refused by the CLI")


class _Planted:
    """An object whose unpickling would create a marker file: what a run dir handed to you could hold."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_planted_pickles_in_a_run_dirs_arrays_do_not_run(tmp_path):
    """C's parameters and the dream's starts are read with allow_pickle=False: an object array planted in their
    .npz is refused in one line and nothing in it runs."""
    import numpy as np

    from wm.core.errors import WMError
    from wm.rollouts.world import read_initial_z, read_params

    marker = tmp_path / "ran"
    planted = np.array([_Planted(marker)], dtype=object)
    np.savez(tmp_path / "best.npz", params=planted)
    np.savez(tmp_path / "initial_z.npz", mu=planted, logvar=planted)
    with pytest.raises(WMError, match="cannot read"):
        read_params(tmp_path / "best.npz", 1)
    with pytest.raises(WMError):
        read_initial_z(tmp_path / "initial_z.npz", 1)
    assert not marker.exists()
