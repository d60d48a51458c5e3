"""Which ES settings can run together: the cross-key rules of the `es` section (the single-key ranges are
`wm.core.config.RULES`). The controller stage checks them before it starts; the pipeline checks them for its first
pass and for the settings its rounds will use, before any stage starts."""

from __future__ import annotations

from wm.core.config import Config
from wm.core.errors import WMError
from wm.envs.family import EnvFamily


def check_fitness(cfg: Config, game: EnvFamily) -> None:
    """Refuse a fitness the config cannot run in `game` (`cfg`: a config or a stage's blocks holding `es`,
    `mdnrnn` and `env`; the pipeline checks its rounds' before starting)."""
    from wm.es.budget import check_budget

    kind = cfg.es.fitness
    if kind not in ("dream", "real", "toy"):
        raise WMError(f"es.fitness must be dream, real or toy, not {kind!r}")
    if cfg.es.draws < 1:
        raise WMError(f"es.draws must be 1 or more (independent CMA-ES draws), not {cfg.es.draws}")
    if cfg.es.pick_real < 0:
        raise WMError(f"es.pick_real must be 0 (off) or a number of real episodes per check, not {cfg.es.pick_real}")
    if kind == "dream" and not game.survival and not cfg.mdnrnn.predict_reward:
        raise WMError(
            f"es.fitness dream in {cfg.env.name} needs M's reward head (mdnrnn.predict_reward: true, then "
            "train-mdnrnn): without it a dream pays +1 per step, DoomTakeCover's survival reward"
        )
    check_budget(cfg, game)
