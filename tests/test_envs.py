"""Preprocessing vs independent NumPy formulas, action mappings, policy statistics, and the real envs (marked env)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from wm.core.config import load
from wm.core.errors import WMError
from wm.envs import action_dim, m_action
from wm.envs.doom import doom_choice
from wm.envs.policies import Brownian, Hold, RandomAgent, make_policy
from wm.envs.preprocess import CAR_CROP, DOOM_CROP, clean, ha2018

# ---------------------------------------------------------------- independent reference formulas


def ref_bytescale(frame: np.ndarray) -> np.ndarray:
    """scipy.misc.bytescale(frame / 255.0) as written in scipy ≤ 1.2 (no lookup table)."""
    data = frame.astype(np.float64) / 255.0
    cmin, cmax = data.min(), data.max()
    cscale = cmax - cmin or 1
    return (((data - cmin) * (255.0 / cscale)).clip(0, 255) + 0.5).astype(np.uint8)


def _pil_bilinear_coeffs(in_size: int, out_size: int) -> list[tuple[int, np.ndarray]]:
    """Pillow's Resample.c precompute_coeffs + normalize_coeffs_8bpc for the bilinear (triangle) filter."""
    scale = in_size / out_size
    fscale = max(scale, 1.0)
    support = 1.0 * fscale
    out = []
    for i in range(out_size):
        center = (i + 0.5) * scale
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), in_size)
        x = (np.arange(lo, hi) - center + 0.5) / fscale
        w = np.clip(1.0 - np.abs(x), 0.0, None)
        w = w / w.sum()
        out.append((lo, np.floor(0.5 + w * (1 << 22)).astype(np.int64)))
    return out


def ref_resize(img: np.ndarray, size: int) -> np.ndarray:
    """Separable fixed-point bilinear resize (horizontal pass, uint8, then vertical), as Pillow does it."""

    def one_axis(a: np.ndarray, out_size: int) -> np.ndarray:  # resample axis 0
        res = np.empty((out_size,) + a.shape[1:], dtype=np.uint8)
        for i, (lo, k) in enumerate(_pil_bilinear_coeffs(a.shape[0], out_size)):
            acc = (1 << 21) + np.tensordot(k, a[lo : lo + len(k)].astype(np.int64), axes=(0, 0))
            res[i] = np.clip(acc >> 22, 0, 255)
        return res

    h = one_axis(img.transpose(1, 0, 2), size).transpose(1, 0, 2)
    return one_axis(h, size)


def ref_authors_wrap(v: np.ndarray) -> np.ndarray:
    """`((1.0 - v) * 255).round().astype(np.uint8)` on uint8 v, with the uint8 cast as a mod-256 wrap (§1a)."""
    return np.mod(np.round((1.0 - v.astype(np.float64)) * 255).astype(np.int64), 256).astype(np.uint8)


