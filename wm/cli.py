"""`python -m wm <verb>`: one subcommand per stage, plus status and tools.

Importing this module must stay cheap: no TensorFlow, gymnasium, ViZDoom, cma or MPI at the top of any
module reached from here (stage modules import those inside `run`). A verb is listed only when its module
exists, so verbs appear as the stages land.

Stage modules (`wm/stages/<x>.py`) expose `run(cfg: Config, run: RunDir, args: argparse.Namespace) -> None`
and optionally `add_args(parser)`. Tool modules expose `main(args) -> int` and optionally `add_args(parser)`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence

# verb, module, kind ("stage" runs inside the run-dir protocol, "tool" is its own main), one-line help
VERBS: tuple[tuple[str, str, str, str], ...] = (
    ("status", "wm.status", "tool", "print each stage's state and key figures"),
    ("collect", "wm.stages.collect", "stage", "roll out the data policy, write episodes/*.npz"),
    ("data", "wm.stages.data_check", "tool", "dataset tools: `data check` summarises episodes/ and bad files"),
    ("train-vae", "wm.stages.train_vae", "stage", "train V (ConvVAE) on the episodes, streamed"),
    ("encode", "wm.stages.encode", "stage", "encode every episode with V into series/ (mu, logvar)"),
    ("train-mdnrnn", "wm.stages.train_mdnrnn", "stage", "train M (MDN-RNN) on series/"),
    ("train-controller", "wm.stages.train_controller", "stage", "train C with CMA-ES (run under mpirun for workers)"),
    ("evaluate", "wm.stages.evaluate", "stage", "evaluate C over N fixed-seed episodes"),
    ("report", "wm.stages.report", "tool", "write the run's Markdown report with plots"),
    ("pipeline", "wm.stages.pipeline", "tool", "run every stage in order, skipping finished ones"),
)


# Verbs whose stage always loads TensorFlow: it is imported first with its C++ start-up noise muted.
TF_VERBS = ("train-vae", "encode", "train-mdnrnn", "train-controller", "evaluate")


def available_verbs() -> list[tuple[str, str, str, str]]:
    return [v for v in VERBS if importlib.util.find_spec(v[1]) is not None]


def add_run_args(p: argparse.ArgumentParser, configs_required: bool = False) -> None:
    """The arguments every stage shares."""
    p.add_argument("--configs", nargs="+", default=[], metavar="BLOCK",
                   help="config blocks merged left to right over configs/base.yaml (e.g. doom_takecover tiny); "
                        "default: the run's stored config.yaml")
    p.add_argument("--run", required=True, help="run directory, e.g. runs/doom")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", action="extend",
                   help="override config keys, e.g. vae.epochs=3")
    p.add_argument("--force", action="store_true", help="redo the stage even if it is DONE")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m wm", description="World Models (Ha & Schmidhuber 2018) on TF2/Keras 3.")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb, module, kind, help_ in available_verbs():
        p = sub.add_parser(verb, help=help_, description=help_)
        mod = importlib.import_module(module)
        if kind == "stage":
            add_run_args(p)
        if hasattr(mod, "add_args"):
            mod.add_args(p)
        p.set_defaults(_module=module, _kind=kind)
    return parser


def resolve_config(args: argparse.Namespace):
    """The config of a command: `--configs` blocks (or the run's stored config), then `--set`."""
    from wm import config as C
    from wm.rundir import RunDir

    run = RunDir(args.run)
    if args.configs:
        return C.load(args.configs, args.set)
    stored = run.load_config()
    base = stored if stored is not None else C.defaults()
    return C.update(C.update(C.defaults(), base.to_dict(), source=str(run.config_path)), C.parse_set(args.set), source="--set")


def run_stage(module: str, args: argparse.Namespace) -> int:
    from mpi import launched_rank, launched_size  # reads the launcher's environment; imports no mpi4py
    from wm.rundir import RunDir

    mod = importlib.import_module(module)
    run = RunDir(args.run)
    verb = args.verb

    if launched_rank() > 0:
        # MPI worker ranks only evaluate: rank 0 alone binds the config, holds the LOCK and writes DONE.
        if run.is_done(verb) and not args.force:
            return 0
        mod.run(resolve_config(args), run, args)
        return 0
    if launched_size() > 1 and not (run.is_done(verb) and not args.force):
        # The workers are already waiting for the master: whatever stops rank 0 early must release them,
        # or the job hangs in MPI start-up (a refused config, a held LOCK, a missing upstream artifact).
        try:
            return _run_stage_here(mod, run, verb, args)
        except BaseException:
            from mpi import release_workers

            release_workers()
            raise
    return _run_stage_here(mod, run, verb, args)


def _run_stage_here(mod, run, verb: str, args: argparse.Namespace) -> int:
    from wm.rundir import stage

    cfg = run.bind_config(resolve_config(args), verb)
    # A stage may declare that some invocations are side runs that neither check nor touch its DONE
    # (e.g. `evaluate --random`, `evaluate --dream`): `def side_run(args) -> bool`.
    if getattr(mod, "side_run", None) is not None and mod.side_run(args):
        run.stage_dir(verb).mkdir(parents=True, exist_ok=True)
        mod.run(cfg, run, args)
        return 0
    if run.is_done(verb) and not args.force:
        print(f"{verb}: already done in {run.path} (use --force to redo)")
        return 0
    if args.force:
        run.clear_done(verb)
    run.stage_dir(verb).mkdir(parents=True, exist_ok=True)
    with run.lock(stage(verb).verb):
        mod.run(cfg, run, args)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from wm.errors import WMError

    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.verb:
        parser.print_help()
        return 0
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.verb in TF_VERBS:
        from wm.tf_setup import quiet_import

        quiet_import()
    try:
        if args._kind == "stage":
            return run_stage(args._module, args)
        return int(importlib.import_module(args._module).main(args) or 0)
    except WMError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
