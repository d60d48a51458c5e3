"""The version ranges are written once, in pyproject.toml: a checkout reads them there, an installed wheel from its
metadata (the same ranges), and requirements.txt's tested set must lie inside them."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from wm.tools import pins

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fresh():
    """`pins.declared()` read afresh in the test, and again after it (it is cached)."""
    pins.declared.cache_clear()
    yield
    pins.declared.cache_clear()


def _project() -> dict:
    project = pins._checkout_project()
    assert project is not None, "the checkout's pyproject.toml was not read"
    return project


def _pinned(*files: str) -> dict[str, Requirement]:
    """The `name==version` lines of requirements files, by canonical name."""
    lines = [ln.strip() for f in files for ln in (ROOT / f).read_text().splitlines()]
    reqs = [Requirement(ln) for ln in lines if ln and not ln.startswith(("#", "-"))]
    return {canonicalize_name(r.name): r for r in reqs}


def test_a_checkout_reads_its_pyproject(fresh):
    project = _project()
    assert project["name"] == pins.DIST
    got = pins.declared()
    assert got == pins.from_pyproject(project)
    assert str(got.python) == project["requires-python"]
    assert got.spec("gymnasium") == next(s for s in project["dependencies"] if s.startswith("gymnasium"))


def _install_metadata(site: Path, project: dict) -> None:
    """A dist-info of the suite under `site` with the lines a wheel's build writes from `project`: Requires-Dist with
    the bounds in packaging's order (`tensorflow<2.22,>=2.21`), an extra's with its marker."""
    core = [str(Requirement(s)) for s in project["dependencies"]]
    extras = [f'{Requirement(s)}; extra == "{x}"' for x, specs in project["optional-dependencies"].items() for s in specs]
    info = site / "world_models_suite-0.0.dist-info"
    info.mkdir(parents=True)
    head = [f"Metadata-Version: 2.4\nName: {pins.DIST}\nVersion: 0.0\nRequires-Python: {project['requires-python']}"]
    extra_names = [f"Provides-Extra: {x}" for x in project["optional-dependencies"]]
    (info / "METADATA").write_text("\n".join(head + extra_names + [f"Requires-Dist: {r}" for r in core + extras]) + "\n")


def test_an_install_without_pyproject_reads_the_same_ranges_from_its_metadata(fresh, monkeypatch, tmp_path):
    project = _project()
    _install_metadata(tmp_path / "site", project)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(pins, "PYPROJECT", tmp_path / "no" / "pyproject.toml")
    wheel, checkout = pins.declared(), pins.from_pyproject(project)
    assert wheel.python == checkout.python
    names = [r.name for r in checkout.requirements]
    assert [wheel.spec(n) for n in names] == [checkout.spec(n) for n in names]
    assert wheel.spec("ale-py") == "ale-py>=0.12,<0.13" and str(wheel["ale-py"].marker) == 'extra == "atari"'


def test_neither_a_pyproject_nor_an_install_says_so(fresh, monkeypatch, tmp_path):
    monkeypatch.setattr(pins, "PYPROJECT", tmp_path / "pyproject.toml")
    monkeypatch.setattr(pins, "DIST", "world-models-suite-not-installed")
    with pytest.raises(LookupError, match="no version ranges"):
        pins.declared()


def test_another_projects_pyproject_is_not_read(fresh, monkeypatch, tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "other"\ndependencies = ["numpy==1.0"]\n')
    monkeypatch.setattr(pins, "PYPROJECT", tmp_path / "pyproject.toml")
    assert pins._checkout_project() is None


def test_a_spec_shows_lower_bounds_first_and_adds_extras():
    got = pins.Pins(SpecifierSet(">=3.10"), (Requirement("TF<2.22,>=2.21"), Requirement("gym[box2d]<1.5,>=1.4")))
    assert got.spec("tf") == "TF>=2.21,<2.22"
    assert got.spec("gym", "other") == "gym[box2d,other]>=1.4,<1.5"
    with pytest.raises(KeyError):
        got["numpy"]


def test_requirements_pins_lie_in_pyprojects_ranges():
    """requirements.txt and requirements-dev.txt pin the tested set: each pin of a package pyproject.toml names must
    lie in every range it gives that package (core and extras)."""
    declared = pins.from_pyproject(_project())
    pinned = _pinned("requirements.txt", "requirements-dev.txt")
    checked = []
    for r in declared.requirements:
        pin = pinned.get(canonicalize_name(r.name))
        if pin is None:
            continue
        (version,) = [s.version for s in pin.specifier if s.operator == "=="]
        assert r.specifier.contains(version, prereleases=True), f"{pin} lies outside pyproject.toml's {r}"
        assert pin.extras == r.extras, f"{pin} and pyproject.toml's {r} name other extras"
        checked.append(r.name)
    assert {"tensorflow", "keras", "vizdoom", "ale-py", "packaging"} <= set(checked)


def test_every_core_dependency_is_pinned_in_requirements_txt():
    pinned = _pinned("requirements.txt")
    missing = [s for s in _project()["dependencies"] if canonicalize_name(Requirement(s).name) not in pinned]
    assert not missing, f"pyproject.toml's dependencies without a pin in requirements.txt: {missing}"


def test_a_package_named_twice_in_pyproject_has_one_range():
    """The `dev` extra repeats other extras' packages: the copies must agree (doctor reads the first)."""
    first: dict[str, Requirement] = {}
    for r in pins.from_pyproject(_project()).requirements:
        seen = first.setdefault(canonicalize_name(r.name), r)
        assert (seen.specifier, seen.extras) == (r.specifier, r.extras), f"{seen} and {r}"
