"""What starts a stage with several MPI ranks (collect, train-controller, evaluate: the registry's `ranks`): the `Launcher`.

Three kinds, each a command prefix that the stage's python command follows (`wm.core.commands.stage_command`):

    mpirun     [mpirun, *extra, "-n", N]    the venv's mpirun (the mpich wheel's), else PATH's; or any program
                                            that takes `-n N` (`--launcher mpiexec`, `--launcher /opt/mpi/bin/mpirun`)
    srun       ["srun", *extra, "-n", N]    Slurm; the PMI type goes in the extra args (`--mpi=pmi2`)
    template   the user's command line with {n} replaced by N, split like a shell would (shlex), then *extra:
               `"mpiexec -f hosts -n {n} --bind-to core"`

`pipeline`, `sweep run` and the TUI take `--launcher` and `--launcher-args` (`add_launcher_args`, read with
`from_args`); without the flags they read `WM_LAUNCHER` and `WM_LAUNCHER_ARGS` (set once in a batch script).
Cheap to import: no TensorFlow, no mpi4py.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from wm.core.errors import WMError

KINDS = ("mpirun", "srun", "template")
ENV = "WM_LAUNCHER"  # the launcher when --launcher is not given
ENV_ARGS = "WM_LAUNCHER_ARGS"  # its extra args when neither --launcher nor --launcher-args is given
_PLACEHOLDER = re.compile(r"\{[^{}]*\}")


def mpirun_path() -> str:
    """The `mpirun` next to this venv's python (the mpich wheel installs it there), else the one on PATH."""
    here = Path(sys.executable).with_name("mpirun")
    return str(here) if here.exists() else shutil.which("mpirun") or "mpirun"


@dataclass(frozen=True)
class Launcher:
    """How `N` ranks are started: `prefix(N)` is the argv before the python command.

    Attributes:
        kind: "mpirun" (`program -n N`-style), "srun" or "template".
        program: mpirun: the binary ("" = `mpirun_path()`, looked up when the command is built); srun: "srun";
            template: the command line holding `{n}`.
        extra: extra args: after the program (mpirun, srun) or after the template's words.
    """

    kind: str = "mpirun"
    program: str = ""
    extra: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise WMError(f"launcher kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        object.__setattr__(self, "extra", tuple(self.extra))
        if self.kind == "template":
            _template_words(self.program, 1)  # refused now, not when the first ranked stage starts

    @classmethod
    def parse(cls, text: str | None, extra: Sequence[str] | str = ()) -> Launcher:
        """`None`/"mpirun" → mpirun; "srun" → srun; a string holding `{n}` → template; any other single word → that
        program used mpirun-style. `extra` is a list of args, or one string split with shlex."""
        args = tuple(_split(extra, "launcher args") if isinstance(extra, str) else extra)
        if text is None or text.strip() == "mpirun":
            return cls("mpirun", "", args)
        text = text.strip()
        if text == "srun":
            return cls("srun", "srun", args)
        if "{n}" in text:
            return cls("template", text, args)
        words = _split(text, f"launcher {text!r}")
        if len(words) != 1:
            what = "names no program" if not words else "has arguments but no {n}"
            raise WMError(
                f"launcher {text!r} {what}: give mpirun, srun, a program, or a template holding {{n}} "
                f"(e.g. 'mpiexec -f hosts -n {{n}}'); extra args go in --launcher-args"
            )
        return cls("mpirun", words[0], args)

    def prefix(self, ranks: int) -> list[str]:
        """The argv that starts `ranks` ranks of the command that follows it."""
        if ranks < 1:
            raise ValueError(f"MPI ranks must be >= 1, got {ranks}")
        if self.kind == "template":
            return [*_template_words(self.program, ranks), *self.extra]
        return [self.program or mpirun_path(), *self.extra, "-n", str(ranks)]


def _split(text: str, what: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as e:  # an unbalanced quote
        raise WMError(f"{what} {text!r}: {e}") from None


def _template_words(template: str, ranks: int) -> list[str]:
    """The template's words with `{n}` = ranks; one line for a template without `{n}` or with another placeholder."""
    if "{n}" not in template:
        raise WMError(f"launcher template {template!r} has no {{n}} (where the number of ranks goes)")
    others = sorted({m for m in _PLACEHOLDER.findall(template) if m != "{n}"})
    if others:
        raise WMError(
            f"launcher template {template!r}: only {{n}} is replaced, not {', '.join(others)} "
            "(the python command follows the template)"
        )
    return _split(template.replace("{n}", str(ranks)), "launcher template")


def add_launcher_args(p: argparse.ArgumentParser) -> None:
    """`--launcher` and `--launcher-args`: what starts the ranked stages' ranks (collect, train-controller, evaluate;
    round control's real checks, the τ table); read them with `from_args`."""
    p.add_argument(
        "--launcher",
        default=None,
        metavar="LAUNCHER",
        help="what starts the MPI ranks of collect, train-controller and evaluate: mpirun (the venv's, else PATH's), "
        "srun, a program run as `PROGRAM -n N`, or a template holding {n}, e.g. 'mpiexec -f hosts -n {n}'; "
        f"default: ${ENV}, else mpirun",
    )
    p.add_argument(
        "--launcher-args",
        default=None,
        metavar="ARGS",
        help="extra launcher args as one string, e.g. '-f hosts --bind-to core' (one dash-led word takes '=': "
        f"--launcher-args=--mpi=pmi2); default: ${ENV_ARGS} when --launcher is not given",
    )


def from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Launcher:
    """The Launcher of `--launcher`/`--launcher-args` (absent attributes count as not given), else of `WM_LAUNCHER`/
    `WM_LAUNCHER_ARGS`. With `--launcher` given the environment is not read (its args belong to its launcher)."""
    env = os.environ if environ is None else environ
    text, extra = getattr(args, "launcher", None), getattr(args, "launcher_args", None)
    if text is not None:
        return _named(text, extra, "--launcher", "--launcher-args")
    text = env.get(ENV) or None
    if extra is not None:
        return _named(text, extra, ENV if text else "--launcher", "--launcher-args")
    return _named(text, env.get(ENV_ARGS, ""), ENV if text else "--launcher", ENV_ARGS)


def from_env(environ: Mapping[str, str] | None = None) -> Launcher:
    """The Launcher of `WM_LAUNCHER`/`WM_LAUNCHER_ARGS` (mpirun when unset)."""
    return from_args(argparse.Namespace(), environ)


def _named(text: str | None, extra: str, where: str, where_args: str) -> Launcher:
    """`Launcher.parse`, its one-line refusal naming the flag or variable it came from."""
    extra_words = _split(extra, where_args) if extra else []
    try:
        return Launcher.parse(text, extra_words)
    except WMError as e:
        raise WMError(f"{where}: {e}") from None
