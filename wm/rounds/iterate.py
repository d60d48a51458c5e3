"""Rounds of the paper's iterative training (`iterate.*`): each round is a run directory of its own.

Round k of run R lives in `R/round<k>/` and is an ordinary run (status, evaluate, report and the TUI work on it
unchanged). `prepare_round` sets it up from the previous round (R itself for k = 1):

- `episodes/`: hard links to every episode of the previous round; the round's `collect` then adds
  `iterate.episodes` new slots played by the previous round's agent (`collect.policy: agent`, with
  `collect.explore` random hold segments), so the data grows by the states each C reaches;
- `vae/`: V is kept (hard link to the weights + DONE); `series/`: links to the encoded old episodes, so `encode`
  only encodes the new ones;
- M warm-starts from the previous M (`mdnrnn.init_from`) for `iterate.mdnrnn_epochs` epochs on all the data,
  and CMA-ES runs `iterate.generations` generations afresh (the previous C is the exploit the round removes).

Paths in the round's config are relative (`..`, `../round1`), so the run directory can be moved. Preparing
is idempotent (only missing links are made) and a round whose stored config differs is refused by
`RunDir.bind_config`, like any run.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from wm.core import config as C
from wm.core.config import Config
from wm.core.errors import WMError
from wm.core.registry import stages_with_role
from wm.core.rundir import RunDir
from wm.core.seeds import evaluation_seeds
from wm.data.episodes import list_episodes


def round_dir(base: RunDir, k: int) -> RunDir:
    return RunDir(base.path / f"round{k}")


def previous_pass(base: RunDir, k: int) -> RunDir:
    """The pass round k builds on: the base run for round 1, else round k − 1."""
    return base if k == 1 else round_dir(base, k - 1)


def pass_from_round(j: int) -> str:
    """Pass j's directory as a round's config names it (relative to the round): `..` for the first pass (j = 0),
    `../round<j>` for round j."""
    return ".." if j == 0 else f"../round{j}"


def evaluates_result_only(cfg: Config) -> bool:
    """`iterate.evaluate_passes: result` under round control (`iterate.check_episodes` > 0): the passes leave the
    evaluate stage to the run's result, which plays it once the final check has chosen (wm.rounds.runner)."""
    return cfg.iterate.evaluate_passes == "result" and cfg.iterate.check_episodes > 0


def round_config(cfg: Config, k: int, explore: float | None = None, learned: bool = False) -> Config:
    """The config of round k ≥ 1 from the base run's config (`explore`: this round's exploration share, default
    `iterate.explore`; round control raises it after an exploiting C). `learned`: an earlier pass's C reached round
    control's target (`learned_round`), so `iterate.learned_set` applies over `iterate.set`."""
    it = cfg.iterate
    prev = pass_from_round(k - 1)
    over = {
        "collect.episodes": cfg.collect.episodes + k * it.episodes,
        "collect.policy": "agent",
        "collect.agent_run": prev,
        "collect.explore": float(it.explore if explore is None else explore),
        "collect.min_length": 0,  # the agent's short episodes (its failures) are what M must learn
        "mdnrnn.init_from": RunDir(prev).mdnrnn_weights.as_posix(),
        "es.generations": it.generations,
        "iterate.rounds": 0,  # a round does not iterate itself
    }
    if cfg.mdnrnn.batching == "streams":
        over["mdnrnn.epochs"] = it.mdnrnn_epochs
    else:
        over["mdnrnn.steps"] = it.mdnrnn_steps
    out = C.update(cfg, over, source="iterate")
    for key in ("set", "learned_set") if learned else ("set",):
        extra = C.parse_set([str(x) for x in it[key] or []])
        bad = sorted(k for k in extra if k.startswith("iterate."))
        if bad:
            raise WMError(f"iterate.{key} cannot change {', '.join(bad)}: the rounds' own settings live in the base run")
        out = C.update(out, extra, source=f"iterate.{key}")
    return out


def _link_all(src: Path, dst: Path, files: list[Path]) -> int:
    """Hard-link `files` of src missing from dst (copy when links are not possible); returns how many."""
    dst.mkdir(parents=True, exist_ok=True)
    n = 0
    for f in files:
        target = dst / f.name
        if target.exists():
            continue
        tmp = dst / f".tmp-link-{f.name}"
        tmp.unlink(missing_ok=True)
        try:
            os.link(f, tmp)
        except OSError:  # another file system, or links not supported
            shutil.copy2(f, tmp)
        os.replace(tmp, target)
        n += 1
    return n


