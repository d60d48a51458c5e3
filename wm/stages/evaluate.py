"""`python -m wm evaluate`: the paper's evaluation protocol (docs/paper-settings.md §9) on a fixed, recorded seed list.

    python -m wm evaluate --run runs/doom                  # trained C (best) in the real env, 100 episodes → DONE
    python -m wm evaluate --run runs/doom --random         # random policy baseline (Doom paper: 210 ± 108), no model
    python -m wm evaluate --run runs/doom --dream          # C inside M at dream.temperature (or --temperature)
    python -m wm evaluate --run runs/doom --sweep          # Doom τ table: dream and real score per τ (wm/tools/sweep.py)

The protocol (seeds, summary, files) is `wm.rollouts.evaluation`, the episodes are played by the evaluation engine
(`wm.rollouts.engine`), the GIFs drawn by its workers (`wm.rollouts.recording`); this module is the stage. Results go to
`eval/<tag>/{episodes.jsonl,summary.json,episode_000.gif}`; the default real evaluation also writes
`eval/summary.json` (read by `wm status`) and `eval/DONE`. Every other mode is a side run (`side_run`) that neither
needs nor touches DONE.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from wm.core.atomic import atomic_write_json
from wm.core.errors import WMError
from wm.core.flags import flag
from wm.core.rundir import RunDir
from wm.stages.contract import StageInput


@dataclass(frozen=True)
class Options:
    """evaluate's flags (`wm.core.flags`); None: the config's value."""

    params: str | None = flag(
        None,
        "controller parameters: best | mean (controller/<x>.npz) | a .npz path (default: evaluate.params)",
        metavar="{best,mean,FILE.npz}",
    )
    dream: bool = flag(False, "evaluate inside M (the dream) instead of the real env")
    random: bool = flag(False, "uniform random actions instead of C (needs no trained model)")
    sweep: bool = flag(False, "Doom τ table over evaluate.temperatures (dream and real)")
    sweep_runs: tuple[str, ...] = flag(
        (), "with --sweep: run dirs of controllers trained at other τ (their dream.temperature picks the row)", metavar="RUN"
    )
    episodes: int | None = flag(None, "episodes (default: evaluate.episodes)")
    seed: int | None = flag(
        None, "first seed of a side run's episodes (default: evaluate.seed); round control's checks use it"
    )
    temperature: float | None = flag(None, "dream τ (default: dream.temperature)")
    gifs: int | None = flag(None, "GIFs of the first N episodes (default: evaluate.gif_episodes)", metavar="N")
    tag: str | None = flag(None, "results folder eval/<tag> (default: real | dream | random | random-dream)")

    def __post_init__(self) -> None:
        # checked when the flags are read, before the CLI looks at DONE or the run: `--episodes 0` is not "the
        # config's 100", and `-3` is refused, not "already done"
        for name, value in (("--episodes", self.episodes), ("--gifs", self.gifs)):
            if value is not None and value < (1 if name == "--episodes" else 0):
                raise WMError(f"{name} must be >= {1 if name == '--episodes' else 0}, got {value}")


# its `[eval] 37/100 episodes … (12s, ETA 20s)` line is the progress line: the CLI adds none of its own
OWN_PROGRESS = True


def side_run(opts: Options) -> bool:
    """Everything but the default real evaluation is a side run: it neither checks nor writes eval/DONE."""
    return bool(opts.dream or opts.random or opts.sweep or (opts.tag not in (None, "real")) or opts.seed is not None)


@dataclass
class _Plan:
    """What one evaluation plays and where its results go (`_plan`)."""

    kind: str
    tag: str
    seeds: Any
    temperature: float | None  # the dream's τ the episodes play at; the summary keeps the run's own config hash
    params: Any
    extra: dict[str, Any]  # the summary's fields beside the scores
    default: bool  # the default real evaluation (eval/summary.json and DONE), not a side run
    prefix: str
    workers: int


def _plan(inp: StageInput, run: RunDir, opts: Options) -> _Plan:
    """The mode, its seeds, τ, C's parameters, the summary's extra fields and the metrics prefix, from the command."""
    from wm.rollouts.engine import kind_of
    from wm.rollouts.evaluation import MODES, input_digest, played_params, seed_list
    from wm.rollouts.world import load_world

    cfg = inp.cfg
    kind = kind_of(opts.dream, opts.random)
    dream = kind in ("dream", "random-dream")
    tag = opts.tag or kind
    episodes = int(cfg.evaluate.episodes if opts.episodes is None else opts.episodes)
    seeds = seed_list(cfg, episodes, opts.seed)
    temperature = opts.temperature
    temperature = float(cfg.dream.temperature if temperature is None else temperature) if dream else None
    params, pfile = None, None
    if kind in ("real", "dream"):
        choice = opts.params or cfg.evaluate.params
        world = load_world(inp.setup, run, need=("params",), params=played_params(run, choice))
        params, pfile = world.params, world.params_path
    extra = {"mode": MODES[kind], "config_hash": inp.config_hash, "params_file": str(pfile) if pfile else None}
    extra["env"] = cfg.env.name
    # the files played with (round control's reuse of a stored check)
    extra["inputs"] = input_digest(inp.setup, run, pfile, dream)
    if dream:
        extra["temperature"] = temperature
    default = not side_run(opts)
    prefix = "eval" if default else f"eval/{tag}"
    # the dream runs every episode in one batched graph (wm/rollouts/dream.py): one process, no TF start-up per worker
    from wm.core.procpool import worker_count

    workers = 1 if dream else worker_count(cfg.evaluate.workers)
    return _Plan(kind, tag, seeds, temperature, params, extra, default, prefix, workers)


def run(inp: StageInput, run: RunDir, opts: Options) -> None:
    """Evaluate (see the module docstring); prints and writes the summary, marks DONE for the default real mode."""
    from wm.core.metrics import make_logger
    from wm.mpi import launched_rank
    from wm.rollouts.evaluation import DRIVE_FIGURES, Progress, format_drive, format_summary, play, write_results

    if launched_rank() > 0:  # under mpirun the other ranks play rank 0's tasks (`engine.evaluate_seeds`)
        from wm.mpi.worker import main as serve

        serve()
        return
    from wm.core import tf_setup

    # TF's devices, once, before anything starts it: every mode evaluates in this process with the engine's serial
    # pool (`wm.rollouts.engine.evaluate_seeds`: TF's threads, no GPU), its GIFs drawn here too, or in worker processes
    # or ranks, which then draw the GIFs; this process keeps the GPU hidden (a later `setup(gpu=False)` after TF started
    # would raise). Decided, not imported: TF's start-up (≈ 3 s) is paid only where a model loads, so a process that
    # only dispatches to workers, or plays the random policy without a V, never pays it.
    tf_setup.decide(threads=None, gpu=False)
    if opts.sweep:
        from wm.tools import sweep

        sweep.run_sweep(inp.setup, run, opts.episodes, opts.params, opts.sweep_runs)
        return
    cfg = inp.cfg
    p = _plan(inp, run, opts)
    tag, seeds, extra, prefix = p.tag, p.seeds, p.extra, p.prefix
    with make_logger(run, "evaluate") as log:
        log.info(
            "evaluating %s (%s) on %d episodes, seeds %d…%d, %d workers",
            tag,
            extra["mode"],
            len(seeds),
            seeds[0],
            seeds[-1],
            p.workers,
        )
        t0 = time.time()
        progress = Progress(len(seeds), tag)

        def on_chunk(rets: list[float]) -> None:
            progress.update(rets)  # and `<prefix>/done` in the metrics, so the pipeline and the TUI can show progress
            log.scalars(progress.done, {f"{prefix}/done": progress.done}, console=False)

        n_gifs = min(cfg.evaluate.gif_episodes if opts.gifs is None else opts.gifs, len(seeds))
        gifs = [(seeds[i], run.eval_dir(tag) / f"episode_{i:03d}.gif") for i in range(n_gifs)]
        returns, lengths, figures = play(
            cfg, run, p.kind, p.params, seeds, p.temperature, p.workers, on_chunk, log, gifs=gifs, facts=inp.setup
        )
        extra["seconds"] = round(time.time() - t0, 1)
        summary = write_results(run, tag, seeds, returns, lengths, extra, figures)
        log.scalars(
            len(seeds),
            {
                f"{prefix}/mean": summary["mean"],
                f"{prefix}/std": summary["std"],
                f"{prefix}/episodes": summary["episodes"],
                f"{prefix}/len_mean": summary["len_mean"],
            },
            console=False,
        )
        log.info("%s: %s", tag, format_summary(summary))
        if summary.get("drive"):
            log.info("%s: %s", tag, format_drive(summary["drive"]))
        if p.default:
            atomic_write_json(run.eval_summary(), summary)
            info = {f"eval/{k}": summary[k] for k in ("episodes", "mean", "std", "min", "median", "max", "len_mean")}
            info.update({f"eval/{k}": v for k, v in (summary.get("drive") or {}).items() if k in DRIVE_FIGURES})
            run.mark_done("evaluate", {**info, **{k: summary[k] for k in ("config_hash", "params_file", "seconds")}})
