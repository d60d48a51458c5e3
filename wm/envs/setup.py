"""A config's env, resolved once: `setup(cfg)` is what the rest of the suite needs to know about the game a config
plays and the C that plays it. The family record (`wm.envs.family`), the action size M and C use (`action_dim`), what
turns C's output into that action (`action_post`), V's and M's sizes and heads (`Sizes`), the dream's settings
(`DreamSettings`), the env section and how to open the env (`open`), the setup scores are played under
(`scoring`), and C's inputs and flat-vector layout, so C's parameter count is known without building C
(`wm.models.controller.Controller` takes its layout from `controller_layout` here, so the two counts cannot differ).

Outside `wm.envs` nothing calls `action_dim` or `family` on a config: a stage or tool reads `setup(cfg)`, and a
function handed a loaded `World` reads its `setup`. The world loader, the evaluators, the dream envs and the
recorder take a `Setup`, never the whole config (`tests/test_env_setup.py` keeps them so). A run's env name alone
(the report, `play`'s keys) maps to its record through `family_of`.

Each fact is resolved on its first read and then kept, so a config the suite cannot play is refused by the fact a
caller reads, with that fact's own error (an unknown `env.name`, a gym env's `env.actions`, a `controller.mode`).
NumPy only at import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from wm.core.errors import WMError
from wm.envs import action_dim, action_post
from wm.envs.family import EnvFamily, family

if TYPE_CHECKING:
    from wm.core.config import Config
    from wm.envs.base import FrameEnv

MODES = ("z", "zh", "zc", "zch", "z_hidden")
Z_INPUTS = ("sampled", "mean")  # what C and M read of V (`controller.z_input`)
_INPUTS = {"z": ("z",), "zh": ("z", "h"), "zc": ("z", "c"), "zch": ("z", "c", "h"), "z_hidden": ("z",)}
_KEPT = 64  # setups kept (a process meets a handful of configs: a run's, its scoring one, a round's)


@dataclass(frozen=True)
class Layout:
    """C's inputs and flat parameter vector, piece by piece (the authors' layouts, `wm.models.controller`)."""

    mode: str
    bias: bool
    hidden_units: int  # z_hidden's hidden layer
    inputs: tuple[str, ...]  # what C reads, in order: z, c, h
    input_dim: int
    pieces: tuple[tuple[str, tuple[int, ...]], ...]  # (name, shape) in the vector's order
    z_input: str = "sampled"  # what C and M read of V: a sampled z (§6) or μ ("mean")

    @property
    def n_params(self) -> int:
        return int(sum(np.prod(s) for _, s in self.pieces))


def controller_layout(
    mode: str, z_dim: int, hidden: int, action_dim: int, bias: bool, hidden_units: int = 40, z_input: str = "sampled"
) -> Layout:
    """The layout of C in `mode` (refused when the mode is none of `MODES`) for these sizes."""
    mode = mode.lower()
    if mode not in MODES:
        raise WMError(f"controller mode {mode!r} is not one of {', '.join(MODES)}")
    if z_input not in Z_INPUTS:
        raise WMError(f"controller z_input {z_input!r} is not one of {', '.join(Z_INPUTS)}")
    sizes = {"z": int(z_dim), "c": int(hidden), "h": int(hidden)}
    inputs = _INPUTS[mode]
    input_dim = sum(sizes[k] for k in inputs)
    a, u = int(action_dim), int(hidden_units)
    if mode == "z_hidden":
        pieces = [("b_hidden", (u,)), ("W_hidden", (input_dim, u)), ("b_out", (a,)), ("W_out", (u, a))]
    else:
        pieces = [("b", (a,)), ("W", (input_dim, a))]
    kept = tuple((n, s) for n, s in pieces if bool(bias) or not n.startswith("b"))
    return Layout(mode, bool(bias), u, inputs, input_dim, kept, z_input)


@dataclass(frozen=True)
class Sizes:
    """V's and M's sizes and heads: what the world loader builds them with."""

    z_dim: int
    action_dim: int
    hidden: int
    num_mixtures: int
    predict_done: bool
    predict_reward: bool
    dropout: float  # M's z-input and recurrent masks; in the dream, per episode (wm.rollouts.dream)


@dataclass(frozen=True)
class DreamSettings:
    """How a dream of this config plays: `dream.*` and what M's done head was trained on (`mdnrnn.done_*`)."""

    temperature: float
    max_steps: int
    done_sampling: str
    done_weight: float
    done_horizon: int

    def done_options(self) -> dict[str, float | int | str]:
        """How the dream decides a death: keywords of DreamEvaluator and DreamEnv."""
        return {"done_sampling": self.done_sampling, "done_weight": self.done_weight, "done_horizon": self.done_horizon}


