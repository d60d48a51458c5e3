"""The fast CarRacing renderer (`env.renderer: fast`, wm/envs/car_render.py) against gymnasium's.

One seeded 100-step trajectory is played by both renderers with the same actions (module fixture, ~2 s): physics,
rewards and termination must be identical, the frames close after the paper's preprocessing.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import tiny_cfg
from wm.core.config import load
from wm.core.errors import WMError

pytestmark = pytest.mark.env

STEPS = 100
ZOOM_STEPS = 50  # gymnasium's camera zooms in over the first second


def _actions(seed: int, n: int) -> np.ndarray:
    """Controller-space actions: a smooth random walk, so the car speeds up, brakes and turns."""
    rng = np.random.default_rng(seed)
    a = np.clip(np.cumsum(rng.normal(0.0, 0.15, (n, 3)), axis=0), -1.0, 1.0)
    a[:, 1] = np.maximum(a[:, 1], 0.2)  # keep some gas on
    return a.astype(np.float32)


def _play(renderer: str, seed: int, actions: np.ndarray, env=None) -> dict:
    from wm.envs import make_env

    own = env is None
    if own:
        env = make_env(load(["carracing"], [f"env.renderer={renderer}", f"env.max_steps={STEPS}"]), keep_raw=True)
    try:
        obs, info = env.reset(seed=seed)
        out = {"obs": [obs], "raw": [info["raw"]], "rew": [], "term": [], "trunc": [], "car": []}
        for a in actions:
            obs, r, term, trunc, info = env.step(a)
            hull = env.inner.car.hull
            out["car"].append((*hull.position, hull.angle, *hull.linearVelocity, hull.angularVelocity))
            out["obs"].append(obs)
            out["raw"].append(info["raw"])
            out["rew"].append(r)
            out["term"].append(term)
            out["trunc"].append(trunc)
        return {k: np.asarray(v) for k, v in out.items()}
    finally:
        if own:
            env.close()


@pytest.fixture(scope="module")
def both() -> dict:
    actions = _actions(0, STEPS)
    return {r: _play(r, 4, actions) for r in ("official", "fast")}


def test_fast_renderer_deterministic_for_a_seed():
    """Same seed and actions → identical frames, also after another episode (caches hold no episode state)."""
    from wm.envs import make_env

    actions = _actions(1, 60)  # crosses the end of the zoom (step 50)
    first = _play("fast", 7, actions)
    env = make_env(load(["carracing"], ["env.renderer=fast", f"env.max_steps={STEPS}"]), keep_raw=True)
    try:
        _play("fast", 3, _actions(2, 70), env)  # a different track first
        again = _play("fast", 7, actions, env)
    finally:
        env.close()
    np.testing.assert_array_equal(first["raw"], again["raw"])
    np.testing.assert_array_equal(first["obs"], again["obs"])


def test_fast_frames_have_the_official_shape_and_range(both):
    off, fast = both["official"]["raw"], both["fast"]["raw"]
    assert fast.shape == off.shape == (STEPS + 1, 96, 96, 3) and fast.dtype == off.dtype == np.uint8
    assert both["fast"]["obs"].shape == (STEPS + 1, 64, 64, 3) and both["fast"]["obs"].dtype == np.uint8
    for frame in fast[::10]:
        scene = frame[:84]
        assert scene.std() > 10 and len(np.unique(scene.reshape(-1, 3), axis=0)) > 20  # not blank: road, grass, car
        assert frame[84:].max(-1).mean() < 60  # the indicator bar: black with a few bars
    # gymnasium's smoothscale maps a flat value v to max(v − 2, 0): the same levels come out (grass, road, black)
    levels = set(map(tuple, np.unique(fast[60:, :84].reshape(-1, 3), axis=0)))
    assert {(100, 228, 100), (100, 202, 100), (100, 100, 100)} <= levels
    assert 0 <= fast.min() and fast.max() <= 253 and off.max() <= 253


def test_same_actions_same_rewards_and_termination(both):
    off, fast = both["official"], both["fast"]
    np.testing.assert_array_equal(off["car"], fast["car"])  # exactly: the physics is gymnasium's, untouched
    np.testing.assert_array_equal(off["rew"], fast["rew"])
    np.testing.assert_array_equal(off["term"], fast["term"])
    np.testing.assert_array_equal(off["trunc"], fast["trunc"])
    assert off["trunc"][-1] and np.ptp(off["rew"]) > 1  # the car reached tiles: rewards were not all −0.1


def test_preprocessed_frames_close_to_official(both):
    """Measured on this trajectory: 0.9–1.4 levels (0..255) mean |Δ| per frame while zooming, 0.23–0.29 after (3 tracks)."""
    diff = np.abs(both["official"]["obs"].astype(np.int16) - both["fast"]["obs"]).mean(axis=(1, 2, 3))
    assert diff[:ZOOM_STEPS].mean() < 2.5
    assert diff[ZOOM_STEPS:].mean() < 0.8
    assert np.median(diff) < 0.8
    raw = np.abs(both["official"]["raw"][:, :84].astype(np.int16) - both["fast"]["raw"][:, :84]).mean()
    assert raw < 0.8


def test_unknown_renderer_is_one_clear_error():
    from wm.envs import make_env

    with pytest.raises(WMError, match=r"'env\.renderer' must be official \| fast, got 'opengl'"):
        make_env(load(["carracing"], ["env.renderer=opengl"]))


def test_scores_use_the_official_renderer(monkeypatch):
    """A run trained with the fast renderer is still scored (and recorded) with gymnasium's own."""
    from wm.core.rundir import RunDir
    from wm.envs.setup import scoring_config
    from wm.rollouts import engine
    from wm.rollouts.evaluation import play

    cfg = tiny_cfg("env.renderer=fast", env="carracing")
    assert scoring_config(cfg).env.renderer == "official" and cfg.env.renderer == "fast"
    seen = []
    monkeypatch.setattr(engine, "evaluate_seeds", lambda spec, *a, **k: seen.append(spec.facts.env.renderer))
    play(cfg, RunDir("unused"), "real", None, [1, 2])
    assert seen == ["official"]


def test_texture_frames_show_the_tiles_the_car_recolours():
    """After the zoom the world is sampled from a texture drawn at reset; the tiles that FrictionDetector recolours
    as the car drives over them must be drawn again in it. Visited tiles turn magenta here (the road colour they take)
    so that it shows; the same state drawn with polygons is the reference."""
    import gymnasium as gym

    from wm.envs.car_render import FastCarRacing

    env = FastCarRacing(**gym.spec("CarRacing-v3").kwargs)
    try:
        env.reset(seed=4)
        env.road_color = np.array([230.0, 0.0, 230.0])
        for _ in range(80):
            env.step(np.array([0.0, 0.4, 0.0]))
        assert env.t > 1 and env.tile_visited_count > 5
        texture = env._render("state_pixels")
        env._world = None  # the polygon path
        polygons = env._render("state_pixels")
    finally:
        env.close()

    def magenta(frame):
        return int(((frame[..., 0] > 150) & (frame[..., 1] < 80) & (frame[..., 2] > 150)).sum())

    assert magenta(polygons) > 100
    assert abs(magenta(texture) - magenta(polygons)) < 0.1 * magenta(polygons)
    assert np.abs(texture.astype(np.int16) - polygons).mean() < 0.5
