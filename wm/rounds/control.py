"""Round control: each pass's C checked on the check seeds (and the dream gate before a round trains C), the
rounds run while the checks say so, on the run's clock (`RunClock`), and the final check that picks the result."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from wm.core.atomic import atomic_write_json
from wm.core.bounded import read_json, read_json_or
from wm.core.commands import stage_command
from wm.core.config import Config
from wm.core.errors import WMError
from wm.core.launcher import Launcher
from wm.core.rundir import RunDir
from wm.rollouts.evaluation import pooled_mean
from wm.rounds.iterate import (
    PassCheck,
    below_target,
    check_seeds,
    clock_prefix,
    final_candidates,
    gate_verdict,
    learned_round,
    next_explore,
    prepare_round,
    previous_pass,
    result_index,
    round_dir,
    stop_reason,
)
from wm.rounds.record import round_checks, write_rounds
from wm.rounds.runner import PassOptions, evaluate_result, pass_last, run_stages
from wm.rounds.workclock import WorkLedger


@dataclass(frozen=True)
class CheckRanks:
    """How round control's checks start `evaluate`: the real-game ones over `ranks` MPI ranks started by `launcher`
    (the pipeline's `--mpi` and `--launcher`), so one cluster job spreads them as it spreads collect and C; the dream
    ones in one process (the dream batches every episode in one graph on rank 0: more ranks would only wait)."""

    ranks: int = 1
    launcher: Launcher | None = None

    def command(self, where: RunDir, verb_args: list[str]) -> list[str]:
        ranks = 1 if "--dream" in verb_args else max(1, int(self.ranks))
        return [*stage_command("evaluate", where.path, ranks=ranks, launcher=self.launcher), *verb_args]


# set by `run_rounds` for the rounds' length (`checks_over`): the checks, the dream gate and the final check read it
_CHECK_RANKS: ContextVar[CheckRanks | None] = ContextVar("check_ranks", default=None)


@contextmanager
def checks_over(ranks: int, launcher: Launcher | None = None) -> Iterator[None]:
    """Round control's checks run `evaluate` over `ranks` ranks (`CheckRanks`) inside this block."""
    token = _CHECK_RANKS.set(CheckRanks(ranks, launcher))
    try:
        yield
    finally:
        _CHECK_RANKS.reset(token)


def _evaluate(where: RunDir, verb_args: list[str]) -> None:
    subprocess.run((_CHECK_RANKS.get() or CheckRanks()).command(where, verb_args), check=True)


def _check_mean(
    where: RunDir,
    cfg: Config,
    tag: str,
    what: str,
    n: int | None = None,
    *,
    params: Path | None = None,
    random: bool = False,
    dream: bool = False,
    skip: int = 0,
    reuse: str | None = None,
) -> float:
    """Mean of `evaluate` on the check seeds (`n` of them, default `iterate.check_episodes`, after the first `skip`)
    under `--tag <tag>`: C of `params` (default `evaluate.params`) or the random policy, in the real game or the dream.
    Reused when already there for these seeds and played with the same files (`input_digest`: V, M, C, the dream's
    settings). `reuse`: a tag whose stored episodes, played with the same files, are the first of these seeds (the
    final check's first 30 are the short check's, bit for bit): only the seeds after them play, under `tag`, and the
    mean is over all."""
    from wm.envs.setup import setup
    from wm.rollouts.evaluation import input_digest, played_params

    seeds = check_seeds(cfg, n, skip)
    own = where.load_config() or cfg
    pfile = None if random else played_params(where, cfg.evaluate.params if params is None else str(params))
    # `evaluate` digests under `where`'s stored config (a round's learned_set may change dream.*), so the match does too
    inputs = input_digest(setup(own), where, pfile, dream)

    def stored(t: str, want: list[int] | None) -> dict | None:
        s = read_json_or(where.eval_summary(t))
        if not isinstance(s, dict):
            return None
        ok = s.get("inputs") == inputs and isinstance(s.get("seeds"), list) and (want is None or s["seeds"] == want)
        return s if ok else None

    s = stored(tag, seeds)
    if s is not None:
        return float(s["mean"])
    first = stored(reuse, None) if reuse else None
    head = first["seeds"] if first else []
    k = len(head) if len(head) < len(seeds) and head == seeds[: len(head)] else 0
    rest = stored(tag, seeds[k:]) if k else None
    if rest is None:
        note = f"; the first {k} are its {reuse} episodes" if k else ""
        print(f"[check] {what} on {len(seeds) - k} episodes (seeds {seeds[k]}…{note})", flush=True)
        extra = ["--dream"] * dream + ["--random"] * random + ([] if params is None else ["--params", str(params)])
        _evaluate(where, [*extra, "--tag", tag, "--seed", str(seeds[k]), "--episodes", str(len(seeds) - k), "--gifs", "0"])
        rest = read_json(where.eval_summary(tag))
    return pooled_mean((k, first["mean"]), (len(seeds) - k, rest["mean"])) if k else float(rest["mean"])


def check_pass(where: RunDir, cfg: Config, name: str) -> PassCheck:
    """Round control's check of one pass's C: `iterate.check_episodes` real episodes on the check seeds and the same
    seeds in its own dream (`eval/check`, `eval/check-dream`)."""
    real = _check_mean(where, cfg, "check", f"{name}: C, real")
    dream = _check_mean(where, cfg, "check-dream", f"{name}: C, dream", dream=True)
    return PassCheck(name, str(where.path), real, dream)


def random_check(run: RunDir, cfg: Config) -> float:
    """The random policy's mean real score on the check seeds (`eval/check-random`): round control's yardstick."""
    if cfg.iterate.target_ratio <= 0:
        return 0.0
    return _check_mean(run, cfg, "check-random", "random policy, real", random=True)


def dream_gate(run: RunDir, prev: RunDir, child: RunDir, cfg: Config) -> None:
    """`iterate.dream_gate`: before `child` (a round) trains C in its dream, the previous pass's C and the random policy
    play the gate's episodes in the real game and in `child`'s new dream (eval/gate-*); stops the pipeline with one
    line when the dream does not show the real game's difference between them (`gate_verdict`).

    The previous C plays the real game with `child`'s V and M, as it does in the dream: C reads M's h, and a new M's h
    is not the one it was trained on."""
    n = cfg.iterate.dream_gate
    if n <= 0 or cfg.es.fitness != "dream":
        return
    prev_c = prev.params("best")
    c_real = _check_mean(child, cfg, "gate-real", "dream gate: previous C with the new M, real", n, params=prev_c)
    # with round control on the same number of check seeds, its random check is these episodes: read, not replayed
    same = n == cfg.iterate.check_episodes
    r_real = _check_mean(run, cfg, "check-random" if same else "gate-random", "dream gate: random, real", n, random=True)
    c_dream = _check_mean(child, cfg, "gate-dream-c", "dream gate: previous C, new dream", n, params=prev_c, dream=True)
    r_dream = _check_mean(child, cfg, "gate-dream-random", "dream gate: random, new dream", n, random=True, dream=True)
    why = gate_verdict(c_real, r_real, c_dream, r_dream, cfg.iterate.dream_gate_ratio)
    print(
        f"[gate] {child.path.name}: previous C {c_real:.1f} vs random {r_real:.1f} real, {c_dream:.1f} vs "
        f"{r_dream:.1f} in the new dream: {'pass' if why is None else 'stop'}",
        flush=True,
    )
    if why:
        raise WMError(f"dream gate ({child.path.name}): {why}; `--set iterate.dream_gate=0` trains C anyway")


def _run_round(
    run: RunDir,
    cfg: Config,
    k: int,
    explore: float | None,
    opts: PassOptions,
    timings: dict[str, float],
    learned: bool = False,
    tick: Callable[[], None] | None = None,
) -> RunDir:
    """Prepare round k of `run` (config `cfg`; `learned`: `iterate.learned_set` applies) and run its stages, the dream
    gate just before its C's training (`tick`: `run_stages`')."""
    child = prepare_round(run, cfg, k, explore, learned=learned)
    ccfg = child.load_config()
    prev = previous_pass(run, k)
    gate = {"train-controller": lambda: dream_gate(run, prev, child, ccfg)}
    run_stages(child, ccfg, opts, timings, f"[round {k}] ", before=gate, tick=tick, last=pass_last(cfg, opts))
    return child


class RunClock:
    """The run's minutes, `iterate.max_minutes`' clock, kept across the invocations of a killed and resumed run
    (with `iterate.clock: work` the budget counts its `work` ledger instead, read from the passes' files; these wall
    minutes are still recorded in rounds.json).

    A rerun passes again over the passes an earlier invocation checked (their stages are skipped): at each one's check
    the clock is set to the minutes rounds.json recorded there, so passing over costs nothing and each round's length
    is the recorded one. A pass a kill interrupted keeps the time it had taken: `clock.json` holds the pass being
    worked on and the run's minutes at its last finished stage, check or progress line (`tick`), and when the rerun
    comes to that pass again (`enter`) the clock is credited with its minutes past its predecessor's check. Without
    that credit a run killed late in a round ran that round's finished stages for free and, resumed, ran rounds an
    uninterrupted run would not (seed 1 of the two-draw recipe: round 6's 13 min were counted as 0.2)."""

    def __init__(self, run: RunDir, t0: float, fresh: bool = False, work: WorkLedger | None = None) -> None:
        self.path = run.clock_path
        self.work = work  # iterate.clock: work — the budget counts the passes' work, not these minutes
        # an earlier invocation's rounds.json: {pass: the run's minutes when its check ended} and its minutes in all
        doc = ({} if fresh else round_checks(run)) or {}
        self.recorded = {str(p["name"]): float(p["minutes"]) for p in doc.get("passes", []) if p.get("minutes") is not None}
        self.total = float(doc["minutes"]) if doc.get("minutes") is not None else None
        try:
            self.saved = {} if fresh else dict(read_json_or(self.path, {}))
        except (TypeError, ValueError):
            self.saved = {}
        self.base, self.at = 0.0, t0
        self.current = "first pass"
        self.marks: dict[str, float] = {}  # {pass: the run's minutes when its check ended}

    @classmethod
    def of(cls, run: RunDir, cfg: Config, t0: float, fresh: bool = False) -> RunClock:
        """The run's clock, with a work ledger when `iterate.clock` is `work`."""
        return cls(run, t0, fresh, WorkLedger(cfg) if cfg.iterate.clock == "work" else None)

    def minutes(self) -> float:
        return self.base + (time.time() - self.at) / 60

    def budget(self) -> float:
        """The minutes `iterate.max_minutes` counts: the run's wall-clock minutes, or with `iterate.clock: work` the
        reference machine's minutes for the work of the passes checked so far (wm.rounds.workclock)."""
        return self.work.total if self.work is not None else self.minutes()

    def budget_at(self, name: str) -> float:
        """The budget's minutes (wall or work) when pass `name`'s check ended."""
        return (self.work.marks if self.work is not None else self.marks)[name]

    def enter(self, name: str, since: float = 0.0) -> None:
        """Pass `name` starts (or resumes) now; `since`: the run's minutes when its predecessor's check ended."""
        self.current = name
        if self.saved.get("pass") == name and name not in self.recorded:
            credit = max(0.0, float(self.saved.get("minutes", 0.0)) - since)
            if credit > 0:
                print(f"[rounds] {name} had taken {credit:.1f} min before this rerun: counted", flush=True)
            self.base += credit
            self.saved = {}

    def tick(self) -> None:
        if self.saved and self.current in self.recorded:  # passing over: a second kill here must not lose the credit
            return
        atomic_write_json(self.path, {"pass": self.current, "minutes": round(self.minutes(), 3)})

    def spent_after(self, names: list[str]) -> float:
        """Minutes an earlier invocation spent after these passes' checks (the final check), when it checked every
        one of them: a rerun that reuses its final check adds them back instead of recording the run as 11 min
        shorter (seed 0's run, replayed: 95.9 min became 84.8)."""
        if self.total is None or not names or any(n not in self.recorded for n in names):
            return 0.0
        return max(0.0, self.total - max(self.recorded[n] for n in names))

    def checked(self, name: str, where: RunDir | None = None, prev: RunDir | None = None) -> None:
        """Pass `name` (in `where`, extending `prev`'s episodes) was checked: its minutes are recorded ones when an
        earlier invocation checked it; the work clock counts its work from its files."""
        if name in self.recorded:
            self.base, self.at = self.recorded[name], time.time()
        self.marks[name] = self.minutes()
        if self.work is not None and where is not None:
            self.work.add(name, where, prev)
        self.tick()


def run_rounds(
    run: RunDir,
    cfg: Config,
    opts: PassOptions,
    timings: dict[str, float],
    t0: float,
    clock: RunClock | None = None,
) -> list[RunDir]:
    """Iterative training after the first pass: `iterate.rounds` rounds, or round control (`iterate.check_episodes`),
    whose real checks run over the pipeline's `--mpi` ranks (`checks_over`)."""
    with checks_over(max(1, opts.mpi), opts.launcher):
        return _rounds(run, cfg, opts, timings, t0, clock)


def _rounds(
    run: RunDir,
    cfg: Config,
    opts: PassOptions,
    timings: dict[str, float],
    t0: float,
    clock: RunClock | None,
) -> list[RunDir]:
    n = cfg.iterate.rounds
    if n <= 0:
        return []
    if cfg.iterate.check_episodes <= 0:  # the paper's fixed number of rounds
        rounds = [round_dir(run, k) for k in range(1, n + 1)]
        for k, child in enumerate(rounds, 1):
            print(f"[round {k}/{n}] {child.path}: collect with the previous C, fine-tune M, retrain C", flush=True)
            _run_round(run, cfg, k, None, opts, timings)
        return rounds
    # A rerun resumes the run's time budget, not a fresh one (RunClock).
    clock = clock or RunClock.of(run, cfg, t0, fresh=opts.force)
    at = clock.marks
    random = random_check(run, cfg)
    history: list[PassCheck] = [check_pass(run, cfg, "first pass")]
    rounds: list[RunDir] = []
    clock.checked("first pass", run)
    if clock.recorded:
        print(f"[rounds] resuming the time budget from the minutes {run.rounds_path} recorded", flush=True)
    last_round = 0.0  # the budget's minutes the last round took (collect, M, C, check): the estimate of the next one's
    while (reason := stop_reason(history, cfg, clock.budget(), random, last_round)) is None:
        k, last = len(history), history[-1]
        explore = next_explore(history, cfg, random)
        write_rounds(run, cfg, history, None, random, clock.minutes(), at, clock.work)
        why = " (exploits the dream)" if last.exploits(cfg.iterate.exploit_ratio) else ""
        if not why and below_target(history, cfg, random):
            why = f" (best C below {cfg.iterate.target_ratio:g} × random's {random:.1f})"
        learned = bool(cfg.iterate.learned_set) and learned_round(history, cfg, random)
        budget = float(cfg.iterate.max_minutes)
        spent = f"{clock_prefix(cfg)}minute {clock.budget():.0f} of iterate.max_minutes = {budget:g}; " if budget > 0 else ""
        print(
            f"[round {k}/≤{n}] real check {last.real:.1f}, dream {last.dream:.1f}{why}; {spent}"
            f"collect with exploration {explore:g}, fine-tune M, retrain C"
            + (f" with iterate.learned_set {list(cfg.iterate.learned_set)}" if learned else ""),
            flush=True,
        )
        last_round = _run_pass(
            clock,
            history,
            rounds,
            round_dir(run, k).path.name,
            partial(_run_round, run, cfg, k, explore, opts, timings, learned, clock.tick),
        )
    print(f"[rounds] stopped: {reason}", flush=True)
    earlier = clock.spent_after([h.name for h in history])
    history = final_check(history, cfg, random)
    doc = write_rounds(run, cfg, history, reason, random, clock.minutes() + earlier, at, clock.work)
    best = history[result_index(history)]
    how = f"real check {best.real:.1f}" + ("" if best.final is None else f", final check {best.final:.1f}")
    print(f"[rounds] the run's result is {doc['result']['name']}'s C ({how}) — {run.rounds_path}", flush=True)
    if pass_last(cfg, opts):
        evaluate_result(run, opts, timings)
    return rounds


def _run_pass(
    clock: RunClock, history: list[PassCheck], rounds: list[RunDir], name: str, build: Callable[[], RunDir]
) -> float:
    """Round `name` after the last pass checked: the clock enters it, `build()` prepares it and runs
    its stages, its check is appended to `history` and recorded on the clock. Returns its length in the run's minutes
    (from its predecessor's check to its own)."""
    prev = history[-1].name
    started = clock.marks[prev]
    clock.enter(name, started)
    child = build()
    rounds.append(child)
    history.append(check_pass(child, child.load_config(), name))
    clock.checked(name, child, RunDir(history[-2].path))
    return clock.budget_at(name) - clock.budget_at(prev)


def final_check(history: list[PassCheck], cfg: Config, random: float) -> list[PassCheck]:
    """`iterate.final_check`: the best few passes that play (`final_candidates`) play that many real episodes on the
    check seeds (`eval/final-check`; the short check's seeds are their first, and its episodes count without being
    played again), and the best of them is the run's result: a 30-episode check has a standard error ≈ 80 at Doom's
    std ≈ 450, so between learned rounds it picks nearly at random. With `iterate.final_more`, the two best of them
    then play that many more on the seeds after (`eval/final-more`) and the better mean over all their final episodes
    is the result: 100 episodes still leave a difference of two Cs ± ≈ 70 (docs/results/doom-small.md)."""
    picks = final_candidates(history, cfg, random)
    n, more = cfg.iterate.final_check, cfg.iterate.final_more
    out = list(history)
    for i in picks:
        h = history[i]
        mean = _check_mean(RunDir(h.path), cfg, "final-check", f"{h.name}: C, real (final)", n, reuse="check")
        out[i] = replace(h, final=mean, final_episodes=n)
        print(f"[final check] {h.name}: real {mean:.1f} on {n} episodes (short check {h.real:.1f})", flush=True)
    if more <= 0 or len(picks) < 2:
        return out
    for i in sorted(sorted(picks, key=lambda i: (-float(out[i].final or 0.0), i))[:2]):
        h = out[i]
        extra = _check_mean(RunDir(h.path), cfg, "final-more", f"{h.name}: C, real (final, {more} more)", more, skip=n)
        pooled = pooled_mean((n, h.final or 0.0), (more, extra))
        out[i] = replace(h, final=pooled, final_episodes=n + more)
        print(
            f"[final check] {h.name}: real {extra:.1f} on {more} more episodes: {pooled:.1f} on all {n + more} "
            f"(the first {n}: {h.final:.1f})",
            flush=True,
        )
    return out
