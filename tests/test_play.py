"""`wm play`: the step loop both front ends share, the `--serve` protocol, the pygame window."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")

from tests.helpers import tiny_cfg  # noqa: E402
from wm.core.config import update  # noqa: E402
from wm.core.rundir import RunDir  # noqa: E402
from wm.tools.play import Frame, PlaySession, key_action, run_window, serve  # noqa: E402

AGENT = "wm/agents/doom_small_s2"


@pytest.fixture(scope="module")
def agent():
    run = RunDir(Path(__file__).resolve().parent.parent / AGENT)
    return run, update(run.load_config(), {"dream": {"max_steps": 12}})


def test_keys_map_to_controller_actions():
    assert key_action("doom_takecover", set()).tolist() == [0.0]
    assert key_action("doom_takecover", {"left"}).tolist() == [-1.0]
    assert key_action("doom_takecover", {"left", "right"}).tolist() == [0.0]
    assert key_action("carracing", set()).tolist() == [0.0, -1.0, 0.0]  # gas (a+1)/2 = 0, no brake
    np.testing.assert_allclose(key_action("carracing", {"right", "up", "down"}), [1.0, 1.0, 0.8])


def test_keys_are_refused_where_no_mapping_exists(tmp_path):
    """A gym env's 18 Atari actions have no keys: playing is refused in one line before anything loads (the Doom
    keys' one column once reached M's 18-wide action input); watching C (--agent) is still allowed."""
    from wm.core.errors import WMError

    with pytest.raises(WMError, match=r"no keyboard mapping for gym:ALE/Boxing-v5's actions .* --agent"):
        PlaySession(tiny_cfg(env="atari_boxing"), RunDir(tmp_path / "nothing"))
    assert not (tmp_path / "nothing").exists()


def test_dream_episode_follows_the_keys_ends_and_restarts(agent):
    """Keys are M's input (different keys, different dream), the episode ends at dream.max_steps, r starts anew."""
    run, cfg = agent
    s = PlaySession(cfg, run, seed=5)
    first = s.reset()
    assert first.step == 0 and first.image.shape == (256, 256, 3) and first.temperature == cfg.dream.temperature
    lefts = [s.step({"left"}) for _ in range(6)]
    assert [f.action for f in lefts] == [[-1.0]] * 6 and lefts[-1].step == 6 and lefts[-1].score == 6.0
    s.reset(seed=5)
    rights = [s.step({"right"}) for _ in range(6)]
    assert not np.array_equal(rights[-1].image, lefts[-1].image)  # M saw other actions
    s.reset(seed=5)
    again = [s.step({"left"}) for _ in range(6)]
    np.testing.assert_array_equal(again[-1].image, lefts[-1].image)  # the same seed and keys: the same dream
    while not (f := s.step(set())).done:
        pass
    assert f.step == 12 and s.step({"left"}).step == 12  # over until restarted
    assert s.reset().step == 0


def test_agent_mode_ignores_the_keys(agent):
    run, cfg = agent
    s = PlaySession(cfg, run, agent=True, seed=1)
    s.reset()
    a = [s.step({"left"}).action for _ in range(5)]
    s.reset(seed=1)
    b = [s.step({"right"}).action for _ in range(5)]
    assert a == b and any(x != [-1.0] for x in a)


def test_serve_protocol(agent):
    """The TUI's side: JSON lines in, frames out (PNG of the frame), bad requests answered, quit ends it."""
    from PIL import Image

    run, cfg = agent
    s = PlaySession(cfg, run, seed=2)
    lines = ['{"op": "reset"}', '{"op": "step", "keys": ["left", "jump"]}', "nonsense", '{"op": "fly"}', '{"op": "quit"}']
    out = io.StringIO()
    assert serve(s, io.StringIO("\n".join(lines) + "\n"), out) == 0
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert replies[0] == {"ready": True, "env": "doom_takecover", "mode": "dream", "keys": ["left", "right"]}
    assert replies[1]["step"] == 0 and replies[2]["step"] == 1 and replies[2]["action"] == [-1.0]
    img = Image.open(io.BytesIO(base64.b64decode(replies[2]["png"])))
    assert img.size == (256, 256)
    assert "not JSON" in replies[3]["error"] and "unknown op 'fly'" in replies[4]["error"] and len(replies) == 5


def test_pygame_window_runs_headless(agent, monkeypatch):
    """The pygame front end under SDL's dummy video driver: scripted keys drive the session, `restart` restarts."""
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    run, cfg = agent
    s = PlaySession(update(cfg, {"dream": {"max_steps": 50}}), run, seed=3)
    last = run_window(s, fps=1000, max_frames=9, script=[{"left"}] * 5 + [{"restart"}] + [{"right"}] * 3)
    assert isinstance(last, Frame) and last.step == 4 and last.action == [1.0]  # reset at frame 6, then 4 steps


@pytest.mark.env
def test_real_game_panels(agent):
    """Real mode: the game's screen, V's input and V's reconstruction side by side; C acts with --agent."""
    run, cfg = agent
    s = PlaySession(cfg, run, real=True, agent=True, seed=4)
    try:
        f = s.reset()
        for _ in range(3):
            f = s.step()
        assert f.panels == ("game screen", "V's input", "V's reconstruction") and f.image.shape[0] == 256
        assert f.image.shape[1] > 2 * 256 and f.step == 3 and f.score == 3.0 and f.temperature is None
    finally:
        s.close()


CAR = "wm/agents/carracing_small_s0"


@pytest.fixture(scope="module")
def car():
    run = RunDir(Path(__file__).resolve().parent.parent / CAR)
    return run, update(run.load_config(), {"dream": {"max_steps": 12}})


def test_carracing_dream_follows_steer_gas_and_brake(car):
    """The shipped CarRacing agent's dream driven from the keys: ← → steer, ↑ gas, ↓ brake are M's action input; the
    score is M's reward head's (not +1 a step); the episode ends at dream.max_steps."""
    run, cfg = car
    s = PlaySession(cfg, run, seed=3)
    first = s.reset()
    assert first.step == 0 and first.image.shape == (256, 256, 3)
    gas = [s.step({"up"}) for _ in range(8)]
    assert [f.action for f in gas] == [[0.0, 1.0, 0.0]] * 8
    s.reset(seed=3)
    turn = [s.step({"left", "down"}) for _ in range(8)]
    assert turn[0].action == pytest.approx([-1.0, 0.0, 0.8])  # the env's action: steer left, no gas, brake 0.8
    assert not np.array_equal(gas[-1].image, turn[-1].image)  # M saw other actions
    assert gas[-1].score != 8.0 and gas[-1].score != turn[-1].score  # M's predicted rewards
    while not (f := s.step({"up"})).done:
        pass
    assert f.step == 12
    out = io.StringIO()
    assert serve(PlaySession(cfg, run, seed=3), io.StringIO('{"op": "reset"}\n{"op": "quit"}\n'), out) == 0
    assert json.loads(out.getvalue().splitlines()[0])["keys"] == ["left", "right", "up", "down"]
