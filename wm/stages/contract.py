"""What a stage receives, resolved once by the command that runs it (`stage_input`): the env facts (`Setup`: the
game's record, the action size, V's and M's sizes, C's layout and parameter count, the dream's settings, how to open
the env and how scores are played), the config blocks the stage declares in the registry (its own `sections`, the
`uses` it reads, and `run` and `env`), and the run's config hash. A stage reads these and derives nothing again:
`setup()` refuses a stage's blocks, and a block it did not declare is refused by name when read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from wm.core.registry import stage
from wm.core.sections import blocks_of
from wm.envs.setup import Setup, setup

if TYPE_CHECKING:
    from wm.core.config import Config


@dataclass(frozen=True)
class StageInput:
    """A stage's inputs (`stage_input`)."""

    verb: str
    setup: Setup  # the env facts of the run's whole config
    cfg: Config  # the blocks the stage declares (`wm.core.sections`): no hash, no setup of its own
    config_hash: str  # the run's whole config (what DONE and the summaries record)


def stage_input(cfg: Config, verb: str) -> StageInput:
    """The inputs of stage `verb` under the run's resolved config `cfg`."""
    s = stage(verb)
    return StageInput(s.verb, setup(cfg), blocks_of(cfg, s.blocks, f"stage {s.verb}"), cfg.hash())