def synthetic_frames(shape: tuple[int, int]) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    h, w = shape
    grad = np.broadcast_to(np.linspace(30, 200, w)[None, :, None], (h, w, 3)).astype(np.uint8).copy()
    blocks = np.kron(rng.integers(40, 180, (h // 8 + 1, w // 8 + 1, 3)), np.ones((8, 8, 1)))[:h, :w].astype(np.uint8)
    return [
        rng.integers(0, 256, (h, w, 3), dtype=np.uint8),  # full range
        rng.integers(60, 140, (h, w, 3), dtype=np.uint8),  # narrow range: the stretch matters
        grad,
        blocks,
        np.full((h, w, 3), 77, np.uint8),  # constant: cscale = 0 → 1
    ]


@pytest.mark.parametrize("raw_shape,crop", [((96, 96), CAR_CROP), ((240, 320), DOOM_CROP)])
def test_ha2018_and_clean_match_reference(raw_shape, crop):
    t, b, left, r = crop
    for frame in synthetic_frames(raw_shape):
        c = frame[t:b, left:r]
        want_clean = ref_resize(c, 64)
        want_ha = ref_authors_wrap(ref_resize(ref_bytescale(c), 64))
        got_ha, got_clean = ha2018(frame, crop), clean(frame, crop)
        assert got_ha.shape == got_clean.shape == (64, 64, 3) and got_ha.dtype == got_clean.dtype == np.uint8
        np.testing.assert_array_equal(got_clean, want_clean)
        np.testing.assert_array_equal(got_ha, want_ha)


def test_ha2018_black_becomes_white_and_values_drop_by_one():
    frame = np.full((96, 96, 3), 120, np.uint8)
    frame[:, :48] = 10  # the frame minimum → 0 after the stretch → 255 after the wrap
    frame[:, 48:] = 200  # the maximum → 255 → 254
    out = ha2018(frame, CAR_CROP)
    assert out[32, 5].tolist() == [255, 255, 255]
    assert out[32, 60].tolist() == [254, 254, 254]


def test_crops_cover_the_intended_regions():
    assert CAR_CROP == (0, 84, 0, 96)  # drops the 12-row indicator bar (§1a)
    t, b, left, r = DOOM_CROP
    assert (b - t) / (r - left) == pytest.approx(400 / 640)  # PPQ's 400×640 aspect (§1b)


# ---------------------------------------------------------------- action mappings


def test_action_dims_and_m_action():
    assert action_dim("carracing") == 3 and action_dim("doom_takecover") == 1
    with pytest.raises(WMError):
        action_dim("pong")
    a = np.array([[-0.5, -1.0, -0.3], [0.2, 0.0, 0.4], [1.0, 1.0, 1.0]], np.float32)
    want = np.stack([a[:, 0], (a[:, 1] + 1) / 2, np.clip(a[:, 2], 0, 1)], -1)
    np.testing.assert_allclose(m_action("car", a), want)
    np.testing.assert_allclose(m_action("car", a[None])[0], want)  # batched (..., A)
    d = np.array([[-0.9], [0.1], [0.7]], np.float32)
    np.testing.assert_array_equal(m_action("none", d), d)


def test_doom_thresholds():
    a = np.array([-1.0, -0.34, -0.333, 0.0, 0.333, 0.34, 1.0])
    np.testing.assert_array_equal(doom_choice(a), [-1, -1, 0, 0, 0, 1, 1])


# ---------------------------------------------------------------- policies


def _hold_lengths(actions: np.ndarray) -> np.ndarray:
    change = np.flatnonzero(np.diff(actions) != 0) + 1
    return np.diff(change)


def test_hold_exact_rule_lengths_uniform_1_to_10():
    h = Hold(np.random.default_rng(1), 1, 1, 10, "exact")
    a = np.array([h.act()[0] for _ in range(30000)])
    lengths = _hold_lengths(a)
    assert lengths.min() >= 1 and lengths.max() <= 10
    freq = np.bincount(lengths, minlength=11)[1:] / len(lengths)
    assert np.all(np.abs(freq - 0.1) < 0.02)
    assert np.all(np.abs(a) <= 1) and abs(a.mean()) < 0.05


def test_hold_ha2018_rule_is_the_authors_loop():
    rng = np.random.default_rng(5)
    h = Hold(rng, 1, 1, 10, "ha2018")
    got = np.array([h.act()[0] for _ in range(3000)])
    # doomrnn/extract.py (§1b), same generator calls in the same order
    r = np.random.default_rng(5)
    repeat, action, want = r.integers(1, 11), 0.0, []
    for frame in range(3000):
        if frame % repeat == 0:
            action = r.uniform(-1.0, 1.0, 1)[0]
            repeat = r.integers(1, 11)
        want.append(action)
    np.testing.assert_array_equal(got, np.array(want, np.float32))
    lengths = _hold_lengths(got)
    assert lengths.min() >= 1 and lengths.max() <= 10


# Actions 0, 13 and 39 of three 40-step episodes from seed 7, recorded from the hold policy as it stood: any change
# to its generator calls (their kind, count or order) moves them.
HOLD_PINS = {
    "ha2018": [[0.7944275736808777, 0.7471069097518921, 0.9910005927085876],
               [0.24435846507549286, 0.22507920861244202, -0.504970133304596],
               [-0.6151956915855408, -0.5987865328788757, 0.48354190587997437]],
    "exact": [[0.7944275736808777, 0.5513713955879211, -0.44314876198768616],
              [-0.10984738916158676, 0.9910005927085876, 0.029777640476822853],
              [0.8343355655670166, 0.028235293924808502, -0.5987865328788757]],
}  # fmt: skip
HOLD_NEXT = {"ha2018": 91495, "exact": 720976}  # the generator's next integers(10**6) after the three episodes


@pytest.mark.parametrize("rule", ["ha2018", "exact"])
def test_hold_draws_are_pinned_across_episodes(rule):
    for build in (
        lambda rng: Hold(rng, 1, 1, 10, rule),
        lambda rng: make_policy(load(["doom_takecover"], [f"collect.hold_rule={rule}"]), rng, 1),
    ):
        h = build(np.random.default_rng(7))
        got = []
        for ep in range(3):
            if ep:
                h.reset()
            a = [h.act()[0] for _ in range(40)]
            got.append([a[0], a[13], a[39]])
        np.testing.assert_array_equal(np.array(got, np.float32), np.array(HOLD_PINS[rule], np.float32))
        assert int(h.rng.integers(10**6)) == HOLD_NEXT[rule]


def test_random_agent_quantiles_match_section_1a():
    # §1a (simulated over 4000 episodes): steer quartiles ≈ ±0.10, gas median 0.50 and 5/95 % ≈ 0.15/0.84,
    # brake > 0 on 50 % of steps and > 0.5 on 7 %.
    p = RandomAgent(np.random.default_rng(0), 3, 0.01)
    acts = []
    for _ in range(2000):
        p.reset()
        acts.append(np.stack([p.act() for _ in range(20)]))
    a = m_action("car", np.concatenate(acts))
    steer, gas, brake = a[:, 0], a[:, 1], a[:, 2]
    assert np.percentile(steer, 25) == pytest.approx(-0.10, abs=0.04)
    assert np.percentile(steer, 75) == pytest.approx(0.10, abs=0.04)
    assert np.percentile(gas, 50) == pytest.approx(0.50, abs=0.02)
    assert np.percentile(gas, 5) == pytest.approx(0.15, abs=0.06)
    assert np.percentile(gas, 95) == pytest.approx(0.84, abs=0.06)
    assert (brake > 0).mean() == pytest.approx(0.5, abs=0.03)
    assert (brake > 0.5).mean() == pytest.approx(0.07, abs=0.03)


def test_brownian_steps_and_bounds():
    p = Brownian(np.random.default_rng(2), 3, 0.05)
    a = np.stack([p.act() for _ in range(5000)])
    assert np.all(np.abs(a) <= 1)
    inner = np.all(np.abs(a[:-1]) < 0.8, axis=1) & np.all(np.abs(a[1:]) < 0.8, axis=1)
    assert np.std(np.diff(a, axis=0)[inner]) == pytest.approx(0.05, rel=0.1)


def test_make_policy_from_config():
    cfg = load(["carracing"])
    assert isinstance(make_policy(cfg, np.random.default_rng(0), 3), RandomAgent)
    cfg = load(["doom_takecover"], ["collect.hold_rule=exact"])
    assert make_policy(cfg, np.random.default_rng(0), 1).rule == "exact"
    with pytest.raises(WMError):
        make_policy(load([], ["collect.policy=nope"]), np.random.default_rng(0), 1)


# ---------------------------------------------------------------- real envs


@pytest.mark.env
@pytest.mark.parametrize("mode", ["ha2018", "clean"])
def test_doom_frames_cap_and_skill(mode):
    from wm.envs import make_env

    env = make_env(
        load(["doom_takecover"], [f"env.preprocess={mode}", "env.max_steps=5", "env.doom_skill=5"]), seed=1, keep_raw=True
    )
    try:
        assert env.game.get_doom_skill() == 5  # the configured skill reaches the game (not the cfg file's 4)
        assert env.action_space.shape == (1,) and env.action_space.low[0] == -1 and env.action_space.high[0] == 1
        obs, info = env.reset()
        assert obs.shape == (64, 64, 3) and obs.dtype == np.uint8 and info["raw"].shape == (240, 320, 3)
        np.testing.assert_array_equal(
            obs, ha2018(info["raw"], DOOM_CROP) if mode == "ha2018" else clean(info["raw"], DOOM_CROP)
        )
        for _ in range(5):
            obs, r, term, trunc, info = env.step(np.array([0.0], np.float32))
            assert obs.shape == (64, 64, 3) and info["raw"].dtype == np.uint8 and r == 1.0
        assert trunc and not term  # the wrapper's max_steps cap
    finally:
        env.close()


@pytest.mark.env
def test_a_doom_game_leaves_nothing_where_wm_runs(tmp_path, monkeypatch):
    """ViZDoom's start writes ./_vizdoom/ and ./_vizdoom.ini: each game starts in its own private folder (two games
    starting at once once raced on one ./_vizdoom/ and the loser segfaulted), removed when the env closes."""
    import os

    from wm.envs import make_env

    monkeypatch.chdir(tmp_path)
    envs = [make_env(load(["doom_takecover"], ["env.max_steps=5"])) for _ in range(2)]
    try:
        for env in envs:
            env.reset(seed=1)
            env.step(np.array([0.0], np.float32))
        folders = [env.folder for env in envs]
        assert len(set(folders)) == 2 and all(os.path.isdir(f) for f in folders)
        assert os.getcwd() == str(tmp_path) and list(tmp_path.iterdir()) == []
    finally:
        for env in envs:
            env.close()
    assert not any(os.path.exists(f) for f in folders)


@pytest.mark.env
def test_doom_action_directions_and_determinism():
    import vizdoom as vzd

    from wm.envs import make_env

    env = make_env(load(["doom_takecover"], ["env.max_steps=40"]))
    g = env.game
    try:

        def displacement(a: float) -> float:
            """Movement along the player's right-hand direction after 8 steps of action a."""
            env.reset(seed=3)
            x0, y0 = g.get_game_variable(vzd.GameVariable.POSITION_X), g.get_game_variable(vzd.GameVariable.POSITION_Y)
            ang = math.radians(g.get_game_variable(vzd.GameVariable.ANGLE))
            for _ in range(8):
                env.step(np.array([a], np.float32))
            dx = g.get_game_variable(vzd.GameVariable.POSITION_X) - x0
            dy = g.get_game_variable(vzd.GameVariable.POSITION_Y) - y0
            return dx * math.sin(ang) - dy * math.cos(ang)  # right of heading (angle counter-clockwise from east)

        assert displacement(0.9) > 5 and displacement(-0.9) < -5 and displacement(0.2) == 0
        assert env.index == {-1: 2, 0: 0, 1: 1}  # ViZDoom 1.3.2's Discrete(3): 0 none, 1 right, 2 left (§10.4)
        runs = []
        for _ in range(2):
            frames = [env.reset(seed=11)[0]]
            for t in range(30):
                frames.append(env.step(np.array([np.sin(t)], np.float32))[0])
            runs.append(np.stack(frames))
        np.testing.assert_array_equal(runs[0], runs[1])
    finally:
        env.close()


@pytest.mark.env
@pytest.mark.parametrize("mode", ["ha2018", "clean"])
def test_carracing_frames_and_cap(mode):
    from wm.envs import make_env

    env = make_env(load(["carracing"], [f"env.preprocess={mode}", "env.max_steps=4"]), keep_raw=True)
    try:
        assert env.action_space.shape == (3,)
        obs, info = env.reset(seed=0)
        assert obs.shape == (64, 64, 3) and obs.dtype == np.uint8 and info["raw"].shape == (96, 96, 3)
        want = ha2018(info["raw"], CAR_CROP) if mode == "ha2018" else clean(info["raw"], CAR_CROP)
        np.testing.assert_array_equal(obs, want)
        for _ in range(4):
            obs, r, term, trunc, info = env.step(np.array([0.0, 1.0, -1.0], np.float32))
        assert trunc and obs.shape == (64, 64, 3)
        if mode == "ha2018":
            assert obs.max() == 255  # the minimum (black-ish) pixels wrap to white (§1a)
    finally:
        env.close()


@pytest.mark.env
@pytest.mark.parametrize("renderer", ["official", "fast"])
def test_carracing_indicators_keep_the_speed_bar(renderer):
    """env.indicators: the whole 96×96 state (with the bar) is resized, and the bar's speed reading shows in the frame."""
    from wm.envs import make_env
    from wm.envs.preprocess import CAR_FULL

    cfg = load(["carracing"], ["env.preprocess=clean", "env.indicators=true", f"env.renderer={renderer}"])
    env = make_env(cfg, keep_raw=True)
    try:
        obs, info = env.reset(seed=0)
        np.testing.assert_array_equal(obs, clean(info["raw"], CAR_FULL))
        assert obs[-6:].mean() < 60  # the black bar fills the bottom rows (the paper's crop has track and grass there)
        still = obs
        for _ in range(60):
            obs, *_ = env.step(np.array([0.0, 1.0, -1.0], np.float32))  # full gas: the speed bar grows
        assert np.abs(obs[-8:].astype(int) - still[-8:]).sum() > 100
    finally:
        env.close()


@pytest.mark.env
def test_carracing_episode_figures_of_scripted_drives():
    """A parked car, one on full gas, one steered off the road, one whose lap the track says is finished: each
    episode's tiles, lap, exits, speed, gas and brake as the script made them."""
    from wm.envs import make_env

    env = make_env(load(["carracing"], ["env.renderer=fast", "env.max_steps=1000"]))
    try:
        env.reset(seed=3)
        for _ in range(40):  # no gas, full brake: the car stays on the start
            env.step(np.array([0.0, -1.0, 1.0], np.float32))
        parked = env.episode_figures()
        assert parked["gas"] == 0.0 and parked["brake"] == 1.0 and parked["speed"] < 0.5
        assert parked["off_track"] == 0 and parked["lap_steps"] == 0 and 0 <= parked["tiles"] < 0.02

        env.reset(seed=3)
        for _ in range(60):  # full gas (gas = (a₁ + 1) / 2 = 1), straight: faster, more tiles
            env.step(np.array([0.0, 1.0, -1.0], np.float32))
        fast = env.episode_figures()
        assert fast["gas"] == 1.0 and fast["brake"] == 0.0 and fast["speed"] > 10 and fast["tiles"] > parked["tiles"]

        env.reset(seed=3)
        for _ in range(300):  # half gas, hard right: off the road onto the grass
            env.step(np.array([1.0, 0.0, -1.0], np.float32))
        assert env.episode_figures()["off_track"] >= 1 and env.episode_figures()["gas"] == 0.5

        env.reset(seed=3)
        for _ in range(5):
            env.step(np.array([0.0, 0.0, -1.0], np.float32))
        env.inner.tile_visited_count = len(env.inner.track)  # the track's own rule: every tile visited ends the lap
        *_, term, _, _ = env.step(np.array([0.0, 0.0, -1.0], np.float32))
        lap = env.episode_figures()
        assert term and lap["lap_steps"] == 6 and lap["tiles"] == 1.0
    finally:
        env.close()


def test_drive_summary_counts_laps_and_averages_the_rest():
    from wm.rollouts.evaluation import drive_summary, format_drive

    eps = [
        {"tiles": 1.0, "lap_steps": 900, "off_track": 0, "speed": 60.0, "gas": 0.5, "brake": 0.0},
        {"tiles": 0.5, "lap_steps": 0, "off_track": 2, "speed": 40.0, "gas": 0.25, "brake": 0.1},
        {"tiles": 0.9, "lap_steps": 700, "off_track": 1, "speed": 50.0, "gas": 0.0, "brake": 0.2},
    ]
    d = drive_summary(eps)
    assert d == {"tiles": 0.8, "laps": 2, "lap_steps": 800.0, "off_track": 1.0, "speed": 50.0, "gas": 0.25, "brake": 0.1}
    assert format_drive(d).startswith("tiles 80.0 %, laps 2 (median 800 steps), off track 1.00")
    assert drive_summary([{}, {}]) == {} and drive_summary([]) == {}
