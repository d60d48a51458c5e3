"""`python -m wm <verb>`: one subcommand per stage, plus status and tools.

Importing this module must stay cheap: no TensorFlow, gymnasium, ViZDoom, cma or MPI at the top of any
module reached from here (stage modules import those inside `run`). The verbs come from the stage registry
(`wm.core.registry`).

Stage modules (`wm/stages/<x>.py`) expose `Options` (a frozen dataclass of the flags the stage reads, which are
built from its fields: `wm.core.flags`) and `run(cfg: Config, run: RunDir, opts: Options) -> None`; `run_stage`
builds the `Options` from the parsed flags once (`wm.core.registry.options`). Tool modules expose
`main(args) -> int` and optionally `add_args(parser)`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from wm.core.commands import add_run_args, existing_run, resolve_config
from wm.core.errors import WMError
from wm.core.flags import add_flags
from wm.core.registry import StageHooks, hooks, load_stage, options

if TYPE_CHECKING:
    from wm.core.registry import Stage, Tool


def available_verbs() -> list[Stage | Tool]:
    """The registered verbs (wm.core.registry), in `--help` order."""
    from wm.core.registry import VERBS

    return list(VERBS)


def build_parser() -> argparse.ArgumentParser:
    from wm import __version__

    parser = argparse.ArgumentParser(prog="wm", description="World Models (Ha & Schmidhuber 2018) on TF2/Keras 3.")
    parser.add_argument("--version", action="version", version=f"wm {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for v in available_verbs():
        p = sub.add_parser(v.verb, help=v.help, description=v.help)
        mod = load_stage(v.verb) if v.kind == "stage" else importlib.import_module(v.module)
        if v.kind == "stage":
            # first: the shared flags come before the stage's own in --help, and fill Options' plain fields (force)
            add_run_args(p)
            add_flags(p, mod.Options)
        elif hasattr(mod, "add_args"):
            mod.add_args(p)
        p.set_defaults(_module=v.module, _kind=v.kind)
    return parser


@dataclass(frozen=True)
class Plan:
    """What a stage command does, decided once from its flags and the run before anything runs; every step after
    reads it instead of asking the stage's hooks again."""

    verb: str
    mod: ModuleType
    opts: Any  # the stage's typed flags (`Options`): what its run and hooks read
    hooks: StageHooks
    # a DONE stage runs again: `--force` (afresh), or an invocation the stage declares continues it from its
    # checkpoint (`def continues(opts) -> bool`, e.g. train-controller's `--extend`, which --force would delete)
    redo: bool
    # a side run (`def side_run(opts) -> bool`, e.g. `evaluate --random`): neither checks nor touches DONE, no LOCK
    side: bool
    done: bool  # the stage was DONE when the command started

    @property
    def skips(self) -> bool:
        """A finished stage that this command does not run again: nothing to do, on any rank."""
        return self.done and not self.redo and not self.side

    @property
    def redo_hint(self) -> str:
        """How to run a finished stage again: `--force`, plus what the stage adds (`REDO_HINT`, e.g. --extend)."""
        return "use --force to redo" + (f", {self.hooks.redo_hint}" if self.hooks.redo_hint else "")


def plan(args: argparse.Namespace, run) -> Plan:
    mod = load_stage(args.verb)
    opts = options(mod, args)
    h = hooks(mod)
    return Plan(
        verb=args.verb,
        mod=mod,
        opts=opts,
        hooks=h,
        redo=bool(args.force or (h.continues is not None and h.continues(opts))),
        side=h.side_run is not None and bool(h.side_run(opts)),
        done=run.is_done(args.verb),
    )


def run_stage(args: argparse.Namespace) -> int:
    from wm.core.rundir import RunDir
    from wm.mpi import launched_rank, launched_size  # reads the launcher's environment; imports no mpi4py
    from wm.stages.contract import stage_input

    run = RunDir(args.run)
    p = plan(args, run)
    if launched_rank() > 0:
        # MPI worker ranks only play or evaluate: rank 0 alone binds the config, holds the LOCK and writes DONE.
        if p.skips:
            return 0
        p.mod.run(stage_input(resolve_config(args), p.verb), run, p.opts)
        return 0
    if launched_size() > 1 and not p.skips:
        # The workers are already waiting for the master: whatever ends rank 0 must release them, or the job hangs
        # (a refused config, a held LOCK, a missing upstream artifact, or a stage that needed no pool, e.g. a
        # dream evaluation that batches every episode on rank 0). Once a pool has stopped them this is a no-op.
        try:
            return _refusal_writes_nothing(p, run, args)
        finally:
            from wm.mpi import release_workers

            release_workers()
    return _refusal_writes_nothing(p, run, args)


