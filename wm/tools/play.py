"""`python -m wm play --run R [--real] [--agent] [--temperature τ]`: drive inside M's dream (or the real game) yourself.

    python -m wm play --run wm/agents/doom_small_s2                # the shipped Doom agent's dream: you dodge
    python -m wm play --run wm/agents/doom_small_s2 --agent        # watch its C play in the dream
    python -m wm play --run runs/doom --real --agent               # C in the real game: frame | V's input | V's view

The authors let people play in the Doom dream with the keyboard (paper §5). One step loop (`PlaySession`) and two
front ends over it:

* a **pygame window** (this command, when a display exists): keys held are the action — Doom: ← / → (nothing when
  neither); CarRacing: ← / → steer, ↑ gas, ↓ brake — `r` restarts, `t`/`g` raise/lower τ in the dream, `q`/Esc quits;
* the **TUI's play screen** (`p` on a run in `wm tui`), which keeps TensorFlow out of the TUI by running this
  command with `--serve`: JSON lines in (`{"op": "reset"}`, `{"op": "step", "keys": ["left"]}`, `{"op": "quit"}`),
  JSON lines out (step, score, done, τ and the frame as a base64 PNG).

Dream mode shows V's decoding of the dream's z (what M imagines); real mode shows the game's screen, V's input
(the preprocessed 64×64 frame) and V's reconstruction of it side by side. The score is the dream's reward (+1 per
step in Doom, M's reward head where it has one) or the game's. A dream episode ends when M's done fires or at
`dream.max_steps`; `r` starts a new one from another recorded start state.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wm.core.errors import WMError
from wm.envs.setup import family_of, setup

SCALE = 4  # a 64×64 frame is drawn 256×256


def key_action(env: str, keys: set[str] | frozenset[str]) -> np.ndarray:
    """The controller-space action of the keys held, by the env's record (`wm.envs.family`)."""
    return family_of(env).key_action(set(keys))


@dataclass
class Frame:
    """What a front end draws after a step: the panels side by side and the numbers under them."""

    image: np.ndarray  # (H, W, 3) uint8
    step: int
    score: float
    done: bool
    temperature: float | None
    action: list[float] = field(default_factory=list)
    panels: tuple[str, ...] = ()

    def status(self) -> str:
        tau = f"  τ {self.temperature:.2f}" if self.temperature is not None else ""
        end = "  — episode over, r restarts" if self.done else ""
        return f"step {self.step}  score {self.score:.1f}{tau}  action {np.round(self.action, 2).tolist()}{end}"

    def to_json(self) -> dict[str, Any]:
        from PIL import Image

        buf = io.BytesIO()
        Image.fromarray(self.image).save(buf, format="PNG")
        return {
            "step": self.step,
            "score": self.score,
            "done": self.done,
            "temperature": self.temperature,
            "action": self.action,
            "panels": list(self.panels),
            "status": self.status(),
            "png": base64.b64encode(buf.getvalue()).decode("ascii"),
        }


def _upscale(frame: np.ndarray, k: int = SCALE) -> np.ndarray:
    return np.repeat(np.repeat(frame, k, axis=0), k, axis=1)


def _to_height(frame: np.ndarray, height: int) -> np.ndarray:
    from PIL import Image

    h, w = frame.shape[:2]
    return np.asarray(Image.fromarray(frame).resize((max(1, round(w * height / h)), height), Image.NEAREST))


