"""`python -m wm pipeline`: collect → train-vae → encode → train-mdnrnn → train-controller → evaluate.

Each stage runs as its own subprocess (`python -m wm <verb> --run …`; the controller with `--mpi N` under
`mpirun -n N`, or `--launcher`'s `srun -n N` or template: `wm.core.launcher`), so a crash or a kill of one stage
leaves the others' artifacts intact and TensorFlow memory is returned between stages. Stages already DONE are
skipped; an interrupted one resumes (each stage resumes itself). While a stage runs, a progress line with elapsed
time and ETA is printed from the run directory.

With `iterate.rounds: N` the first pass is followed by N rounds of iterative training (`wm.rounds.iterate`): round k
is prepared in `<run>/round<k>/` and its stages run the same way (V is linked, so its train-vae is skipped).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from wm.core.commands import add_run_args, existing_run, resolve_config
from wm.core.errors import WMError
from wm.core.format import duration
from wm.core.launcher import add_launcher_args
from wm.core.launcher import from_args as launcher_from_args
from wm.core.registry import STAGES
from wm.core.rundir import RunDir, round_dirs
from wm.envs.setup import setup
from wm.es.rules import check_fitness
from wm.rounds.control import RunClock, run_rounds
from wm.rounds.iterate import check_seeds, round_config
from wm.rounds.record import result_pass
from wm.rounds.runner import PassOptions, pass_last, run_stages
from wm.rounds.workclock import rates as work_rates


def add_args(p: argparse.ArgumentParser) -> None:
    add_run_args(p)
    p.add_argument(
        "--mpi",
        type=int,
        default=0,
        metavar="N",
        help="run collect, train-controller and evaluate with N MPI ranks, under `mpirun -n N` or --launcher's "
        "(rank 0 dispatches: the CMA-ES master; N-1 ranks play)",
    )
    add_launcher_args(p)
    p.add_argument("--until", default=None, choices=[s.verb for s in STAGES], help="stop after this stage")
    p.add_argument(
        "--demo", action="store_true", help="also evaluate the random and dream baselines, write the report, print the table"
    )


def _demo_table(run: RunDir, rounds: list[RunDir] = ()) -> None:
    """Random policy vs trained C (first pass and every round), in the real game and in the run's own dream."""
    first = "C, first pass" if rounds else "trained C"
    rows = [
        ("random policy", run, "real", "random"),
        ("random policy", run, "dream", "random-dream"),
        (first, run, "real", "real"),
        (first, run, "dream", "dream"),
    ]
    for k, child in enumerate(rounds, 1):
        rows += [(f"C, round {k}", child, "real", "real"), (f"C, round {k}", child, "dream", "dream")]
    found = {r.path: {e["tag"]: e for e in r.evaluations()} for r in (run, *rounds)}
    result = result_pass(run)[1].path
    cfg = run.load_config()
    score = f"{setup(cfg).family.score_label if cfg is not None else 'steps survived':<14}"
    print(f"\n  policy            env     {score} (mean ± std)  episodes")
    for label, where, mode, tag in rows:
        s = found[where.path].get(tag)
        if s is not None:
            score = f"{s['mean']:.1f} ± {s['std']:.1f}"
            mark = "  ← the run's result" if rounds and tag == "real" and where.path == result else ""
            print(f"  {label:<17} {mode:<7} {score:<28} {s['episodes']}{mark}")
    report = run.report_path
    gifs = sorted(str(p) for p in run.path.rglob("*.gif"))
    print(f"\n  run directory: {run.path}\n  report:        {report if report.exists() else '(not written)'}")
    for g in gifs:
        print(f"  gif:           {g}")


def pass_options(args: argparse.Namespace) -> PassOptions:
    """What the command line asks of every pass's stages (`wm.rounds.runner.PassOptions`), read once: `--force`,
    `--mpi`, the launcher (`--launcher`/`--launcher-args`, else `WM_LAUNCHER`), `--progress-every`, `--until`."""
    if args.mpi == 1 or args.mpi < 0:
        raise WMError(f"--mpi must be 0 (no MPI) or >= 2 (rank 0 dispatches, the others play), got {args.mpi}")
    return PassOptions(
        force=bool(args.force),
        mpi=int(args.mpi),
        launcher=launcher_from_args(args),
        progress_every=float(args.progress_every),
        until=args.until,
    )