def _refusal_writes_nothing(p: Plan, run, args: argparse.Namespace) -> int:
    """Run the stage; when it refuses (a `WMError` that is not a `RunFailed`), take back what the command wrote
    about itself (config.yaml, its log, metrics and TensorBoard files, empty folders: `wm.core.rollback.Snapshot`)."""
    from wm.core.errors import RunFailed, WMError
    from wm.core.rollback import Snapshot

    snap = Snapshot(run.path, run.stage_dir(p.verb))
    try:
        return _run_stage_here(p, run, args)
    except WMError as e:
        if not isinstance(e, RunFailed):
            snap.restore()
        raise


def _run_stage_here(p: Plan, run, args: argparse.Namespace) -> int:
    """Run the stage here (rank 0, or alone): `args` for the CLI's shared flags (--run, --configs, --set,
    --break-lock, --progress-every), the plan for the stage and its hooks."""
    import logging

    from wm.core.rundir import STAGES
    from wm.stages.contract import stage_input

    verb = p.verb
    # A log line that cannot be written (a full disk) must not print logging's own traceback ("--- Logging
    # error ---") to the console: the failure comes out as one `error:` line from the write that raises.
    logging.raiseExceptions = False
    if not args.configs:  # only --configs starts a run (a refusal takes it back): a typo in --run creates nothing
        existing_run(run)
    cfg = resolve_config(args)  # reads only: a typo in --set has written nothing
    if p.side:
        busy = [s.verb for s in STAGES if run.lock_owner(s.verb) is not None]
        changes = run.config_changes(cfg) if busy else []
        if changes:  # a side run takes no LOCK: it must not rewrite the config a running stage has bound
            raise WMError(
                f"{verb} would change {run.config_path.name} ({changes[0]}) while {busy[0]} runs in {run.path}: "
                "wait for it to finish, or run without --set"
            )
        cfg = run.bind_config(cfg, verb)
        run.stage_dir(verb).mkdir(parents=True, exist_ok=True)
        p.mod.run(stage_input(cfg, verb), run, p.opts)
        return 0
    # The LOCK first, then the config, then anything else: a command refused because the stage is
    # running, or for its config, has changed nothing on disk (the LOCK removes the folders it created).
    with run.lock(verb, break_lock=bool(getattr(args, "break_lock", False))):
        if run.is_done(verb) and not p.redo:  # asked again under the LOCK: another command may have finished it
            run.bind_config(cfg, verb, write=False)  # a conflicting config is still refused; a change is not applied
            changes = run.config_changes(cfg)
            unapplied = f"; not applied: {', '.join(changes[:4])}{' …' if len(changes) > 4 else ''}" if changes else ""
            print(f"{verb}: already done in {run.path} ({p.redo_hint}){unapplied}")
            return 0
        if p.redo and p.hooks.check_redo is not None:
            # a stage may refuse a rerun it cannot do (`def check_redo(inp, run, opts)`), before anything is written
            p.hooks.check_redo(stage_input(run.bind_config(cfg, verb, write=False), verb), run, p.opts)
        cfg = run.bind_config(cfg, verb)
        if p.redo:
            run.clear_done(verb)
        # `.tmp-*` files in the stage's folder can only be torn writes of a killed run now that we hold its LOCK
        # (a stage with side runs has them write into subfolders without it, so it is cleaned at its top level only)
        run.remove_temporaries(verb, recursive=p.hooks.side_run is None)
        with _progress(p, run, cfg, args):
            p.mod.run(stage_input(cfg, verb), run, p.opts)
    return 0


def _progress(p: Plan, run, cfg, args: argparse.Namespace):
    """The progress line with ETA of a stage run on its own (`wm.core.progress.Ticker`), unless the stage prints
    its own (`OWN_PROGRESS`, evaluate's per-episode line) or `--progress-every 0` (the pipeline's stages)."""
    from wm.core.progress import Ticker

    every = 0.0 if p.hooks.own_progress else float(getattr(args, "progress_every", 0.0) or 0.0)
    return Ticker(run, cfg, p.verb, every)