class PlaySession:
    """The step loop both front ends share: one episode at a time, in the dream or the real env, the keys' action or
    C's (`agent`). `reset()` and `step(keys)` return a `Frame`."""

    def __init__(self, cfg, run, real: bool = False, agent: bool = False, temperature: float | None = None, seed: int = 0):
        if not agent and not setup(cfg).family.keys:
            raise WMError(
                f"no keyboard mapping for {cfg.env.name}'s actions (keys drive DoomTakeCover and CarRacing): "
                "watch C play with --agent (w in the TUI)"
            )
        from wm.core import tf_setup

        tf = tf_setup.setup(threads=None, gpu=False)
        from wm.rollouts.world import load_world

        self.cfg, self.real, self.agent = cfg, bool(real), bool(agent)
        self.env_name = cfg.env.name
        self.next_seed = int(seed)
        need = ("vae", "mdnrnn") + (("params",) if agent else ()) + (() if real else ("initial_z",))
        self.world = load_world(setup(cfg), run, need=need, params=run.params("best"))
        vae = self.world.vae
        self._decode = tf.function(lambda z: vae.decode(z), autograph=False)
        self._encode = tf.function(lambda x: vae.encode(x)[0], autograph=False)
        self.temperature = None if real else float(cfg.dream.temperature if temperature is None else temperature)
        self.env = self.policy = self.dream = None
        if real:
            self.env = self.world.setup.open(keep_raw=True)
            if agent:  # C acting through V and M, no exploration: the collect stage's agent policy
                from wm.rollouts.agent import AgentModels, AgentPolicy

                self.policy = AgentPolicy(AgentModels.from_world(self.world), np.random.default_rng(seed), 0.0, 1, 1)
        else:
            self._make_dream()
        self.t, self.score, self.done, self.frame = 0, 0.0, False, None

    def _make_dream(self) -> None:
        from wm.rollouts.dream import world_env

        self.dream = world_env(self.world, self.world.params if self.agent else None, temperature=self.temperature)

    def set_temperature(self, tau: float) -> None:
        """A new dream τ (from the next episode: the current one ends)."""
        if self.real:
            return
        self.temperature = float(np.clip(tau, 0.05, 3.0))
        self._make_dream()
        self.done = True

    # ------------------------------------------------------------------ the loop
    def reset(self, seed: int | None = None) -> Frame:
        seed = self.next_seed if seed is None else int(seed)
        self.next_seed = seed + 1
        self.t, self.score, self.done = 0, 0.0, False
        if self.real:
            obs, info = self.env.reset(seed=seed)
            if self.policy is not None:
                self.policy.rng = np.random.default_rng(seed)
                self.policy.reset()
            self.obs, self.raw = obs, info["raw"]
            return self._real_frame([])
        self.dream.reset(seed=seed)
        return self._dream_frame([])

    def step(self, keys: set[str] | frozenset[str] = frozenset()) -> Frame:
        if self.done:
            return self.frame
        if self.real:
            a = self.policy.act(self.obs) if self.policy is not None else key_action(self.env_name, keys)
            self.obs, r, term, trunc, info = self.env.step(a)
            self.raw = info["raw"]
            self.t, self.score, self.done = self.t + 1, self.score + float(r), bool(term or trunc)
            return self._real_frame(np.asarray(a).tolist())
        if self.agent:
            _, r, term, trunc, info = self.dream.step()
        else:
            a = key_action(self.env_name, keys)
            _, r, term, trunc, info = self.dream.step(self.world.controller.postprocess(a)[None])
        self.t, self.score, self.done = self.t + 1, self.score + float(r), bool(term or trunc)
        return self._dream_frame(np.asarray(info["action"]).tolist())

    def _dream_frame(self, action: list[float]) -> Frame:
        z = self.dream.z[None].astype(np.float32)
        img = (np.clip(self._decode(z).numpy()[0], 0.0, 1.0) * 255).astype(np.uint8)
        panels = ("dream (V's decoding of M's z)",)
        self.frame = Frame(_upscale(img), self.t, self.score, self.done, self.temperature, action, panels)
        return self.frame

    def _real_frame(self, action: list[float]) -> Frame:
        x = np.asarray(self.obs, np.uint8)[None]
        recon = (np.clip(self._decode(self._encode(x)).numpy()[0], 0.0, 1.0) * 255).astype(np.uint8)
        side = _upscale(self.obs)
        h = side.shape[0]
        gap = np.zeros((h, 8, 3), np.uint8)
        image = np.concatenate([_to_height(np.asarray(self.raw, np.uint8), h), gap, side, gap, _upscale(recon)], axis=1)
        panels = ("game screen", "V's input", "V's reconstruction")
        self.frame = Frame(image, self.t, self.score, self.done, None, action, panels)
        return self.frame

    def close(self) -> None:
        if self.env is not None:
            self.env.close()


# ---------------------------------------------------------------- front ends
PYGAME_KEYS = {"left": "K_LEFT", "right": "K_RIGHT", "up": "K_UP", "down": "K_DOWN"}


