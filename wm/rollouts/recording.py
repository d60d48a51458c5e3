"""Recorded evaluation episodes as GIF panels: the real screen, V's 64×64 input and V's reconstruction side by
side (real), or the decoded dream (dream). Each episode is replayed with the same seeding as its evaluation.

Every GIF frame carries a strip above the panels naming them and one below with the step and the return so far.
A recording stays under `MAX_GIF_BYTES` whatever the episode's length (`save_episode_gif`); M's dream preview
(`mdnrnn/dream_preview.gif`) is drawn here too (`save_dream_preview`), at least `PREVIEW_MIN_WIDTH` pixels wide.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from wm.core.errors import WMError
from wm.core.rundir import RunDir

if TYPE_CHECKING:  # annotations only
    from wm.envs.setup import Setup

PANELS = ("real", "input", "reconstruction", "dream")  # left to right
LABELS = {"real": "real screen", "input": "V input", "reconstruction": "V reconstruction", "dream": "dream (V decodes M)"}
PANEL_SIZE = 128  # px, each panel (192 before the size bound: 2.25× the pixels of every frame)
STRIP = 14  # px, each label strip: one line of Pillow's default font (12 px) and a margin
STRIP_BG, STRIP_FG = (24, 24, 24), (235, 235, 235)
FPS = 35  # game steps per second by default (ViZDoom's 35 tics, §1b); evaluate passes the env's (`EnvFamily.steps_per_s`)
# The size bound of one recording. 5 MB keeps a full 2100-step episode (env.max_steps) viewable in a browser, the
# TUI and the MLflow UI, and a run's few GIFs small beside its weights (the unbounded GIFs were 7 MB for a 337-step
# episode, ~45 MB for 2100 steps). GIF_BYTES_PER_PIXEL is what a frame of game panels costs once encoded
# (`encode_gif`: 0.22–0.26 measured on ViZDoom take-cover frames with V's input and a blurred reconstruction; 0.28
# leaves room for V's noisier real reconstructions). It sets the first stride, and `save_episode_gif` widens the
# stride if a hard episode still comes out above the bound.
MAX_GIF_BYTES = 5_000_000
GIF_BYTES_PER_PIXEL = 0.28
GIF_MIN_FRAME_S = 0.02  # browsers play shorter GIF frames (0 or 1 centisecond) at 0.1 s
PREVIEW_MIN_WIDTH = 256  # px, M's dream preview (two 64-px rollouts were 128 px wide)


def decode(vae, z: np.ndarray, batch: int = 256) -> list[np.ndarray]:
    """V's frames of the latents `z` (N, z_dim), decoded in batches."""
    return list(np.concatenate([np.asarray(vae.decode(z[i : i + batch])) for i in range(0, len(z), batch)]))


def _tap_rewards(env: Any) -> list[float]:
    """The rewards of `env.step` from now on: this one instance's `step` is wrapped (its class is untouched), so the
    evaluators record the rewards their returns add up without a recording path of their own."""
    rewards: list[float] = []
    step = env.step

    def step_and_keep(*args: Any, **kwargs: Any) -> Any:
        out = step(*args, **kwargs)
        rewards.append(float(np.asarray(out[1]).reshape(-1)[0]))
        return out

    env.step = step_and_keep
    return rewards


def _record_real(facts: Setup, run: RunDir, params: np.ndarray, seed: int) -> dict[str, list]:
    """The real episode of `seed` replayed by the batched evaluator (one env, same seeding as the evaluation):
    the raw screen, V's 64×64 input, V's reconstruction of the sampled z and the reward at every step."""
    from wm.rollouts.rollout import RealEvaluator

    ev = RealEvaluator.from_run(facts, run, n_envs=1, keep_raw=True)
    rewards = _tap_rewards(ev.envs[0])
    try:
        ev.evaluate(params[None], np.array([[seed]], np.int64), record=1)
    finally:
        ev.close()
    z = np.stack(ev.latents[0])
    return {
        "real": ev.frames[0][: len(z)],
        "input": ev.inputs[0],
        "reconstruction": decode(ev.vae, z),
        "reward": rewards[: len(z)],
    }


