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

from wm.core.atomic import atomic_write_json, atomic_write_text
from wm.core.config import Config
from wm.core.errors import WMError
from wm.core.format import count, duration
from wm.core.rundir import PARAMS, RunDir
from wm.core.seeds import evaluation_seeds
from wm.envs.setup import Setup, setup

# The summary's "mode" of each evaluation kind (wm.rollouts.engine.KINDS), as written since the first results.
MODES = {"real": "real", "dream": "dream", "random": "real-random", "random-dream": "dream-random"}


def played_params(run: RunDir, choice: str) -> Path:
    """The params file an evaluation of `run` plays: `choice` is the command's `--params` or, without one,
    `evaluate.params` (what `load_world` reads and round control's checks expect); `best` / `mean` are the run's
    `controller/<x>.npz`, anything else a path (relative to the working dir)."""
    return run.params(choice) if choice in PARAMS else Path(choice)


def input_digest(facts: Setup, run: RunDir, params: Path | None, dream: bool = False) -> dict[str, str]:
    """Short SHA-256 of what an evaluation of `run` plays with: V's and M's weights, C's params file when it has one,
    what C reads of V when it is not the paper's sampled z (`controller.z_input`), and in the dream the dream's
    settings (`dream.*` and M's dropout there, `mdnrnn.dropout`), so a check dreamed at another temperature or
    dropout is not taken for this one (`evaluate` stores it in the summary; round control reuses a stored check only
    while these match)."""
    import hashlib
    import json

    def sha(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()[:16]

    files = {"vae": run.vae_weights, "mdnrnn": run.mdnrnn_weights, "params": params}
    out = {k: sha(Path(p).read_bytes()) for k, p in files.items() if p and Path(p).exists()}
    if params is not None and facts.controller.z_input != "sampled":
        out["z_input"] = facts.controller.z_input
    if dream:
        d = facts.dream  # the same dict, and so the same digest, as the `dream` section's with M's dropout
        settings = {"temperature": d.temperature, "max_steps": d.max_steps, "done_sampling": d.done_sampling}
        out["dream"] = sha(json.dumps(settings | {"dropout": facts.sizes.dropout}, sort_keys=True, default=str).encode())
    return out


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
        f"{s['mean']:.1f} ± {s['std']:.1f} over {count(s['episodes'], 'episode')} "
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


def drive_summary(figures: Sequence[dict[str, float]]) -> dict[str, float]:
    """The evaluation's figures beside the score, from each episode's (`FrameEnv.episode_figures`; CarRacing's): the
    mean of each, and for a lap `laps` (episodes that finished it) and `lap_steps` (their median steps, 0 for none).
    {} when the env measured nothing."""
    if not figures or not all(figures):
        return {}
    out: dict[str, float] = {}
    for key in figures[0]:
        vals = np.array([float(f.get(key, 0.0)) for f in figures])
        if key == "lap_steps":
            done = vals[vals > 0]
            out["laps"] = int(done.size)
            out["lap_steps"] = float(np.median(done)) if done.size else 0.0
        else:
            out[key] = round(float(vals.mean()), 4)
    return out


# The figures `status`, `report` and `results` show beside a CarRacing score (`drive_summary`'s keys)
DRIVE_FIGURES = ("tiles", "laps", "speed", "gas")


def format_drive(d: dict[str, float]) -> str:
    """`tiles 80.5 %, laps 4 (median 912 steps), off track 0.31 an episode, speed 52.4, gas 0.27, brake 0.01`."""
    laps = f", laps {d['laps']}" + (f" (median {d['lap_steps']:.0f} steps)" if d.get("laps") else "") if "laps" in d else ""
    return (
        f"tiles {100 * d.get('tiles', 0):.1f} %{laps}, off track {d.get('off_track', 0):.2f} an episode, "
        f"speed {d.get('speed', 0):.1f}, gas {d.get('gas', 0):.2f}, brake {d.get('brake', 0):.2f}"
    )


def write_results(
    run: RunDir,
    tag: str,
    seeds: list[int],
    returns: np.ndarray,
    lengths: np.ndarray,
    extra: dict[str, Any],
    figures: Sequence[dict[str, float]] = (),
) -> dict[str, Any]:
    """Write `eval/<tag>/episodes.jsonl` (each episode's seed, return, length and `figures`) and `summary.json` (with
    `drive`: `drive_summary(figures)`, when the env measured any); returns the summary."""
    figures = list(figures) or [{}] * len(seeds)
    lines = [
        json.dumps({"episode": i, "seed": int(s), "return": float(r), "length": int(n), **f})
        for i, (s, r, n, f) in enumerate(zip(seeds, returns, lengths, figures, strict=True))
    ]
    atomic_write_text(run.eval_episodes(tag), "\n".join(lines) + "\n")
    summary = {**summarize(returns, lengths), "seeds": [int(s) for s in seeds], "tag": tag, **extra}
    drive = drive_summary(figures)
    if drive:
        summary["drive"] = drive
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
    facts: Setup | None = None,
) -> tuple[np.ndarray, np.ndarray, list[dict[str, float]]]:
    """Returns, lengths and each episode's figures (`wm.rollouts.engine.evaluate_task`), in seed order, of `kind`
    (wm.rollouts.engine.KINDS) with `params` on `seeds`, through the engine (`pool`: a job's open pool,
    `engine.job_pool`); then the episodes of `gifs` (seed, path) recorded as GIFs by the
    workers that played (`wm.rollouts.recording.write_episode_gif`).

    `cfg` gives the `es` and `evaluate` values (a whole config or a stage's blocks), `facts` the setup (a stage's,
    resolved once; by default `setup(cfg)`). Real episodes always use the official renderer (`Setup.scoring`)."""
    from wm.rollouts.engine import EvalSpec, evaluate_seeds

    scored = (setup(cfg) if facts is None else facts).scoring
    spec = EvalSpec.of(kind, cfg, str(run.path), temperature=temperature, facts=scored)
    return evaluate_seeds(
        spec, params, seeds, spec.facts.n_params, workers=workers, progress=progress, log=log, pool=pool, gifs=gifs
    )
