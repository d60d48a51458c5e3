"""The fast CarRacing renderer's (`FastCarRacing`, wm/envs/car_render.py) shortcut after the zoom against its plain
path, pixel for pixel: frames drawn from palette indices (`WorldTexture.average`, the score's cached blocks) against
the same indices through 32-bit pixels and pygame's smoothscale."""

from __future__ import annotations

import numpy as np
import pygame
import pytest

from wm.envs.car_texture import SHRINK_LUT, block_average, block_table

pytestmark = pytest.mark.env


def test_block_average_is_smoothscale_by_two_then_the_shrink():
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (16, 3)).astype(np.uint8)
    rgb[:3] = [(0, 0, 0), (255, 255, 255), (1, 2, 3)]  # the ends of the range
    pal = rng.integers(0, 16, (48, 64), dtype=np.uint8)
    pal[:20, :20] = 5  # flat areas as well as noise
    pixels = np.zeros((48, 64), np.uint32)
    pixels.view(np.uint8).reshape(48, 64, 4)[..., :3] = rgb[pal]
    small = pygame.transform.smoothscale(pygame.image.frombuffer(pixels, (64, 48), "RGBX"), (32, 24))
    want = SHRINK_LUT[np.frombuffer(pygame.image.tobytes(small, "RGB"), np.uint8).reshape(24, 32, 3)]
    got = np.empty((24, 32, 3), np.uint8)
    block_average(pal, block_table(rgb), got, np.empty((24, 32), np.uint16))
    np.testing.assert_array_equal(got, want)


def _fast_env():
    import gymnasium as gym

    from wm.envs.car_render import FastCarRacing

    return FastCarRacing(**gym.spec("CarRacing-v3").kwargs)


def _smoothscaled(env) -> np.ndarray:
    """The current state drawn from the world's palette indices through 32-bit pixels and smoothscale."""
    world = env._world
    try:
        world.average = lambda pal, out: False
        return env._render("state_pixels")
    finally:
        del world.average


def test_frames_from_palette_indices_equal_the_smoothscaled_ones():
    """A seeded drive (steering, braking, spinning wheels, the score changing): after the zoom every frame, bar and
    score included, is the one that 32-bit pixels and smoothscale give; also with an ABS bar reaching above the bar
    (a wheel spinning at 1000 rad/s) and with the gyro bar across the score."""
    rng = np.random.default_rng(3)
    actions = np.clip(np.cumsum(rng.normal(0.0, 0.3, (140, 3)), axis=0), -1.0, 1.0)
    actions[:, 1:] = np.abs(actions[:, 1:])
    env = _fast_env()
    try:
        env.reset(seed=5)
        for t, a in enumerate(actions):
            env.step(a)  # its frame shows the score before the step's reward: both drawn again here
            if t >= 50:
                np.testing.assert_array_equal(env._render("state_pixels"), _smoothscaled(env), err_msg=f"step {t}")
        assert env.t > 1 and len(env._patches) > 1  # the score changed: several texts' blocks were pasted
        wheel = env.car.wheels[2]
        omega, wheel.omega = wheel.omega, 1000.0
        high = env._render("state_pixels")
        assert (high[72:84, 22:24] == (49, 0, 253)).all()  # the rear ABS bar's colour, above the bar's top
        np.testing.assert_array_equal(high, _smoothscaled(env))
        wheel.omega = omega
        env.car.hull.angularVelocity = 40.0  # the gyro bar runs left across the score: its blocks are not the cached ones
        world, averaged = env._world, []
        world.average = lambda pal, out: averaged.append(1) or type(world).average(world, pal, out)
        across = env._render("state_pixels")
        del world.average
        assert not averaged  # drawn through smoothscale
        np.testing.assert_array_equal(across, _smoothscaled(env))
        assert (across[86, :12] == (253, 0, 0)).all() and (across[87:90, 10:12] == (253, 0, 0)).all()  # red around the score
    finally:
        env.close()


def test_texture_redraws_recoloured_tiles_read_from_road_poly():
    """Tile colours become rows of one array, checked in one comparison a step (test_car_render's recolouring test);
    where a tile's array were not its body's they are re-read from road_poly instead, with the same frames."""
    env = _fast_env()
    try:
        env.reset(seed=4)
        env._tile_colors = None  # as if not linked
        env.road_color = np.array([230.0, 0.0, 230.0])
        for _ in range(80):
            env.step(np.array([0.0, 0.4, 0.0]))
        texture = env._render("state_pixels")
        env._world = None  # the polygon path
        polygons = env._render("state_pixels")
    finally:
        env.close()
    magenta = (texture[..., 0] > 150) & (texture[..., 1] < 80) & (texture[..., 2] > 150)
    assert magenta.sum() > 100
    assert np.abs(texture.astype(np.int16) - polygons).mean() < 0.5