def prepare_round(base: RunDir, cfg: Config, k: int, explore: float | None = None, learned: bool = False) -> RunDir:
    """Create or check round k of `base` (see the module docstring and `round_config`); returns its RunDir."""
    prev = previous_pass(base, k)
    for verb in (s.verb for s in stages_with_role("data", "world", "controller")):
        if not prev.is_done(verb):
            raise WMError(f"round {k} needs a finished {verb} in {prev.path} ({prev.stage_dir(verb)}/DONE missing)")
    child = round_dir(base, k)
    child.bind_config(round_config(cfg, k, explore, learned))
    _link_all(prev.episodes_dir, child.episodes_dir, list_episodes(prev.episodes_dir))
    _link_all(prev.series_dir, child.series_dir, list_episodes(prev.series_dir))
    _link_all(prev.vae_weights.parent, child.vae_weights.parent, [prev.vae_weights])
    if not child.is_done("train-vae"):
        child.mark_done("train-vae", {**prev.done_info("train-vae"), "linked_from": str(prev.path)})
    return child


# ---------------------------------------------------------------- round control


@dataclass(frozen=True)
class PassCheck:
    """One pass's short check: C's mean real score on the check seeds and its mean score in its own dream."""

    name: str  # "first pass", "round1", …
    path: str
    real: float
    dream: float
    final: float | None = None  # mean real score of the final check (`iterate.final_check`), when it played one
    final_episodes: int | None = None  # the episodes `final` is the mean of (final_check, + final_more for the best two)

    def exploits(self, ratio: float) -> bool:
        """The dream rates C far above the game: C found a state M gets wrong (the wall: docs/results/doom-small.md)."""
        return self.dream > ratio * max(self.real, 1e-9)


def check_seeds(cfg: Config, n: int | None = None, skip: int = 0) -> list[int]:
    """The check episodes' seeds (`n`, default `iterate.check_episodes`, after the first `skip`; the dream gate's and
    the final check's too): training-side, never the evaluation seeds (refused when they overlap)."""
    it, ev = cfg.iterate, cfg.evaluate
    first, n = it.check_seed + int(skip), int(it.check_episodes if n is None else n)
    lo, hi = ev.seed, ev.seed + ev.episodes
    if first < hi and lo < first + n:
        raise WMError(
            f"iterate.check_seed {first}…{first + n - 1} overlaps the evaluation seeds {lo}…{hi - 1}; "
            "pick a check_seed outside them"
        )
    return evaluation_seeds(first, n, "iterate.check_seed")


def best_pass(history: list[PassCheck]) -> int:
    """Index of the pass whose C is the run's result: the best real check score (the earliest of equals)."""
    if not history:
        raise ValueError("no pass checked yet")
    return max(range(len(history)), key=lambda i: (history[i].real, -i))


def final_candidates(history: list[PassCheck], cfg: Config, random: float) -> list[int]:
    """Indices of the passes the final check plays (`iterate.final_check` > 0): the `iterate.final_passes` best real
    checks among the passes whose check reached `target_ratio` × random (any pass when the target is off); none when
    fewer than two qualify (the short check's pick stands)."""
    it = cfg.iterate
    if it.final_check <= 0:
        return []
    target = target_score(cfg, random)
    ok = [i for i, h in enumerate(history) if target <= 0 or h.real >= target]
    ok = sorted(ok, key=lambda i: (-history[i].real, i))[: max(it.final_passes, 0)]
    return sorted(ok) if len(ok) >= 2 else []


def result_index(history: list[PassCheck]) -> int:
    """Index of the pass whose C is the run's result: the best final check (the earliest of equals) among the passes
    that played the most final episodes (`iterate.final_more`: the final check's best two) when some pass played
    one, else the best short real check (`best_pass`)."""
    finals = {i: h.final for i, h in enumerate(history) if h.final is not None}
    if not finals:
        return best_pass(history)
    most = max(history[i].final_episodes or 0 for i in finals)
    return max((i for i in finals if (history[i].final_episodes or 0) == most), key=lambda i: (finals[i], -i))


