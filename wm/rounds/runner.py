"""Running one run directory's stages, each as its own subprocess (`run_stages`), with a progress line while one
runs; which stage a pass runs to under round control (`pass_last`) and the result pass's evaluation. What the
pipeline's command line asks of a pass (`--force`, `--mpi`, the launcher, `--progress-every`, `--until`) comes in one
`PassOptions`, built once by `wm.tools.pipeline`."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from wm.core.commands import stage_command
from wm.core.config import Config
from wm.core.errors import RunFailed, WMError
from wm.core.format import duration
from wm.core.launcher import Launcher
from wm.core.progress import progress_line, stage_progress
from wm.core.registry import STAGES
from wm.core.rundir import RunDir
from wm.rounds.iterate import evaluates_result_only
from wm.rounds.record import result_pass


@dataclass(frozen=True)
class PassOptions:
    """What the pipeline's command line asks of each pass's stages (`wm.tools.pipeline.pass_options` builds it).

    Attributes:
        force: `--force`: redo the stages that are DONE (their DONE is cleared before each runs).
        mpi: `--mpi N`: the ranked stages (collect, train-controller, evaluate; the registry's `ranks`) and round
            control's real checks run with N ranks when N > 1; 0 (the flag's default) or 1: one process.
        launcher: what starts those ranks (`--launcher`, `--launcher-args`, else `WM_LAUNCHER`; default mpirun).
        progress_every: `--progress-every`: seconds between the progress lines printed while a stage runs.
        until: `--until`: the last stage the first pass runs (None: every stage).
    """

    force: bool = False
    mpi: int = 0
    launcher: Launcher = field(default_factory=Launcher)
    progress_every: float = 30.0
    until: str | None = None


def run_stage(
    cmd: list[str], run: RunDir, cfg: Config, verb: str, tag: str, every: float, tick: Callable[[], None] | None = None
) -> int:
    # The stage stays in the pipeline's process group: Ctrl-C in the terminal, or a kill of the group (the TUI's
    # stop), reaches both. A SIGTERM sent to the pipeline alone is passed on to the stage, which checkpoints.
    start = time.time()
    p0 = stage_progress(run, cfg, verb)
    proc = subprocess.Popen(cmd)
    previous = signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGTERM))
    last = start
    try:
        while True:
            try:
                rc = proc.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.time()
            if now - last >= every:
                last = now
                print(progress_line(tag, stage_progress(run, cfg, verb), p0, now - start), flush=True)
                if tick:
                    tick()
    except KeyboardInterrupt:
        proc.wait()  # the stage got the same SIGINT and is checkpointing; rerun resumes
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    if rc < 0 and -rc == signal.SIGTERM:
        raise RunFailed(f"stage {verb} stopped by SIGTERM; rerun the same command to resume")
    return rc


def run_stages(
    run: RunDir,
    cfg: Config,
    opts: PassOptions,
    timings: dict[str, float],
    label: str = "",
    before: dict[str, Callable[[], None]] | None = None,
    tick: Callable[[], None] | None = None,
    last: str | None = None,
) -> None:
    """Every stage of one run directory in order: DONE ones skipped, others run (or resumed) as subprocesses.
    `before[verb]()` runs just before `verb` does (not when it is skipped); it stops the run by raising WMError.
    `tick()` runs with every progress line and after every stage that ran (`RunClock.tick`). The stages after `last`
    (or `--until`'s) do not run (`pass_last`). The stages that run across ranks (the registry's `ranks`: collect,
    train-controller, evaluate) run under `opts.mpi` ranks when above 1, started by `opts.launcher` (a
    `wm.core.launcher.Launcher`; default mpirun)."""
    for i, st in enumerate(STAGES, 1):
        tag = f"{label}[{i}/{len(STAGES)}] {st.verb}"
        if run.is_done(st.verb) and not opts.force:
            print(f"{tag}: done, skipped", flush=True)
        else:
            if before and st.verb in before:
                before[st.verb]()
            if opts.force:
                run.clear_done(st.verb)
            state = run.state(st.verb)
            word = "resuming" if state == "resumable" else "running"
            ranks = opts.mpi if st.ranks and opts.mpi > 1 else 1
            launcher = opts.launcher  # pipeline.main parsed it from the flags
            # the stage's progress lines are printed here (progress_every=0)
            cmd = stage_command(st.verb, run.path, ranks=ranks, launcher=launcher, progress_every=0)
            shown = len(launcher.prefix(ranks)) + 4 if ranks > 1 else 4  # the launcher, then `python -m wm <verb>`
            print(f"{tag}: {word}: {' '.join(cmd[:shown])} …", flush=True)
            start = time.time()
            rc = run_stage(cmd, run, cfg, st.verb, tag, opts.progress_every, tick)
            timings[f"{label.strip('[] ')}/{st.verb}" if label else st.verb] = elapsed = time.time() - start
            if rc != 0 or not run.is_done(st.verb):
                why = "refused" if rc == 2 else "failed"  # a refusal (exit 2) stays a usage error for the pipeline too
                raise (WMError if rc == 2 else RunFailed)(
                    f"stage {st.verb} {why} (exit {rc}); see {run.log_path(st.verb)} — rerun the same command to resume"
                )
            print(f"{tag}: done in {duration(elapsed)}", flush=True)
            if tick:
                tick()
        if (opts.until or last) == st.verb:
            return


def pass_last(cfg: Config, opts: PassOptions) -> str | None:
    """The last stage a pass runs as the rounds go: train-controller with `iterate.evaluate_passes: result` under round
    control (the checks score every pass; only the run's result plays the evaluation episodes, `evaluate_result`),
    else every stage (None)."""
    on = evaluates_result_only(cfg) and cfg.iterate.rounds > 0 and not opts.until
    return "train-controller" if on else None


def evaluate_result(run: RunDir, opts: PassOptions, timings: dict[str, float]) -> None:
    """`iterate.evaluate_passes: result`: the evaluate stage of the pass round control chose (`rounds.json`), the only
    one that runs it; a pass evaluated already is skipped as any DONE stage."""
    name, where, _ = result_pass(run)
    label = "" if where.path == run.path else f"[round {name.removeprefix('round')}] "
    print(f"[rounds] the run's result, {name}'s C, plays the evaluation episodes", flush=True)
    # every other stage of the pass is DONE; --force redid the first pass's, not this
    run_stages(where, where.load_config(), replace(opts, force=False), timings, label)