def scoring_config(cfg: Config) -> Config:
    """`cfg` as scores are measured: CarRacing with gymnasium's own renderer, whatever `env.renderer` trained with
    (the fast renderer is a training-time option; its frames differ slightly from the official ones)."""
    from wm.core.config import update

    if cfg.env.renderer == "official":
        return cfg
    return update(cfg, {"env": {"renderer": "official"}}, source="scores use the official renderer")


@dataclass(frozen=True, eq=False)
class Setup:
    """The env facts of one config (`setup(cfg)`); each is resolved on its first read."""

    cfg: Config = field(repr=False)

    def __reduce__(self) -> tuple[Any, tuple[dict]]:
        # pickled as its config's plain dict (an evaluation spec sent to a worker): resolved again there, once
        return _setup_of_dict, (self.cfg.to_dict(),)

    @cached_property
    def family(self) -> EnvFamily:
        """The game's record (`wm.envs.family`)."""
        return family(self.cfg)

    @cached_property
    def action_dim(self) -> int:
        """The action size M sees and C outputs (`wm.envs.action_dim`)."""
        return action_dim(self.cfg)

    @cached_property
    def post(self) -> str:
        """What turns C's tanh output into the action M sees (`wm.envs.action_post`)."""
        return action_post(self.cfg)

    @property
    def env(self) -> Config:
        """The `env.*` section (its name, `max_steps`, the renderer)."""
        return self.cfg.env

    def open(self, keep_raw: bool = False, seed: int | None = None) -> FrameEnv:
        """A new env of this config (`wm.envs.make_env`)."""
        from wm.envs import make_env

        return make_env(self.cfg, seed=seed, keep_raw=keep_raw)

    @cached_property
    def scoring(self) -> Setup:
        """The setup scores are played under (`scoring_config`): this one unless it trains on the fast renderer."""
        scored = scoring_config(self.cfg)
        return self if scored is self.cfg else setup(scored)

    def at_temperature(self, tau: float) -> Setup:
        """This setup with the dream at τ (`evaluate --temperature`, the τ sweep)."""
        from wm.core.config import update

        return setup(update(self.cfg, {"dream": {"temperature": float(tau)}}, source=f"τ {float(tau):g}"))

    @cached_property
    def sizes(self) -> Sizes:
        """V's and M's sizes and heads (the action size first: an env M cannot see is refused as such)."""
        m = self.cfg.mdnrnn
        return Sizes(self.z_dim, self.action_dim, self.hidden, m.num_mixtures, m.predict_done, m.predict_reward, m.dropout)

    @cached_property
    def dream(self) -> DreamSettings:
        """The dream's settings."""
        d, m = self.cfg.dream, self.cfg.mdnrnn
        return DreamSettings(d.temperature, d.max_steps, d.done_sampling, m.done_weight, m.done_horizon)

    @property
    def z_dim(self) -> int:
        return self.cfg.vae.z_dim

    @property
    def hidden(self) -> int:
        return self.cfg.mdnrnn.hidden

    @cached_property
    def controller(self) -> Layout:
        """C's layout under `controller.*` (the action size first: an env it cannot play is refused as such)."""
        c, a = self.cfg.controller, self.action_dim
        return controller_layout(c.mode, self.z_dim, self.hidden, a, c.bias, c.hidden_units, c.z_input)

    @property
    def n_params(self) -> int:
        """C's parameter count (what `Controller.from_setup(self).n_params` is)."""
        return self.controller.n_params


_SETUPS: dict[str, Setup] = {}


def setup(cfg: Config) -> Setup:
    """The env facts of `cfg`, one `Setup` per config (by `cfg.hash()`)."""
    from wm.core.sections import Sections

    if isinstance(cfg, Sections):  # a stage's blocks: its setup came resolved with them (`wm.stages.contract`)
        raise TypeError("setup() takes a whole config, not a stage's blocks: read StageInput.setup")
    key = cfg.hash()
    found = _SETUPS.get(key)
    if found is None:
        if len(_SETUPS) >= _KEPT:
            _SETUPS.pop(next(iter(_SETUPS)))
        found = _SETUPS.setdefault(key, Setup(cfg))
    return found


def _setup_of_dict(d: dict) -> Setup:
    """The setup of a cast config's `to_dict()` (an unpickled `Setup`)."""
    from wm.core.config import Config

    return setup(Config(d))


def family_of(name: str) -> EnvFamily:
    """The record of an env name (a run's `env.name` read on its own, e.g. from an evaluation summary)."""
    return family(name)