def stop_reason(
    history: list[PassCheck], cfg: Config, minutes: float, random: float = 0.0, round_minutes: float = 0.0
) -> str | None:
    """Why no further round starts after the passes in `history` (None: run round len(history)).

    Budgets first (`rounds`; `iterate.max_minutes`: a round that would end past them, taking as long as the last
    round took, `round_minutes`, does not start); then a C that exploits its dream, or a best C still below
    `target_ratio` × the random policy's score on the check seeds (`random`), always earns another round; otherwise
    the rounds stop after `patience` rounds without a better real check score."""
    it = cfg.iterate
    done = len(history) - 1  # rounds after the first pass
    if done >= it.rounds:
        return f"iterate.rounds = {it.rounds} reached"
    budget = float(it.max_minutes)
    unit = f"{clock_prefix(cfg)}min"
    if budget > 0 and minutes >= budget:
        return f"time budget iterate.max_minutes = {budget:g} spent ({minutes:.0f} {unit})"
    if budget > 0 and minutes + round_minutes > budget:
        return (
            f"time budget iterate.max_minutes = {budget:g}: another round, as long as the last "
            f"({round_minutes:.0f} {unit}), would end at {minutes + round_minutes:.0f} {unit}"
        )
    if history[-1].exploits(it.exploit_ratio):
        return None  # the last C exploits M: the next round's data (its own failures) is what removes the exploit
    if below_target(history, cfg, random):
        return None  # no C worth keeping yet: a C that loses to random is not a result
    since = len(history) - 1 - best_pass(history)
    if since >= it.patience:
        return f"no better real check score in the last {since} round(s) (iterate.patience = {it.patience})"
    return None


def clock_prefix(cfg: Config) -> str:
    """What the time budget's minutes are, for its messages: "" (the wall clock's) or "work " (`iterate.clock: work`)."""
    return "work " if cfg.iterate.clock == "work" else ""


def target_score(cfg: Config, random: float) -> float:
    """The real check score of a C that plays the game: `iterate.target_ratio` × the random policy's on the check
    seeds (0: no target)."""
    return cfg.iterate.target_ratio * float(random)


def below_target(history: list[PassCheck], cfg: Config, random: float) -> bool:
    """The best C so far scores below `iterate.target_ratio` × the random policy on the check seeds."""
    target = target_score(cfg, random)
    return target > 0 and history[best_pass(history)].real < target


def learned_round(history: list[PassCheck], cfg: Config, random: float) -> bool:
    """Some pass's C has reached `iterate.target_ratio` × the random policy on the check seeds: the run has a C that
    plays the game, and the rounds after it take `iterate.learned_set` (e.g. a finer dream once C dodges)."""
    return target_score(cfg, random) > 0 and not below_target(history, cfg, random)


def next_explore(history: list[PassCheck], cfg: Config, random: float = 0.0) -> float:
    """Exploration share of the next round: raised to `explore_exploit` when the last C exploited its dream or no C
    has reached the target yet (its own episodes are mostly the same failure; random segments show M the rest)."""
    it = cfg.iterate
    failing = history[-1].exploits(it.exploit_ratio) or below_target(history, cfg, random)
    return float(it.explore_exploit if failing else it.explore)


def gate_verdict(c_real: float, random_real: float, c_dream: float, random_dream: float, ratio: float) -> str | None:
    """The dream gate's reading (`iterate.dream_gate`): None when a C trained in this dream can learn what the real
    game rewards, else why not. The previous pass's C beats the random policy in the real game by
    `c_real − random_real`; the dream must show at least `ratio` of that gap (its rewards are the real ones, as M
    predicts them). A previous C no better than random in the game tells nothing: the gate passes."""
    gap = c_real - random_real
    if gap <= 0:
        return None
    dream_gap = c_dream - random_dream
    if dream_gap >= ratio * gap:
        return None
    return (
        f"the round's dream does not tell the previous C from the random policy: the previous C beats it by "
        f"{gap:.1f} in the real game ({c_real:.1f} vs {random_real:.1f}) but by {dream_gap:.1f} in the dream "
        f"({c_dream:.1f} vs {random_dream:.1f}; iterate.dream_gate_ratio {ratio:g} asks ≥ {ratio * gap:.1f}), so a C "
        f"trained in it would not transfer"
    )
