"""Synthetic episodes for the V/encode tests: coloured squares moving on a dark background (no env needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from wm.core.config import Config, load
from wm.core.rundir import RunDir
from wm.data.episodes import episode_name, write_episode

COLOURS = np.array([[230, 40, 40], [40, 200, 60], [50, 80, 230], [230, 210, 40], [200, 60, 200]], np.uint8)


def square_frames(rng: np.random.Generator, t: int, size: int = 20) -> np.ndarray:
    """t frames of one coloured square drifting across a dark grey background."""
    obs = np.full((t, 64, 64, 3), 30, np.uint8)
    colour = COLOURS[rng.integers(len(COLOURS))]
    y, x = rng.integers(0, 64 - size, 2)
    dy, dx = rng.integers(-2, 3, 2)
    for i in range(t):
        obs[i, y : y + size, x : x + size] = colour
        y, x = int(np.clip(y + dy, 0, 64 - size)), int(np.clip(x + dx, 0, 64 - size))
    return obs


def make_run(
    tmp_path: Path, episodes: int = 6, t: int = 40, seed: int = 0, sets: list[str] | None = None, done: bool = True
) -> tuple[Config, RunDir]:
    """A run dir with `episodes` synthetic episodes of `t` frames in episodes/ (and collect DONE)."""
    cfg = load([], ["vae.z_dim=32"] + (sets or []))
    run = RunDir(tmp_path / "run")
    run.bind_config(cfg)
    rng = np.random.default_rng(seed)
    folder = run.stage_dir("collect")
    for i in range(episodes):
        write_episode(
            folder / episode_name(i),
            obs=square_frames(rng, t),
            action=rng.uniform(-1, 1, (t, 1)).astype(np.float32),
            reward=np.ones(t, np.float32),
            done=np.arange(t) == t - 1,
            seed=np.int64(i),
        )
    if done:
        run.mark_done("collect", {"episodes": episodes})
    return cfg, run