def main(args: argparse.Namespace) -> int:
    # parsed once, before anything touches the run dir; every ranked start (the first pass's, the rounds') uses it
    opts = pass_options(args)
    run = RunDir(args.run)
    if not args.configs:  # only --configs starts a run: a typo in --run must not start hours of work from the defaults
        existing_run(run)
    cfg = resolve_config(args)
    if cfg.iterate.rounds > 0 and not opts.until:
        # a round's bad settings (iterate.set, learned_set) stop it now, not after the first pass
        first = round_config(cfg, 1, learned=bool(cfg.iterate.learned_set))
        check_fitness(first, setup(first).family)
    # round control with a target: what tells a pass that plays from one that does not (learned_set)
    targeted = cfg.iterate.check_episodes > 0 and cfg.iterate.target_ratio > 0
    if cfg.iterate.learned_set and not targeted:
        raise WMError(
            "iterate.learned_set applies after a pass whose real check reaches iterate.target_ratio × random: "
            "it needs round control (iterate.check_episodes > 0) and iterate.target_ratio > 0, "
            "or set 'iterate.learned_set=[]'"
        )
    if cfg.iterate.clock == "work":  # its choices and evaluate_passes' are config.RULES'
        work_rates(cfg)  # one line now when they price nothing, not after the first pass
    if cfg.iterate.evaluate_passes == "result" and cfg.iterate.rounds > 0 and cfg.iterate.check_episodes <= 0:
        raise WMError(
            "iterate.evaluate_passes=result evaluates only the pass round control picks: it needs "
            "iterate.check_episodes > 0, or set 'iterate.evaluate_passes=all'"
        )
    if cfg.iterate.final_check > 0:
        if cfg.iterate.check_episodes <= 0:
            raise WMError(
                "iterate.final_check picks among the passes round control checked: it needs "
                "iterate.check_episodes > 0, or set 'iterate.final_check=0'"
            )
        # its seeds overlap the evaluation's: one line now, not at the end
        check_seeds(cfg, cfg.iterate.final_check + max(cfg.iterate.final_more, 0))
    cfg = run.bind_config(cfg, None)
    if opts.force and (old := round_dirs(run.path)):
        raise WMError(
            f"--force would redo {run.path} under rounds built on its old models ({old[0].name}…); "
            f"move or delete {run.path}/round* first"
        )
    t0 = time.time()
    timings: dict[str, float] = {}
    clock = RunClock.of(run, cfg, t0, fresh=opts.force)
    clock.enter("first pass")
    run_stages(run, cfg, opts, timings, tick=clock.tick, last=pass_last(cfg, opts))
    rounds = [] if opts.until else run_rounds(run, cfg, opts, timings, t0, clock)
    # the stages' times are on disk before the demo's report reads them (its per-pass time column)
    now = time.time()
    rec = {"time": now, "total_s": round(now - t0, 1), **{k: round(v, 1) for k, v in timings.items()}}
    with open(run.timings_path, "a") as f:
        f.write(json.dumps(rec) + "\n")
    if args.demo:
        # with evaluate_passes: result only the result's C plays the 100 dream episodes too (the checks have the rest)
        only = None
        if pass_last(cfg, opts):
            only = result_pass(run)[1].path
        extra = [
            (run, "random baseline in the real game", ["evaluate", "--random"]),
            (run, "random baseline in the dream", ["evaluate", "--random", "--dream", "--tag", "random-dream"]),
        ]
        if only in (None, run.path):
            extra.append((run, "trained controller in the dream", ["evaluate", "--dream"]))
        for k, child in enumerate(rounds, 1):
            if only in (None, child.path):
                extra.append((child, f"round {k}: trained controller in its dream", ["evaluate", "--dream"]))
            extra.append((child, f"round {k}: report", ["report"]))
        extra.append((run, "run report", ["report"]))  # last: its per-pass table reads every round's dream evaluation
        for where, what, verb_args in extra:
            print(f"[demo] {what}", flush=True)
            subprocess.run([sys.executable, "-m", "wm", *verb_args, "--run", str(where.path)], check=True)
        _demo_table(run, rounds)
    total = time.time() - t0
    ran = ", ".join(f"{k} {duration(v)}" for k, v in timings.items())
    print(f"pipeline finished in {duration(total)}: {ran}" if ran else f"pipeline: every stage of {run.path} was done already")
    return 0