def record_episode(facts: Setup, run: RunDir, kind: str, params: np.ndarray | None, seed: int) -> dict[str, np.ndarray]:
    """Replay the episode of `seed` for evaluation `kind` and return its frames per panel, each (T, H, W, 3) uint8,
    and its rewards, "reward" (T,) float64 (frame t is the one step t was taken from; reward t what that step got).

    Real kinds: "real" (the raw screen), "input" (V's 64×64 input) and "reconstruction" (V's decoding of the sampled
    z; for `random` only when the run has a VAE). Dream kinds: "dream" (the decoded z of every dream step), at the
    setup's dream temperature. Real episodes are played as scored (`facts.scoring`: the official renderer).
    """
    from wm.core import tf_setup
    from wm.core.media import to_uint8
    from wm.rollouts.episodes import dream_episode, random_episode
    from wm.rollouts.world import load_world

    facts = facts.scoring

    tf_setup.decide()  # applied when a model loads TF (the random policy without a V never does)
    if kind in ("dream", "random-dream"):
        from wm.rollouts.dream import world_env

        world = load_world(facts, run, need=("vae", "mdnrnn", "initial_z"))
        env = world_env(world, params)
        rewards = _tap_rewards(env)
        zs = dream_episode(env, seed, facts.dream.max_steps, random=kind == "random-dream", record=True)[2]["z"]
        frames = {"dream": decode(world.vae, np.stack(zs)[:-1])}  # the frame each step was taken from
    elif kind == "random":
        env = facts.open(keep_raw=True)
        rewards = _tap_rewards(env)
        try:
            frames = random_episode(env, seed, facts.env.max_steps, record=True)[2]
        finally:
            env.close()
        if run.vae_weights.exists():  # the baseline needs no model, but shows V's view when there is one
            vae = load_world(facts, run, need=("vae",)).vae
            x = np.stack(frames["input"])
            frames["reconstruction"] = decode(
                vae, np.concatenate([np.asarray(vae.encode(x[i : i + 256])[0]) for i in range(0, len(x), 256)])
            )
    else:
        frames = _record_real(facts, run, params, seed)
        rewards = frames.pop("reward")
    out = {k: to_uint8(np.stack(v)) for k, v in frames.items() if len(v)}
    out["reward"] = np.asarray(rewards, np.float64)
    return out


def write_episode_gif(
    facts: Setup, run: RunDir, kind: str, params: np.ndarray | None, seed: int, path: Path, stride: int
) -> int:
    """Replay the episode of `seed` (`record_episode`) and write it to `path` (`save_episode_gif`: every `stride`-th
    frame at least, `evaluate.gif_stride`, playing in the game's time); returns its steps."""
    frames = record_episode(facts, run, kind, params, seed)
    save_episode_gif(path, frames, stride=stride, fps=facts.family.steps_per_s)
    return len(next(iter(frames.values())))  # its first panel's frames


def _strip_font() -> Any:
    from PIL import ImageFont

    return ImageFont.load_default()


def _names_strip(names: Sequence[str], width: int, size: int, pad: int) -> np.ndarray:
    """The strip above the panels: each panel's name over its left edge."""
    from PIL import Image, ImageDraw

    im = Image.new("RGB", (width, STRIP), STRIP_BG)
    draw, font = ImageDraw.Draw(im), _strip_font()
    for k, name in enumerate(names):
        draw.text((k * (size + pad) + 3, 1), name, fill=STRIP_FG, font=font)
    return np.asarray(im)


def _step_lines(steps: np.ndarray, returns: np.ndarray | None) -> list[list[str]]:
    """The text below the panels of each kept frame: "step t  return R" (one line, or two where it is too wide)."""
    if returns is None:
        return [[f"step {t}"] for t in steps]
    return [[f"step {t}", f"return {r:.1f}"] for t, r in zip(steps, returns, strict=True)]


def episode_panels(frames: dict[str, np.ndarray], stride: int = 1, size: int = PANEL_SIZE, pad: int = 4) -> np.ndarray:
    """Labelled side-by-side GIF frames (ceil(T / stride), STRIP + size + lines · STRIP, n·(size + pad) − pad, 3).

    Above the panels each one's name (`LABELS`); below, the step t of each kept frame (every `stride`-th, from 0) and,
    when `frames` has "reward", the return so far (the rewards of steps 0 … t − 1: what the player had when it
    saw that frame), on one line, or two when the panels are too narrow for it."""
    from PIL import Image, ImageDraw

    from wm.core.media import side_by_side

    keys = [k for k in PANELS if k in frames]
    if not keys:
        raise WMError(f"no panels to draw: the recording has {sorted(frames)}, expected some of {list(PANELS)}")
    stride = max(1, int(stride))
    body = side_by_side([frames[k][::stride] for k in keys], size=size, pad=pad)
    n, width = len(body), body.shape[2]
    steps = np.arange(n) * stride
    returns = None
    if "reward" in frames:
        rewards = np.asarray(frames["reward"], np.float64)
        returns = np.concatenate([[0.0], np.cumsum(rewards)])[np.minimum(steps, len(rewards))]
    lines = _step_lines(steps, returns)
    font = _strip_font()
    one_line = all(font.getlength("  ".join(ls)) <= width - 6 for ls in lines)
    rows = 1 if one_line else max(len(ls) for ls in lines)
    out = np.empty((n, STRIP + size + rows * STRIP, width, 3), np.uint8)
    out[:, :STRIP] = _names_strip([LABELS[k] for k in keys], width, size, pad)
    out[:, STRIP : STRIP + size] = body
    for i, ls in enumerate(lines):
        im = Image.new("RGB", (width, rows * STRIP), STRIP_BG)
        draw = ImageDraw.Draw(im)
        for j, text in enumerate(["  ".join(ls)] if one_line else ls):
            draw.text((3, 1 + j * STRIP), text, fill=STRIP_FG, font=font)
        out[i, STRIP + size :] = np.asarray(im)
    return out


