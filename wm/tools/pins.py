"""The version ranges the suite declares, read from the one place they are written: pyproject.toml's `[project]`
`requires-python`, `dependencies` and `optional-dependencies`.

A checkout (an editable install included) has that file beside the `wm` folder, and it is read as it is now: the
metadata an editable install wrote is a copy from install time. An installed wheel has no pyproject.toml: its
metadata is read instead (`Requires-Python`, and the `Requires-Dist` lines the build wrote from the same file, the
extras' with their `extra == "…"` marker). Python 3.10 has no `tomllib`: there the file is read with `tomli` where it
is installed (pytest, of requirements-dev.txt, brings it), else the installed metadata, if any, is read.
"""

from __future__ import annotations

import functools
import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

DIST = "world-models-suite"  # pyproject.toml's [project] name, the distribution's (a test checks they agree)
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"  # in a checkout; an install has none there


@dataclass(frozen=True)
class Pins:
    """The Python versions the suite admits, and its requirements: the core's first, then each extra's."""

    python: SpecifierSet
    requirements: tuple[Requirement, ...]

    def __getitem__(self, dist: str) -> Requirement:
        """The first requirement on distribution `dist` (any spelling of its name); KeyError when none names it."""
        name = canonicalize_name(dist)
        found = next((r for r in self.requirements if canonicalize_name(r.name) == name), None)
        if found is None:
            raise KeyError(dist)
        return found

    def spec(self, dist: str, *extras: str) -> str:
        """`dist`'s requirement as pip takes it, with `extras` added: `gymnasium[box2d]>=1.4,<1.5` (lower bounds
        first, whichever order the source wrote; no marker)."""
        r = self[dist]
        extra = ",".join(sorted({*r.extras, *extras}))
        bounds = sorted(r.specifier, key=lambda s: (s.operator.startswith("<"), str(s)))
        return r.name + (f"[{extra}]" if extra else "") + ",".join(map(str, bounds))


def from_pyproject(project: dict) -> Pins:
    """The pins of a parsed pyproject.toml's `[project]` table."""
    groups = [project.get("dependencies", []), *project.get("optional-dependencies", {}).values()]
    return Pins(SpecifierSet(project.get("requires-python", "")), tuple(Requirement(s) for g in groups for s in g))


def from_metadata(dist: str | None = None) -> Pins:
    """The pins of the installed distribution `dist` (default `DIST`; PackageNotFoundError when it is not installed)."""
    dist = dist or DIST
    meta = importlib.metadata.metadata(dist)
    requires = importlib.metadata.requires(dist) or []
    return Pins(SpecifierSet(meta.get("Requires-Python") or ""), tuple(Requirement(s) for s in requires))


def _checkout_project() -> dict | None:
    """pyproject.toml's `[project]` table beside `wm/`; None in an install (no such file, or another project's), and
    on Python 3.10 without tomli."""
    if not PYPROJECT.is_file():
        return None
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            return None
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8")).get("project", {})
    return project if project.get("name") == DIST else None


@functools.cache
def declared() -> Pins:
    """This suite's pins: its checkout's pyproject.toml, else its installed metadata (see the module's doc)."""
    project = _checkout_project()
    if project is not None:
        return from_pyproject(project)
    try:
        return from_metadata()
    except importlib.metadata.PackageNotFoundError:
        raise LookupError(
            f"no version ranges: {DIST} is not installed and no pyproject.toml beside wm/ could be read "
            "(Python 3.10 reads it with tomli: pip install tomli)"
        ) from None
