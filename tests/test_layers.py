"""The direction of imports docs/architecture.md draws: a package imports only packages below it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# docs/architecture.md's picture, bottom up; packages on one floor may import each other
FLOORS = (("core", "agents", "configs"), ("envs",), ("data", "models", "es"), ("rollouts", "mpi"), ("stages",))
FLOORS += (("rounds",), ("tools",), ("cli", "__main__"), ("tui",))
FLOOR = {pkg: k for k, names in enumerate(FLOORS) for pkg in names}
# imports inside a function that go up, each on purpose (docs/architecture.md names them)
LAZY_UP = {
    ("wm.core.procpool", "wm.mpi.pool"),  # core starts the MPI pools
    ("wm.core.tf_setup", "wm.mpi"),  # … and asks whether it runs under mpirun
    ("wm.stages.evaluate", "wm.tools"),  # evaluate --sweep runs the τ sweep
}


def modules() -> dict[str, Path]:
    out = {}
    for folder, prefix in (("wm", "wm"), ("mpi", "wm.mpi"), ("tui", "wm.tui")):
        for p in (ROOT / folder).rglob("*.py"):
            parts = p.relative_to(ROOT / folder).with_suffix("").parts
            out[".".join([prefix, *parts]).removesuffix(".__init__")] = p
    return out


def package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "wm" and len(parts) > 1 else None


def upward(tree: ast.AST, me: str) -> list[tuple[str, int, bool]]:
    """(module imported, line, at module level) of every import of a package above `me`'s."""
    found = []
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
            names += [f"{node.module}.{a.name}" for a in node.names if node.module == "wm"]
        else:
            continue
        for name in names:
            theirs = package(name)
            if theirs in FLOOR and FLOOR[theirs] > FLOOR[package(me)]:
                found.append((name, node.lineno, id(node) in top))
    return found


def test_every_import_goes_down_or_is_a_named_exception():
    mods = modules()
    assert len(mods) > 100 and all(package(m) in FLOOR for m in mods if package(m))
    bad = []
    for mod, path in sorted(mods.items()):
        if package(mod) is None:
            continue
        for name, line, top in upward(ast.parse(path.read_text()), mod):
            if top or (mod, name) not in LAZY_UP:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not bad, "\n".join(bad)


def test_the_check_sees_an_upward_import():
    tree = ast.parse("from wm.cli import main\n\ndef f():\n    from wm.tools import report\n")
    assert upward(tree, "wm.rounds.control") == [("wm.cli", 1, True), ("wm.tools", 4, False)]
    assert upward(tree, "wm.cli") == []