def gif_stride(steps: int, frame_shape: tuple[int, int], fps: float = FPS, max_bytes: int = MAX_GIF_BYTES) -> int:
    """The stride whose GIF of a `steps`-step episode should stay under `max_bytes`: at most
    0.9 · max_bytes / (H · W · GIF_BYTES_PER_PIXEL) frames (10 % margin for harder scenes), and frames no shorter
    than GIF_MIN_FRAME_S (a faster game keeps every 2nd step rather than play slowed down)."""
    h, w = frame_shape
    max_frames = max(1, int(0.9 * max_bytes / (h * w * GIF_BYTES_PER_PIXEL)))
    return max(1, math.ceil(steps / max_frames), math.ceil(GIF_MIN_FRAME_S * fps - 1e-9))


def save_episode_gif(
    path: Path, frames: dict[str, np.ndarray], stride: int = 1, fps: float = FPS, max_bytes: int = MAX_GIF_BYTES
) -> int:
    """Write the labelled panels of one episode as a GIF of at most `max_bytes` and return the stride it kept.

    The stride is the larger of `stride` (`evaluate.gif_stride`) and `gif_stride`'s for the episode's length: a
    short episode keeps every step, a 2100-step one about every 9th (≈ 230 frames, 3.1 MB on ViZDoom take-cover). Each frame
    lasts stride / fps seconds, so the GIF plays in real time whatever it dropped. Should a scene encode larger than
    GIF_BYTES_PER_PIXEL assumes, the stride grows by the overshoot and the GIF is encoded again (in memory: the file
    is written once, atomically)."""
    from wm.core.atomic import atomic_write_bytes
    from wm.core.media import encode_gif, gif_durations

    steps = min(len(frames[k]) for k in PANELS if k in frames) if any(k in frames for k in PANELS) else 0
    if steps == 0:
        raise WMError(f"{path}: nothing to record (no frames in {sorted(frames)})")
    probe = episode_panels({k: v[:1] for k, v in frames.items()}, 1)  # the frame's size, labels included
    stride = max(int(stride), gif_stride(steps, probe.shape[1:3], fps, max_bytes))
    while True:
        panels = episode_panels(frames, stride)
        # frame i stands for steps i·stride … (i + 1)·stride − 1 (the last one for what is left)
        data = encode_gif(panels, gif_durations([min((i + 1) * stride, steps) / fps for i in range(len(panels))]))
        if len(data) <= max_bytes:
            break
        if len(panels) == 1:
            raise WMError(f"{path}: one frame alone takes {len(data)} bytes, above the {max_bytes}-byte bound")
        stride = max(stride + 1, math.ceil(stride * len(data) / (0.9 * max_bytes)))
    atomic_write_bytes(path, data)
    return stride


def dream_preview_frames(rollouts: Sequence[np.ndarray], min_width: int = PREVIEW_MIN_WIDTH) -> np.ndarray:
    """M's dream rollouts (each (T_i, H, W, 3)) side by side as (max T_i, k·H, k·n·W, 3) frames: a finished rollout
    holds its last frame so the panels stay in step, and the whole is upscaled by the smallest whole factor k that
    makes it `min_width` wide (nearest neighbour: V's pixels stay sharp squares)."""
    from wm.core.media import to_uint8

    if not len(rollouts):
        raise WMError("no dream rollouts to preview")
    rollouts = [to_uint8(np.asarray(f)) for f in rollouts]
    t_max = max(len(f) for f in rollouts)
    padded = [np.concatenate([f, np.repeat(f[-1:], t_max - len(f), 0)]) for f in rollouts]
    frames = np.concatenate(padded, axis=2)
    k = max(1, math.ceil(min_width / frames.shape[2]))
    return frames.repeat(k, axis=1).repeat(k, axis=2) if k > 1 else frames


def dream_filmstrip(rollouts: Sequence[np.ndarray], columns: int = 8) -> np.ndarray:
    """One picture of the dream rollouts for TensorBoard: a row per rollout, `columns` evenly spaced steps of it."""
    from wm.core.media import image_grid

    rows = []
    for f in rollouts:
        f = np.asarray(f)
        rows.append(f[np.unique(np.linspace(0, len(f) - 1, min(columns, len(f))).astype(int))])
    return image_grid(rows)


def save_dream_preview(path: Path, rollouts: Sequence[np.ndarray], log: Any = None, fps: int = 20) -> int:
    """`mdnrnn/dream_preview.gif` from M's dream rollouts (`dream_preview_frames`), and with a logger its filmstrip
    as the TensorBoard image "mdnrnn/dream_preview" (`Logger.image`). Returns the GIF's number of frames."""
    from wm.core.media import save_gif

    frames = dream_preview_frames(rollouts)
    save_gif(path, frames, fps=fps)
    if log is not None:
        log.image("mdnrnn/dream_preview", dream_filmstrip(rollouts))
    return len(frames)