def run_window(session: PlaySession, fps: float = 15.0, max_frames: int = 0, script: list | None = None) -> Frame:
    """The pygame front end: a window, keys held → action; `r` restart, `t`/`g` τ up/down, `q`/Esc quit.

    `script` (tests): a list of key sets, one per frame, used instead of the keyboard; `max_frames` stops after that
    many frames (0: until quit). Returns the last frame."""
    import os

    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    import pygame

    pygame.init()
    try:
        frame = session.reset()
        h, w = frame.image.shape[:2]
        screen = pygame.display.set_mode((max(w, 480), h + 28))
        pygame.display.set_caption(f"World Models — {'real' if session.real else 'dream'} {session.env_name}")
        font = pygame.font.Font(None, 20)
        clock, n = pygame.time.Clock(), 0
        while True:
            keys: set[str] = set()
            for event in pygame.event.get():
                if event.type == pygame.QUIT or (event.type == pygame.KEYDOWN and event.key in (pygame.K_q, pygame.K_ESCAPE)):
                    return frame
                if event.type == pygame.KEYDOWN and event.key == pygame.K_r:
                    frame = session.reset()
                if event.type == pygame.KEYDOWN and event.key in (pygame.K_t, pygame.K_g) and not session.real:
                    session.set_temperature(session.temperature + (0.05 if event.key == pygame.K_t else -0.05))
                    frame = session.reset()
            if script is not None:
                keys = set(script[n]) if n < len(script) else set()
                if "restart" in keys:
                    frame = session.reset()
            else:
                held = pygame.key.get_pressed()
                keys = {k for k, name in PYGAME_KEYS.items() if held[getattr(pygame, name)]}
            frame = session.step(keys)
            screen.fill((0, 0, 0))
            screen.blit(pygame.surfarray.make_surface(frame.image.swapaxes(0, 1)), (0, 0))
            screen.blit(font.render(frame.status(), True, (230, 230, 230)), (4, h + 6))
            pygame.display.flip()
            n += 1
            if max_frames and n >= max_frames:
                return frame
            clock.tick(fps)
    finally:
        pygame.quit()


def serve(session: PlaySession, stdin=None, stdout=None) -> int:
    """The `--serve` protocol (the TUI's play screen): one JSON request per line in, one JSON frame per line out."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout

    def send(obj: dict[str, Any]) -> None:
        stdout.write(json.dumps(obj) + "\n")
        stdout.flush()

    keys = family_of(session.env_name).keys  # none for an env only C can drive (--agent)
    send({"ready": True, "env": session.env_name, "mode": "real" if session.real else "dream", "keys": list(keys)})
    for line in stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
        except (ValueError, RecursionError):
            send({"error": f"not JSON: {line.strip()[:80]}"})
            continue
        op = req.get("op") if isinstance(req, dict) else None
        if op == "quit":
            break
        try:
            answer = _answer(session, req, op, keys)
        except (TypeError, ValueError, OverflowError) as e:  # a malformed field: said, and the session serves on
            answer = {"error": f"bad {op} request: {str(e).splitlines()[0][:120] if str(e) else type(e).__name__}"}
        send(answer)
    return 0


def _answer(session: PlaySession, req: Any, op: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """The reply to one `--serve` request (`op` read from the mapping `req`)."""
    if op == "reset":
        seed = req.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        return session.reset(seed).to_json()
    if op == "step":
        pressed = req.get("keys", [])
        if not isinstance(pressed, list) or not all(isinstance(k, str) for k in pressed):
            raise ValueError(f"keys must be a list of key names, got {pressed!r}")
        return session.step(set(pressed) & set(keys)).to_json()
    if op == "temperature":
        value = float(req.get("value", session.temperature or 1.0))
        if not 0 < value < float("inf"):
            raise ValueError(f"temperature must be > 0, got {value!r}")
        session.set_temperature(value)
        return session.reset().to_json()
    return {"error": f"unknown op {op!r} (reset | step | temperature | quit)"}


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="a run with a trained V and M (and C for --agent), e.g. an exported agent")
    p.add_argument("--real", action="store_true", help="the real game instead of M's dream")
    p.add_argument("--agent", action="store_true", help="C plays; you watch")
    p.add_argument("--temperature", type=float, default=None, help="dream τ (default: dream.temperature)")
    p.add_argument("--seed", type=int, default=0, help="first episode's seed (r: the next one)")
    p.add_argument("--fps", type=float, default=15.0, help="steps per second in the window")
    p.add_argument("--serve", action="store_true", help="JSON lines on stdin/stdout instead of a window (the TUI)")


def main(args: argparse.Namespace) -> int:
    import os

    from wm.core.rundir import RunDir

    run = RunDir(args.run)
    cfg = run.load_config()
    if cfg is None:
        raise WMError(f"{run.path} is not a run directory (no config.yaml)")
    if not args.serve and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or sys.platform == "darwin"):
        raise WMError("no display for the pygame window: use the TUI's play screen (`wm tui RUN`, key p)")
    session = PlaySession(cfg, run, real=args.real, agent=args.agent, temperature=args.temperature, seed=args.seed)
    try:
        if args.serve:
            return serve(session)
        frame = run_window(session, fps=args.fps)
        print(f"last episode: {frame.status()}")
        return 0
    finally:
        session.close()
