"""A stage's command-line flags, declared once: as the fields of its `Options` dataclass.

    @dataclass(frozen=True)
    class Options:
        workers: int | None = flag(None, "override collect.workers for this invocation only")
        force: bool = False  # the shared --force (wm.core.commands.add_run_args)

`flag` puts the flag's help (and any other `add_argument` keyword: metavar, nargs, choices) in the field's
metadata; `add_flags` makes one `--<name>` flag per such field, in field order, its kind read from the field's type.
So the dataclass that `run` and the hooks read cannot drift from the flags that fill it. Only the standard library:
the CLI builds every parser for `--help`, which must stay free of TensorFlow.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any

FLAG = "wm.flag"  # the metadata key of a field declared with `flag`
SCALARS = (int, float, str)


def flag(default: Any, help: str, **argparse_kwargs: Any) -> Any:
    """A field of a stage's `Options` that is also its flag `--<name>` (`add_flags`): `default` is both the field's
    and the flag's, `help` and `argparse_kwargs` (metavar, nargs, choices, …) go to `add_argument` as they are."""
    return dataclasses.field(default=default, metadata={FLAG: {"help": help, **argparse_kwargs}})


def add_flags(p: argparse.ArgumentParser, options: type) -> None:
    """Add a flag to `p` for each field of the dataclass `options` declared with `flag`, in field order. A field
    declared without it must be one of the flags `p` already has (a shared one: `--force`); one that no flag fills
    is refused here, naming it, so a stage that forgot a flag fails when its parser is built, not at a user's run."""
    hints = typing.get_type_hints(options)
    have = {a.dest for a in p._actions}
    for f in dataclasses.fields(options):
        where = f"{options.__module__}.{options.__qualname__}.{f.name}"
        if FLAG not in f.metadata:
            if f.name not in have:
                raise TypeError(f"{where}: no flag of the command line fills it (declare it with flag(default, help))")
            continue
        # what `flag` was given wins over what the type says (a tuple's nargs="*", say)
        kwargs = {**_argparse_kwargs(where, hints[f.name], f.default), **f.metadata[FLAG]}
        p.add_argument("--" + f.name.replace("_", "-"), **kwargs)


def _argparse_kwargs(where: str, tp: Any, default: Any) -> dict[str, Any]:
    """What the field's type says of its flag: a bool is a switch off by default, `X | None` and `X` parse an X (str:
    as given), `tuple[X, ...]` takes one or more (argparse gives a list, `wm.core.registry.options` a tuple)."""
    args = typing.get_args(tp)
    if tp is bool:
        if default is not False:
            raise TypeError(f"{where}: a bool flag is a switch (store_true), its default must be False")
        return {"action": "store_true"}
    if typing.get_origin(tp) is tuple and len(args) == 2 and args[1] is Ellipsis and args[0] in SCALARS:
        return {"nargs": "+", "default": list(default), **({} if args[0] is str else {"type": args[0]})}
    if len(args) == 2 and type(None) in args:  # X | None: None is the default that means "not given"
        tp = next(a for a in args if a is not type(None))
    if tp in SCALARS:
        return {"default": default, **({} if tp is str else {"type": tp})}
    raise TypeError(f"{where}: no flag for a field of type {tp!r} (bool, int, float, str, X | None, tuple[X, ...])")
