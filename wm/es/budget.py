"""Training-time episode budgets for real-env fitness, both off by default (the paper plays every
training episode to the end):

- `es.curriculum: [N, k]` (the seeds' curriculum, seed 004): the population's episodes are capped at N steps in
  the first generation; the cap rises by k whenever a generation's mean fitness beats every earlier generation's,
  up to `env.max_steps`. Early generations cost little, and the cap grows only as far as C can use it.
- `es.no_progress_steps: N` (CarRacing): a training episode ends once no new track tile has been visited for N
  steps (a car that stopped or left the track earns nothing more; the reward has already paid −0.1 per step).

Only the population's fitness episodes are budgeted: the CMA mean's evaluations (`es.eval_every`, which pick
`best.npz`) and the evaluate stage always play full episodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from wm.core.errors import WMError
from wm.envs.family import EnvFamily


@dataclass
class Curriculum:
    """The episode cap of the next generation; `cap == 0` means off (full episodes)."""

    cap: int = 0
    step: int = 0
    limit: int = 0
    best: float = -math.inf

    @classmethod
    def from_config(cls, cfg: Any) -> Curriculum:
        spec = list(cfg.es.curriculum or [])
        if not spec:
            return cls()
        if len(spec) != 2 or int(spec[0]) < 1 or int(spec[1]) < 0:
            raise WMError(f"es.curriculum must be [start_steps >= 1, step >= 0] or [], got {spec!r}")
        limit = cfg.env.max_steps
        return cls(min(int(spec[0]), limit), int(spec[1]), limit)

    def update(self, generation_mean: float) -> None:
        """After a generation: raise the cap by `step` if its mean fitness is the best so far."""
        if self.cap and math.isfinite(generation_mean) and generation_mean > self.best:
            self.best = float(generation_mean)
            self.cap = min(self.cap + self.step, self.limit)

    def state_dict(self) -> dict[str, float]:
        return {"cap": self.cap, "best": self.best}

    def load(self, state: dict[str, float] | None) -> None:
        if state and self.cap:
            self.cap, self.best = min(int(state["cap"]), self.limit), float(state["best"])


def fitness_budget(cfg: Any, curriculum: Curriculum) -> dict[str, int]:
    """The keyword arguments a generation's fitness tasks pass to the real evaluator ({} when both are off)."""
    out: dict[str, int] = {}
    if curriculum.cap:
        out["max_steps"] = int(curriculum.cap)
    if cfg.es.no_progress_steps > 0:
        out["no_progress"] = cfg.es.no_progress_steps
    return out


def check_budget(cfg: Any, game: EnvFamily) -> None:
    """Refuse budgets the fitness cannot apply in `game`, in one line naming the key."""
    on = [
        k
        for k, v in (("es.curriculum", list(cfg.es.curriculum or [])), ("es.no_progress_steps", cfg.es.no_progress_steps))
        if v
    ]
    if on and cfg.es.fitness != "real":
        raise WMError(f"{on[0]} applies to es.fitness: real only (fitness is {cfg.es.fitness!r})")
    if cfg.es.no_progress_steps > 0 and not game.track_tiles:
        raise WMError(f"es.no_progress_steps counts CarRacing's track tiles; env.name is {cfg.env.name!r}")
    Curriculum.from_config(cfg)
