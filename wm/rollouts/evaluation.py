"""The evaluation protocol (docs/paper-settings.md §9): fixed seeds, the summary, its files and the progress line.

Episode i uses seed `evaluate.seed + i` (env reset and every random draw of that episode), so two evaluations of
the same parameters give the same numbers; the ± is `np.std` over the episodes, as in §9. Results of one
evaluation go to `eval/<tag>/{episodes.jsonl,summary.json}`. The episodes themselves are played by the
evaluation engine (`wm.rollouts.engine`), whose workers then draw the GIFs (`wm.rollouts.recording`). No TensorFlow
here.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from wm.core.config import Config
from wm.core.errors import WMError
from wm.core.format import duration
from wm.core.rundir import RunDir, atomic_write_json, atomic_write_text
from wm.core.seeds import evaluation_seeds
from wm.rollouts.episodes import scoring_config

# The summary's "mode" of each evaluation kind (wm.rollouts.engine.KINDS), as written since the first results.
MODES = {"real": "real", "dream": "dream", "random": "real-random", "random-dream": "dream-random"}


def seed_list(cfg: Config, episodes: int | None = None, first: int | None = None) -> list[int]:
    """The fixed evaluation seeds: `evaluate.seed + i` for i < episodes (`first` instead of evaluate.seed)."""
    n = cfg.evaluate.episodes if episodes is None else episodes
    first = int(cfg.evaluate.seed if first is None else first)
    return evaluation_seeds(first, n, "evaluation")


def summarize(returns: np.ndarray, lengths: np.ndarray) -> dict[str, Any]:
    """Mean, std (`np.std`, ddof 0, as the paper's ± in §9), min, median, max of the returns and the mean length."""
    r, n = np.asarray(returns, float), np.asarray(lengths, float)
    if r.size == 0:
        raise WMError("no evaluation episodes to summarise")
    return {
        "episodes": int(r.size),
        "mean": float(r.mean()),
        "std": float(r.std()),
        "min": float(r.min()),
        "median": float(np.median(r)),
        "max": float(r.max()),
        "len_mean": float(n.mean()),
    }


def format_summary(s: dict[str, Any]) -> str:
    """`412.3 ± 208.1 over 100 episodes (min 98, median 371, max 2100)`."""
    return (
        f"{s['mean']:.1f} ± {s['std']:.1f} over {s['episodes']} episodes "
        f"(min {s['min']:.0f}, median {s['median']:.1f}, max {s['max']:.0f})"
    )


def pooled_mean(*parts: tuple[int, float]) -> float:
    """The mean over every episode of several evaluations of one C on consecutive seeds, from each one's (episodes,
    mean): the final check over the short check's episodes and its own, and `iterate.final_more`'s over both."""
    n = sum(k for k, _ in parts)
    return sum(k * float(m) for k, m in parts) / n


def pm(s: dict[str, Any] | None) -> str:
    """`mean ± std` rounded to whole steps, `—` for None (tables)."""
    return "—" if s is None else f"{s['mean']:.0f} ± {s['std']:.0f}"


def write_results(
    run: RunDir, tag: str, seeds: list[int], returns: np.ndarray, lengths: np.ndarray, extra: dict[str, Any]
) -> dict[str, Any]:
    """Write `eval/<tag>/episodes.jsonl` and `summary.json`; returns the summary."""
    lines = [
        json.dumps({"episode": i, "seed": int(s), "return": float(r), "length": int(n)})
        for i, (s, r, n) in enumerate(zip(seeds, returns, lengths, strict=True))
    ]
    atomic_write_text(run.eval_episodes(tag), "\n".join(lines) + "\n")
    summary = {**summarize(returns, lengths), "seeds": [int(s) for s in seeds], "tag": tag, **extra}
    atomic_write_json(run.eval_summary(tag), summary)
    return summary


class Progress:
    """One progress line: `[eval] 37/100 episodes  mean 412.3  (12s, ETA 20s)`; rewritten in place on a terminal."""

    def __init__(self, total: int, label: str):
        self.total, self.label, self.done, self.sum = total, label, 0, 0.0
        self.start, self.last, self.tty = time.time(), 0.0, sys.stdout.isatty()

    def update(self, returns: list[float]) -> None:
        self.done += len(returns)
        self.sum += float(np.sum(returns))
        now = time.time()
        if self.done < self.total and now - self.last < (0.2 if self.tty else 5.0):
            return
        self.last = now
        elapsed = now - self.start
        eta = f", ETA {duration(elapsed * (self.total - self.done) / self.done)}" if 0 < self.done < self.total else ""
        line = (
            f"[eval] {self.label}: {self.done}/{self.total} episodes  mean {self.sum / max(1, self.done):.1f}  "
            f"({elapsed:.0f}s{eta})"
        )
        end = "\n" if not self.tty or self.done >= self.total else ""
        print(("\r" if self.tty else "") + line, end=end, flush=True)


def play(
    cfg: Config,
    run: RunDir,
    kind: str,
    params: np.ndarray | None,
    seeds: list[int],
    temperature: float | None = None,
    workers: int = 1,
    progress: Any = None,
    log: Any = None,
    pool: Any = None,
    gifs: Sequence[tuple[int, Path]] = (),
) -> tuple[np.ndarray, np.ndarray]:
    """Returns and lengths (in seed order) of `kind` (wm.rollouts.engine.KINDS) with `params` on `seeds`, through the engine
    (`pool`: a job's open pool, `engine.job_pool`); then the episodes of `gifs` (seed, path) recorded as GIFs by the
    workers that played (`wm.rollouts.recording.write_episode_gif`).

    Real episodes always use the official renderer (`scoring_config`)."""
    from wm.envs import action_dim
    from wm.models.controller import Controller
    from wm.rollouts.engine import EvalSpec, evaluate_seeds

    cfg = scoring_config(cfg)
    spec = EvalSpec(kind, cfg.to_dict(), str(run.path), temperature=temperature)
    n = Controller.from_config(cfg, action_dim(cfg)).n_params
    return evaluate_seeds(spec, params, seeds, n, workers=workers, progress=progress, log=log, pool=pool, gifs=gifs)
