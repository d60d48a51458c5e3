"""The Doom temperature table (docs/paper-settings.md §9): dream and real scores of controllers per τ.

Train-free sweep (`python -m wm evaluate --run runs/doom --sweep`): the run's controller is re-evaluated in the
dream at every τ of `evaluate.temperatures` and once in the real env (its real score does not depend on τ, so it
is evaluated once and repeated per row). The full reproduction trains one controller per τ, each in its own run
dir that shares the upstream stages' files (collect, V, encode, M) by hard link:

    python -m wm sweep prepare --run runs/doom --taus 0.1 0.5 1.0 1.15 1.3     # → runs/doom-tau0.1, …
    python -m wm train-controller --run runs/doom-tau0.1                         # one per τ (under mpirun)
    python -m wm evaluate --run runs/doom --sweep --sweep-runs runs/doom-tau*    # the table, each row its own C

or all three steps in one resumable command (a rerun skips the finished τ runs):

    python -m wm sweep run --run runs/doom --taus 0.1 0.5 1.0 1.15 1.3 --mpi 3

(`--launcher srun`, `--launcher-args`, a template: each τ's train-controller starts as `wm.core.launcher` says.)

A row uses the controller of the `--sweep-runs` dir whose `dream.temperature` equals τ, else the run's own one.
Results: `eval/temperature_sweep.{json,md}`.
"""

from __future__ import annotations

import argparse
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wm.core.atomic import atomic_write_json, atomic_write_text
from wm.core.bounded import read_json
from wm.core.config import Config, update
from wm.core.copying import copy_tree
from wm.core.errors import WMError
from wm.core.launcher import Launcher, add_launcher_args
from wm.core.launcher import from_args as launcher_from_args
from wm.core.registry import stages_with_role
from wm.core.rundir import RunDir
from wm.envs.setup import Setup
from wm.rollouts.evaluation import pm
from wm.tools.paper import paper_row


