"""Recorded evaluation episodes as GIF panels: the real screen, V's 64×64 input and V's reconstruction side by
side (real), or the decoded dream (dream). Each episode is replayed with the same seeding as its evaluation."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from wm.core.config import Config
from wm.core.rundir import RunDir

PANELS = ("real", "input", "reconstruction", "dream")  # left to right


def decode(vae, z: np.ndarray, batch: int = 256) -> list[np.ndarray]:
    """V's frames of the latents `z` (N, z_dim), decoded in batches."""
    return list(np.concatenate([np.asarray(vae.decode(z[i : i + batch])) for i in range(0, len(z), batch)]))


def _record_real(cfg: Config, run: RunDir, params: np.ndarray, seed: int) -> dict[str, list]:
    """The real episode of `seed` replayed by the batched evaluator (one env, same seeding as the evaluation):
    the raw screen, V's 64×64 input and V's reconstruction of the sampled z at every step."""
    from wm.rollouts.rollout import RealEvaluator

    ev = RealEvaluator.from_run(cfg, run, n_envs=1, keep_raw=True)
    try:
        ev.evaluate(params[None], np.array([[seed]], np.int64), record=1)
    finally:
        ev.close()
    z = np.stack(ev.latents[0])
    return {"real": ev.frames[0][: len(z)], "input": ev.inputs[0], "reconstruction": decode(ev.vae, z)}


def record_episode(cfg: Config, run: RunDir, kind: str, params: np.ndarray | None, seed: int) -> dict[str, np.ndarray]:
    """Replay the episode of `seed` for evaluation `kind` and return its frames per panel, each (T, H, W, 3) uint8.

    Real kinds: "real" (the raw screen), "input" (V's 64×64 input) and "reconstruction" (V's decoding of the sampled
    z; for `random` only when the run has a VAE). Dream kinds: "dream" (the decoded z of every dream step), at the
    temperature in `cfg.dream.temperature`.
    """
    from wm.core import tf_setup
    from wm.core.media import to_uint8
    from wm.rollouts.engine import dream_episode, random_episode
    from wm.rollouts.evaluation import scoring_config
    from wm.rollouts.world import load_world

    cfg = scoring_config(cfg)  # the official renderer, as the scores

    tf_setup.setup()
    if kind in ("dream", "random-dream"):
        from wm.rollouts.dream import world_env

        world = load_world(cfg, run, need=("vae", "mdnrnn", "initial_z"))
        env = world_env(world, params)
        zs = dream_episode(env, seed, int(cfg.dream.max_steps), random=kind == "random-dream", record=True)[2]["z"]
        frames = {"dream": decode(world.vae, np.stack(zs)[:-1])}  # the frame each step was taken from
    elif kind == "random":
        from wm.envs import make_env

        env = make_env(cfg, keep_raw=True)
        try:
            frames = random_episode(env, seed, int(cfg.env.max_steps), record=True)[2]
        finally:
            env.close()
        if run.vae_weights.exists():  # the baseline needs no model, but shows V's view when there is one
            vae = load_world(cfg, run, need=("vae",)).vae
            x = np.stack(frames["input"])
            frames["reconstruction"] = decode(
                vae, np.concatenate([np.asarray(vae.encode(x[i : i + 256])[0]) for i in range(0, len(x), 256)])
            )
    else:
        frames = _record_real(cfg, run, params, seed)
    return {k: to_uint8(np.stack(v)) for k, v in frames.items() if len(v)}


def episode_panels(frames: dict[str, np.ndarray], stride: int = 1, size: int = 192) -> np.ndarray:
    """Side-by-side GIF frames (ceil(T / stride), size, n·(size + 4) − 4, 3) from the recorded panels."""
    from wm.core.media import side_by_side

    return side_by_side([frames[k][:: max(1, stride)] for k in PANELS if k in frames], size=size)


def save_episode_gif(path: Path, frames: dict[str, np.ndarray], stride: int = 1) -> None:
    """Write the side-by-side panels of one episode as a GIF (35 tics/s divided by the stride, §1b)."""
    from wm.core.media import save_gif

    save_gif(path, episode_panels(frames, stride), fps=max(1, round(35 / max(1, stride))))
