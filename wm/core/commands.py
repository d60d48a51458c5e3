"""The command lines this suite builds and the arguments its stage commands share.

`add_run_args` declares `--configs/--run/--set/--force/…` for every stage and the pipeline; `resolve_config` and
`existing_run` read them the same way everywhere; `wm_command` and `stage_command` build the `python -m wm <verb> …`
lines that the pipeline, round control, the τ sweep and the TUI start as subprocesses (prefixed by the launcher's
`mpirun -n N`, `srun -n N` or template, `wm.core.launcher`, for the stages that run across ranks). The CLI's own
dispatch (`wm.cli`) sits above every package; these sit in `core` so that `rounds`, `tools` and `tui` build and read
command lines without importing the entry point.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from wm.core.errors import WMError
from wm.core.launcher import Launcher


def add_run_args(p: argparse.ArgumentParser, configs_required: bool = False) -> None:
    """The arguments every stage shares."""
    p.add_argument(
        "--configs",
        nargs="+",
        default=[],
        metavar="BLOCK",
        help="config blocks over the defaults (`wm config --blocks` lists them, `wm config --configs …` shows the "
        "result): the env's block first, then the others left to right (e.g. doom_takecover tiny); "
        "default: the run's stored config.yaml",
    )
    p.add_argument("--run", required=True, help="run directory, e.g. runs/doom")
    p.add_argument(
        "--set", nargs="+", default=[], metavar="KEY=VALUE", action="extend", help="override config keys, e.g. vae.epochs=3"
    )
    p.add_argument("--force", action="store_true", help="redo the stage even if it is DONE")
    p.add_argument(
        "--progress-every",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds between progress lines (done, elapsed, ETA); 0: none",
    )
    p.add_argument(
        "--break-lock",
        action="store_true",
        help="take over the stage's LOCK even if another host's job refreshed it lately (that job must be gone)",
    )


def wm_command(
    verb: str,
    run: str | os.PathLike[str],
    configs: Sequence[str] = (),
    sets: Sequence[str] = (),
    force: bool = False,
    python: Sequence[str] | None = None,
) -> list[str]:
    """`python -m wm <verb> --run RUN [--configs B ...] [--set k=v ...] [--force]`: the part every command line this
    suite builds shares (`stage_command`'s, the TUI's pipeline launch)."""
    argv = [*(python or [sys.executable]), "-m", "wm", verb, "--run", str(run)]
    if configs:
        argv += ["--configs", *configs]
    if sets:
        argv += ["--set", *sets]
    if force:
        argv.append("--force")
    return argv


def stage_command(
    verb: str,
    run: str | os.PathLike[str],
    configs: Sequence[str] = (),
    sets: Sequence[str] = (),
    ranks: int = 1,
    force: bool = False,
    python: Sequence[str] | None = None,
    launcher: Launcher | None = None,
    progress_every: float | None = None,
) -> list[str]:
    """The argv that runs `verb` on `run` (the pipeline's subprocesses, the sweep's and the TUI's launches).

    `python -m wm <verb> --run RUN [--configs B ...] [--set k=v ...] [--force] [--progress-every S]`, prefixed with
    `launcher.prefix(N)` (`mpirun -n N`, `srun -n N`, a template) when `ranks > 1` (the stages whose registry record
    says `ranks`: rank 0 dispatches, e.g. the CMA-ES master, the others play).

    Args:
        python: interpreter prefix (default `[sys.executable]`); tests pass a fake stage script here.
        launcher: what starts the ranks (default: `Launcher()`, the venv's mpirun; `wm.core.launcher`).
        progress_every: the stage's own progress lines (the pipeline passes 0: it prints them itself).
    """
    if ranks < 1:
        raise ValueError(f"MPI ranks must be >= 1, got {ranks}")
    from wm.core.registry import ranked

    if ranks > 1 and not ranked(verb):
        raise ValueError(f"{verb} does not run across MPI ranks")
    argv = wm_command(verb, run, configs, sets, force, python)
    if progress_every is not None:
        argv += ["--progress-every", f"{progress_every:g}"]
    if ranks > 1:
        argv = [*(launcher or Launcher()).prefix(ranks), *argv]
    return argv


def resolve_config(args: argparse.Namespace):
    """The config of a command: `--configs` blocks (or the run's stored config), then `--set`."""
    from wm.core import config as C
    from wm.core.rundir import RunDir

    run = RunDir(args.run)
    if args.configs:
        return C.load(args.configs, args.set)
    base = run.load_config() or C.defaults()  # the stored config over the defaults
    return C.check(C.update(base, C.parse_set(args.set), source="--set"))


def nearest_run(path: os.PathLike[str] | str) -> str | None:
    """The run beside `path` (a folder of the same parent with a config.yaml) whose name is closest to its name."""
    import difflib
    from pathlib import Path

    path = Path(path)
    parent = path.parent
    runs = [p.name for p in parent.iterdir() if (p / "config.yaml").exists()] if parent.is_dir() else []
    close = difflib.get_close_matches(path.name, runs, n=1)
    return str(parent / close[0]) if close else None


def existing_run(run) -> None:
    """Refuse a run directory that holds no run (no config.yaml) for a command without `--configs` (the only way a run
    starts), naming the nearest run beside it: a typo in `--run` must not create a folder or start a run."""
    if run.config_path.exists():
        return
    close = nearest_run(run.path)
    hint = (
        f"; did you mean {close!r}?"
        if close
        else " (a run starts with --configs, e.g. pipeline --configs doom_takecover small --run …)"
    )
    raise WMError(f"no run in {run.path}: it has no config.yaml{hint}")


def missing_run(path: os.PathLike[str] | str) -> WMError:
    """The one line for a run directory that is not there (`status`, `report`, `export`), with the nearest run."""
    close = nearest_run(path)
    return WMError(f"run directory {path} does not exist" + (f"; did you mean {close!r}?" if close else ""))