def format_table(rows: list[dict[str, Any]]) -> str:
    """The paper's table in Markdown: τ, dream score ± std, real score ± std, then the paper's two columns."""
    out = [
        "| τ | dream score | real score | episodes | controller | paper dream | paper real |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p = paper_row(r["temperature"])
        pd, pr = ("—", "—") if p is None else (f"{p[0][0]:.0f} ± {p[0][1]:.0f}", f"{p[1][0]:.0f} ± {p[1][1]:.0f}")
        ctrl = f"{r['controller_run']} (trained at τ {r['trained_temperature']:g})"
        out.append(
            f"| {r['temperature']:g} | {pm(r.get('dream'))} | {pm(r.get('real'))} | {r['episodes']} | {ctrl} | {pd} | {pr} |"
        )
    out += ["", "Paper (§9): random policy 210 ± 108 in the real env; scores are steps survived, ± is the std over episodes."]
    return "\n".join(out) + "\n"


def controller_sources(cfg: Config, run: RunDir, temperatures: list[float], sweep_runs: list[str]) -> dict[float, RunDir]:
    """For each τ the run dir whose controller plays that row: a sweep run trained at τ, else `run` itself."""
    trained: dict[float, RunDir] = {}
    for path in sweep_runs:
        other = RunDir(path)
        ocfg = other.load_config()
        if ocfg is None:
            raise WMError(f"--sweep-runs: {other.config_path} not found")
        trained[ocfg.dream.temperature] = other
    return {t: next((r for k, r in trained.items() if abs(k - t) < 1e-6), run) for t in temperatures}


def run_sweep(
    facts: Setup,
    run: RunDir,
    episodes: int | None = None,
    params: str | None = None,
    sweep_runs: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Evaluate each τ of `evaluate.temperatures` in the dream and in the real env; write the table files.

    Args:
        facts: the run's setup; its whole config is what the sweep compares other runs' with.
        episodes: episodes per row (None: `evaluate.episodes`).
        params: the controller each row plays, `best` | `mean` | a .npz path (None: `evaluate.params`).
        sweep_runs: run dirs of controllers trained at other τ (`controller_sources`).
    """
    from wm.core.metrics import make_logger
    from wm.core.procpool import worker_count
    from wm.envs.setup import setup
    from wm.rollouts.engine import job_pool
    from wm.rollouts.evaluation import Progress, play, played_params, seed_list, summarize
    from wm.rollouts.world import load_world

    cfg = facts.cfg
    temps = [float(t) for t in cfg.evaluate.temperatures]
    if not temps:
        raise WMError("evaluate.temperatures is empty")
    episodes = episodes or cfg.evaluate.episodes
    seeds = seed_list(cfg, episodes)
    sources = controller_sources(cfg, run, temps, list(sweep_runs))
    real_cache: dict[str, dict[str, Any]] = {}
    rows: list[dict[str, Any]] = []
    # under mpirun/srun one MPI pool plays every row's real episodes (each controller its own context): a closed pool
    # has stopped the worker ranks
    with make_logger(run, "evaluate") as log, job_pool(cfg.es.task_timeout, log) as pool:
        for i, tau in enumerate(temps):
            src = sources[tau]
            scfg = cfg if src is run else (src.load_config() or cfg)
            world = load_world(setup(scfg), src, need=("params",), params=played_params(src, params or scfg.evaluate.params))
            theta, pfile = world.params, world.params_path  # C's parameters (the `params` argument names their file)
            log.info("τ %g: controller %s (trained at τ %g)", tau, pfile, scfg.dream.temperature)
            # the dream evaluator batches every episode in one graph: one process is fastest (wm/rollouts/dream.py)
            prog = Progress(len(seeds), f"τ {tau:g} dream")
            rets, lens, _ = play(scfg, src, "dream", theta, seeds, temperature=tau, workers=1, progress=prog.update, log=log)
            dream = summarize(rets, lens)
            if str(pfile) not in real_cache:
                prog = Progress(len(seeds), f"τ {tau:g} real")
                workers = worker_count(cfg.evaluate.workers)
                rets, lens, _ = play(
                    scfg, src, "real", theta, seeds, workers=workers, progress=prog.update, log=log, pool=pool
                )
                real_cache[str(pfile)] = summarize(rets, lens)
            real = real_cache[str(pfile)]
            rows.append(
                {
                    "temperature": tau,
                    "episodes": len(seeds),
                    "dream": dream,
                    "real": real,
                    "controller_run": str(src.path),
                    "params_file": str(pfile),
                    "trained_temperature": scfg.dream.temperature,
                    "paper": paper_row(tau),
                }
            )
            log.scalars(
                i,
                {"eval/sweep/temperature": tau, "eval/sweep/dream_mean": dream["mean"], "eval/sweep/real_mean": real["mean"]},
                console=False,
            )
            log.info("τ %g: dream %s, real %s", tau, pm(dream), pm(real))
    atomic_write_json(run.artifact("tau_sweep"), {"seeds": seeds, "config_hash": cfg.hash(), "rows": rows})
    table = format_table(rows)
    atomic_write_text(run.artifact("tau_sweep_table"), "# DoomTakeCover temperature sweep\n\n" + table)
    print(table, end="")
    return rows


# ---------------------------------------------------------------- one run dir per τ


def tau_run_path(src: RunDir, tau: float) -> Path:
    """`runs/doom` → `runs/doom-tau1.15`."""
    return src.path.parent / f"{src.path.name}-tau{tau:g}"


def prepare_tau_run(src: RunDir, tau: float, dest: str | os.PathLike[str] | None = None) -> RunDir:
    """A run dir that trains C at τ on `src`'s data, V and M: the upstream stage folders are hard-linked copies
    (`wm.core.copying.copy_tree`), their metrics are copied (for the report) and `config.yaml` is `src`'s with
    `dream.temperature = τ`.

    The upstream stages must be DONE in `src`.
    """
    cfg = src.load_config()
    if cfg is None:
        raise WMError(f"{src.config_path} not found")
    missing = [s.verb for s in stages_with_role("data", "world") if not src.is_done(s.verb)]
    if missing:
        raise WMError(f"{src.path}: stages {', '.join(missing)} are not done; finish them before preparing τ runs")
    dst = RunDir(dest or tau_run_path(src, tau))
    if dst.config_path.exists():
        raise WMError(f"{dst.path} already exists; remove it or pick another destination")
    return _make_tau_run(src, cfg, tau, dst)


def reuse_or_prepare(src: RunDir, tau: float) -> RunDir:
    """`prepare_tau_run`, or the τ run already there when it was made from `src` at τ (what `sweep run` resumes)."""
    dst = RunDir(tau_run_path(src, tau))
    if not dst.config_path.exists():
        return prepare_tau_run(src, tau)
    cfg, have = src.load_config(), dst.load_config()
    want = None if cfg is None else update(cfg, {"dream": {"temperature": float(tau)}}, source=f"τ {tau:g}")
    if want is None or have is None or _shaping(have) != _shaping(want):
        raise WMError(f"{dst.path} exists but is not {src.path}'s config at τ {tau:g}; remove it to sweep again")
    return dst


def _shaping(cfg: Config) -> dict:
    """The settings that shape a τ run's C: all but the sections any run may change later (`evaluate`, which
    `sweep run` itself sets on the source run, and wm.core.registry.FREE_SECTIONS)."""
    from wm.core.config import flatten
    from wm.core.registry import FREE_SECTIONS

    skip = ("evaluate", *FREE_SECTIONS)
    return {k: v for k, v in flatten(cfg.to_dict()).items() if k.split(".")[0] not in skip}


def _make_tau_run(src: RunDir, cfg: Config, tau: float, dst: RunDir) -> RunDir:
    dst.path.mkdir(parents=True, exist_ok=True)
    for verb in (s.verb for s in stages_with_role("data", "world")):
        folder = dst.stage_dir(verb)
        if not folder.exists():
            # hard links: the τ run shares the data's bytes but not its folders, so no link leads out of it and
            # nothing it writes (every write is a new file renamed into place) reaches the source
            copy_tree(src.stage_dir(verb), folder, hard_links=True)
        m = src.metrics_path(verb)
        if m.exists():
            dst.metrics_path(verb).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(m, dst.metrics_path(verb))
    new = update(cfg, {"dream": {"temperature": float(tau)}}, source=f"τ {tau:g}")
    atomic_write_text(dst.config_path, new.to_yaml())
    return dst


def add_args(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="cmd", required=True, metavar="CMD")
    q = sub.add_parser("prepare", help="symlink a run's collect/V/encode/M into <run>-tau<τ> with dream.temperature=τ")
    q.add_argument("--run", required=True)
    q.add_argument("--taus", nargs="+", type=float, default=None, help="default: the run's evaluate.temperatures")
    r = sub.add_parser("run", help="prepare the τ runs, train C in each (resumable), then write the τ table")
    r.add_argument("--run", required=True)
    r.add_argument("--taus", nargs="+", type=float, default=None, help="default: the run's evaluate.temperatures")
    r.add_argument(
        "--mpi",
        type=int,
        default=1,
        help="each τ's train-controller and the τ table's real episodes on N MPI ranks, under `mpirun -n N` or --launcher's",
    )
    add_launcher_args(r)
    r.add_argument("--episodes", type=int, default=None, help="episodes per row (default evaluate.episodes)")
    r.add_argument("--force", action="store_true", help="play the table again even if it already holds these rows")


def table_is_current(src: RunDir, taus: Sequence[float], made: Sequence[RunDir], episodes: int) -> bool:
    """Whether `src`'s τ table already has these rows: one per τ of `taus` in order, each played by the C of its τ run
    in `made` over `episodes` episodes, and written after every one of those C's parameter files."""
    try:
        table = src.artifact("tau_sweep")
        doc, written = read_json(table), table.stat().st_mtime
        rows = doc["rows"]
        have = [(float(r["temperature"]), Path(r["controller_run"]).resolve(), int(r["episodes"])) for r in rows]
        newest = max(Path(r["params_file"]).stat().st_mtime for r in rows)
    except (OSError, WMError, ValueError, KeyError, TypeError):
        return False
    want = [(float(t), d.path.resolve(), int(episodes)) for t, d in zip(taus, made, strict=True)]
    return have == want and newest <= written


def run_all(
    src: RunDir,
    taus: list[float],
    mpi: int,
    episodes: int | None,
    launcher: Launcher | None = None,
    force: bool = False,
    cfg: Config | None = None,
) -> int:
    """`sweep run`: each τ run prepared (or reused), its C trained unless DONE (with `mpi` ranks started by
    `launcher`, default mpirun), then `evaluate --sweep` over them (under the same ranks), unless the table already
    holds these rows (`table_is_current`; `force` plays it again). `cfg`: `src`'s config, when the caller has read it.

    The table's rows are the τ of `--taus` (passed to evaluate as `evaluate.temperatures`, which no artifact
    depends on), each played by the C trained at that τ."""
    import subprocess
    import time

    from wm.core.commands import stage_command
    from wm.core.format import duration

    made = [reuse_or_prepare(src, t) for t in taus]
    for tau, dst in zip(taus, made, strict=True):
        if dst.is_done("train-controller"):
            print(f"[sweep] τ {tau:g}: C already trained in {dst.path}, skipped", flush=True)
            continue
        cmd = stage_command("train-controller", dst.path, ranks=mpi, launcher=launcher)
        print(f"[sweep] τ {tau:g}: {' '.join(cmd)}", flush=True)
        t0 = time.time()
        if subprocess.run(cmd).returncode != 0 or not dst.is_done("train-controller"):
            raise WMError(f"train-controller failed in {dst.path}; see its log, rerun the same command to resume")
        print(f"[sweep] τ {tau:g}: trained in {duration(time.time() - t0)}", flush=True)
    cfg = cfg or src.load_config()
    n = episodes or (cfg.evaluate.episodes if cfg is not None else 0)
    if not force and table_is_current(src, taus, made, n):
        print(f"[sweep] the table is already written ({src.artifact('tau_sweep')}): skipped; --force plays it again")
        return 0
    temps = "evaluate.temperatures=[" + ", ".join(f"{t:g}" for t in taus) + "]"
    # the table's real episodes over the same ranks as the training (evaluate --sweep keeps one MPI pool for its rows)
    cmd = [*stage_command("evaluate", src.path, sets=[temps], ranks=mpi, launcher=launcher), "--sweep"]
    cmd += ["--sweep-runs", *(str(d.path) for d in made)] + (["--episodes", str(episodes)] if episodes else [])
    print(f"[sweep] the table: {' '.join(cmd)}", flush=True)
    return subprocess.run(cmd).returncode


def main(args: argparse.Namespace) -> int:
    """`python -m wm sweep prepare|run --run runs/doom --taus 0.1 0.5 1.0 1.15 1.3`: one run dir per τ."""
    launcher = launcher_from_args(args) if args.cmd == "run" else None  # a bad one refused before anything is made
    src = RunDir(args.run)
    cfg = src.load_config()
    taus = args.taus or (list(cfg.evaluate.temperatures) if cfg is not None else [])
    if not taus:
        raise WMError(f"no τ to sweep: give --taus (no evaluate.temperatures in {src.config_path})")
    if args.cmd == "run":
        return run_all(src, taus, args.mpi, args.episodes, launcher, args.force, cfg)
    made = [prepare_tau_run(src, t) for t in taus]
    for d in made:
        print(f"python -m wm train-controller --run {d.path}")
    print(f"python -m wm evaluate --run {src.path} --sweep --sweep-runs " + " ".join(str(d.path) for d in made))
    return 0
