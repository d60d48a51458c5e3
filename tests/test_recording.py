"""Episode GIFs (wm.rollouts.recording): labelled panels, the size bound on long episodes, real-time playback, and
M's dream preview. Synthetic frames, no env and no TensorFlow."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PIL import Image

from wm.core.errors import WMError
from wm.rollouts import recording as R


def game_frames(steps: int, h: int = 64, w: int = 64, seed: int = 0) -> np.ndarray:
    """Frames like ViZDoom take-cover's: a textured ceiling, wall band and floor that pan with the camera, and
    fireballs that drift. Game frames, not noise: GIF's LZW finds their runs, as on the real screens."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    grain = rng.integers(0, 24, (h, 4 * w)).astype(np.int16)
    balls = rng.uniform(0, 1, (4, 4))
    out = np.empty((steps, h, w, 3), np.uint8)
    band = slice(h // 3, 2 * h // 3)
    for t in range(steps):
        f = np.empty((h, w, 3), np.int16)
        f[: h // 3], f[band], f[2 * h // 3 :] = (60, 60, 70), (110, 80, 50), (70, 60, 40)
        pan = np.roll(grain, int(8 * np.sin(t / 40.0) * w / 64), axis=1)[:, :w, None]
        f += pan // 3  # the floor's and ceiling's texture
        f[band] += pan[band]
        for bx, by, vx, r in balls:
            cx, cy = (bx * w + (vx - 0.5) * t * 0.7) % w, (by * h * 0.6 + 0.2 * h + t * 0.3 * (r + 0.5)) % h
            f[(xx - cx) ** 2 + (yy - cy) ** 2 < ((2 + 5 * r) * w / 64) ** 2] = (230, 120 + int(80 * r), 30)
        out[t] = np.clip(f, 0, 255)
    return out


def blurred(x: np.ndarray) -> np.ndarray:
    """A soft copy of `x`, like V's reconstructions."""
    y = x.astype(np.float32)
    for _ in range(2):
        for ax in (1, 2):
            y = (np.roll(y, 1, ax) + y + np.roll(y, -1, ax)) / 3
    return y.astype(np.uint8)


def episode(steps: int, reward: float = 1.0) -> dict[str, np.ndarray]:
    """A recorded real episode as `record_episode` returns it: CarRacing-sized raw screens, V's input, a blurred
    reconstruction, and a reward per step."""
    x = game_frames(steps)
    return {
        "real": game_frames(steps, 96, 96, seed=1),
        "input": x,
        "reconstruction": blurred(x),
        "reward": np.full(steps, reward),
    }


def gif_frames(path) -> tuple[list[np.ndarray], list[int]]:
    """Every frame of a GIF as RGB and its duration (ms)."""
    frames, durations = [], []
    with Image.open(path) as im:
        for i in range(im.n_frames):
            im.seek(i)
            frames.append(np.asarray(im.convert("RGB")))
            durations.append(int(im.info["duration"]))
    return frames, durations


def strips(frame: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The label strip above the panels and the one below them."""
    return frame[: R.STRIP], frame[R.STRIP + R.PANEL_SIZE :]


def n_colours(region: np.ndarray) -> int:
    return len(np.unique(region.reshape(-1, 3), axis=0))


def test_a_2100_step_episode_stays_under_the_bound_in_real_time(tmp_path):
    steps, path = 2100, tmp_path / "episode_000.gif"
    stride = R.save_episode_gif(path, episode(steps))
    assert path.stat().st_size <= R.MAX_GIF_BYTES == 5_000_000
    assert stride > 1
    frames, durations = gif_frames(path)
    assert len(frames) == math.ceil(steps / stride)
    # real time: the kept frames last as long as the steps they stand for, to the GIF's centisecond
    assert abs(sum(durations) - steps / R.FPS * 1000) <= 10
    assert min(durations) >= 20  # browsers slow down shorter frames
    top, bottom = strips(frames[0])
    assert n_colours(top) > 1 and n_colours(bottom) > 1  # text on both strips, not bare background
    assert not np.array_equal(strips(frames[-1])[1], bottom)  # the step and return move on
    assert np.array_equal(strips(frames[-1])[0], top)  # the panel names stay


def test_a_short_episode_keeps_every_step(tmp_path):
    steps, path = 40, tmp_path / "short.gif"
    assert R.save_episode_gif(path, episode(steps)) == 1
    frames, durations = gif_frames(path)
    assert len(frames) == steps
    assert abs(sum(durations) - steps / R.FPS * 1000) <= 10
    # the labelled frame: names above, the panels at PANEL_SIZE, one line of step and return below
    assert frames[0].shape == (2 * R.STRIP + R.PANEL_SIZE, 3 * (R.PANEL_SIZE + 4) - 4, 3)


def test_the_configured_stride_is_a_floor(tmp_path):
    path = tmp_path / "strided.gif"
    assert R.save_episode_gif(path, episode(40), stride=3) == 3
    assert len(gif_frames(path)[0]) == math.ceil(40 / 3)


def test_a_scene_harder_than_assumed_gets_a_wider_stride_not_a_bigger_file(tmp_path):
    """Noise costs GIF far more than GIF_BYTES_PER_PIXEL: the first stride overshoots and the encoder widens it."""
    rng = np.random.default_rng(0)
    noise = {k: rng.integers(0, 256, (300, 64, 64, 3), dtype=np.uint8) for k in ("input", "reconstruction")}
    bound = 400_000
    path = tmp_path / "noise.gif"
    first = R.gif_stride(300, R.episode_panels({k: v[:1] for k, v in noise.items()}).shape[1:3], max_bytes=bound)
    stride = R.save_episode_gif(path, noise, max_bytes=bound)
    assert path.stat().st_size <= bound
    assert stride > first


def test_panels_are_labelled_with_the_return_so_far():
    frames = episode(7, reward=2.5)
    lines = R._step_lines(np.arange(0, 7, 3), np.array([0.0, 7.5, 15.0]))
    assert lines == [["step 0", "return 0.0"], ["step 3", "return 7.5"], ["step 6", "return 15.0"]]
    out = R.episode_panels(frames, stride=3)
    assert out.shape == (3, 2 * R.STRIP + R.PANEL_SIZE, 3 * (R.PANEL_SIZE + 4) - 4, 3)
    # one panel (the dream) is too narrow for "step t  return R" on one line: two lines
    dream = R.episode_panels({"dream": frames["input"], "reward": np.full(7, -1e9)})
    assert dream.shape == (7, 3 * R.STRIP + R.PANEL_SIZE, R.PANEL_SIZE, 3)
    without_reward = R.episode_panels({"dream": frames["input"]})
    assert without_reward.shape == (7, 2 * R.STRIP + R.PANEL_SIZE, R.PANEL_SIZE, 3)


def test_a_recording_without_panels_is_one_line_error(tmp_path):
    with pytest.raises(WMError, match="nothing to record") as e:
        R.save_episode_gif(tmp_path / "x.gif", {"reward": np.ones(3)})
    assert "\n" not in str(e.value)
    assert not (tmp_path / "x.gif").exists()


class _Images:
    def __init__(self):
        self.got: list[tuple[str, tuple[int, ...]]] = []

    def image(self, tag, img, step=None):
        self.got.append((tag, np.asarray(img).shape))


def test_dream_preview_is_at_least_256_px_wide_nearest_neighbour(tmp_path):
    rollouts = [game_frames(10, seed=2), game_frames(7, seed=3)]  # two 64-px rollouts: 128 px side by side
    path, log = tmp_path / "dream_preview.gif", _Images()
    assert R.save_dream_preview(path, rollouts, log) == 10
    with Image.open(path) as im:
        assert im.size[0] >= R.PREVIEW_MIN_WIDTH == 256
        assert im.size == (256, 128) and im.n_frames == 10
    frames = R.dream_preview_frames(rollouts)
    assert np.array_equal(frames[0, ::2, ::2], np.concatenate([rollouts[0][0], rollouts[1][0]], axis=1))
    assert np.array_equal(frames[0, 1::2, 1::2], frames[0, ::2, ::2])  # 2×2 blocks: nearest, no smoothing
    assert np.array_equal(frames[9, ::2, 128::2], rollouts[1][-1])  # the shorter rollout holds its last frame
    assert log.got == [("mdnrnn/dream_preview", (2 + 2 * 66, 2 + 8 * 66, 3))]  # a row of 8 steps per rollout