# Verbs that only read the run they are given: they may open an agent shipped inside the package (wm/agents/).
READS_ONLY = ("status", "play", "reference")


def refuse_writes_into_the_package(args: argparse.Namespace) -> None:
    """A verb that would write into an agent shipped inside the installed package (its folder may not even be
    writable, and the next install replaces it) is refused, saying how to copy the agent out."""
    agents = (Path(__file__).resolve().parent / "agents").resolve()
    for where in (getattr(args, "run", None), getattr(args, "out", None)):
        if where is None or (where == getattr(args, "run", None) and args.verb in READS_ONLY):
            continue
        path = Path(where).resolve()
        if path == agents or agents in path.parents:
            name = path.relative_to(agents).parts[0] if path != agents else "doom_small_s2"
            raise WMError(
                f"{where} is inside the package's shipped agents (read-only): copy it out first, "
                f"e.g. wm agents copy {name} runs/{name}, then run {args.verb} on runs/{name}"
            )


def refuse_open_trees(args: argparse.Namespace) -> None:
    """Every run directory a command is given must be a closed tree (`wm.core.bounded.closed_tree`): a link inside it
    that leads out would carry the command's writes, appends, deletes and reads outside the run."""
    from wm.core.bounded import closed_tree

    runs = getattr(args, "runs", None)  # results' run directories (doctor's --runs is the folder runs go to)
    for where in (getattr(args, "run", None), *(runs if isinstance(runs, list) else ())):
        if where is not None and Path(where).is_dir():
            closed_tree(where)


def tf_first(loads_tf: bool) -> None:
    """TensorFlow's devices before anything else: an MPI worker rank decides one thread and no GPU now, before TF
    is imported (it never probes CUDA, and nothing it loads later can see the GPU); rank 0 and serial processes
    leave the decision to the stage's `run` (wm.core.tf_setup). A verb that loads TF mutes its C++ start-up noise
    on the first import, wherever the verb's work reaches it (a random-policy evaluation never does)."""
    from wm.mpi import launched_rank

    if launched_rank() > 0:
        from wm.core.tf_setup import decide

        decide(threads=1, gpu=False)
    if loads_tf:
        from wm.core import tf_setup

        tf_setup.keras_on_tensorflow()  # before any Keras import: its backend is fixed then
        tf_setup.quiet_on_first_import()


def main(argv: Sequence[str] | None = None) -> int:
    """The `wm` command. Exit 0 on success, 1 when a run fails (a full disk, a crashed worker), 2 for a usage error
    or a refused input (argparse's own code: a bad flag, a bad config value, a missing upstream stage); each error is
    one `error:` line. A closed pipe (`wm status | head -1`) ends the command quietly."""
    try:
        rc = _main(argv)
        sys.stdout.flush()  # here, not at the interpreter's exit, so that a closed pipe is caught below
        return rc
    except BrokenPipeError:
        # the reader went away: point stdout at /dev/null so the interpreter's final flush cannot raise again
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell tool killed by the closed pipe reports


def _main(argv: Sequence[str] | None) -> int:
    from wm.core.errors import RunFailed, WMError
    from wm.core.registry import verb

    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.verb:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: name a verb (wm --help lists them)", file=sys.stderr)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        refuse_writes_into_the_package(args)
        refuse_open_trees(args)
    except WMError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    tf_first(verb(args.verb).tf)
    try:
        if args._kind == "stage":
            return run_stage(args)
        return int(importlib.import_module(args._module).main(args) or 0)
    except WMError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1 if isinstance(e, RunFailed) else 2
    except OSError as e:
        # A write outside the atomic writes (a log, a metrics line, a folder) on a full, read-only or forbidden
        # disk, also when it comes back from a worker process: one line, not a traceback. Any other
        # OSError is a bug to see in full.
        import errno

        if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        from wm.core.errors import describe_os_error

        where = e.filename if e.filename is not None else f"a file in {args.run}" if getattr(args, "run", None) else None
        print(f"error: {describe_os_error(e, where)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
