"""`wm.core.flags`: a stage's flags are the fields of its `Options`, declared once with `flag`."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from wm.core.flags import add_flags, flag


@dataclasses.dataclass(frozen=True)
class _Options:
    new_knob: int | None = flag(None, "a knob added to Options and nowhere else", metavar="N")
    rate: float = flag(0.5, "a float with a default")
    name: str | None = flag(None, "a string, as given", choices=("a", "b"))
    loud: bool = flag(False, "a switch")
    runs: tuple[str, ...] = flag((), "one or more", metavar="RUN")
    sizes: tuple[int, ...] = flag((), "zero or more ints", nargs="*")
    force: bool = False  # the shared flag, already on the parser


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="wm stage")
    p.add_argument("--force", action="store_true", help="the shared flag")
    add_flags(p, _Options)
    return p


def test_every_field_declared_with_flag_is_a_flag_with_its_help_and_default():
    p = _parser()
    text = p.format_help()
    for f in dataclasses.fields(_Options):
        if f.name != "force":
            assert f"--{f.name.replace('_', '-')}" in text and f.metadata["wm.flag"]["help"] in text, f.name
    assert "--new-knob N" in text and "--name {a,b}" in text and "--runs RUN [RUN ...]" in text
    assert [a.dest for a in p._actions] == [
        "help",
        "force",
        "new_knob",
        "rate",
        "name",
        "loud",
        "runs",
        "sizes",
    ]  # field order
    ns = p.parse_args([])
    assert vars(ns) == {"force": False, "new_knob": None, "rate": 0.5, "name": None, "loud": False, "runs": [], "sizes": []}


def test_each_field_type_parses_as_its_flag_says():
    argv = ["--new-knob", "3", "--rate", "2", "--name", "b", "--loud", "--runs", "x", "y", "--sizes", "1", "2", "--force"]
    ns = _parser().parse_args(argv)
    assert vars(ns) == {
        "force": True,
        "new_knob": 3,
        "rate": 2.0,
        "name": "b",
        "loud": True,
        "runs": ["x", "y"],
        "sizes": [1, 2],
    }
    assert isinstance(ns.rate, float)
    with pytest.raises(SystemExit):
        _parser().parse_args(["--new-knob", "x"])  # an int flag refuses what is not an int
    with pytest.raises(SystemExit):
        _parser().parse_args(["--name", "c"])  # choices are passed through


def test_a_field_no_flag_fills_is_refused_when_the_parser_is_built():
    @dataclasses.dataclass(frozen=True)
    class Options:
        force: bool = False  # no --force on this parser, and not declared with flag

    with pytest.raises(TypeError, match=r"Options\.force: no flag of the command line fills it"):
        add_flags(argparse.ArgumentParser(), Options)


@pytest.mark.parametrize(
    "annotation, default, problem",
    [(bool, True, "default must be False"), (dict, None, "no flag for a field of type")],
)
def test_a_field_that_cannot_be_a_flag_is_refused(annotation, default, problem):
    Options = dataclasses.make_dataclass("Options", [("x", annotation, flag(default, "x"))], frozen=True)
    with pytest.raises(TypeError, match=rf"Options\.x: .*{problem}"):
        add_flags(argparse.ArgumentParser(), Options)
