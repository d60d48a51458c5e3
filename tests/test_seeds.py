"""Evaluation seeds never meet training seeds: every training seed is drawn at or above TRAINING_FLOOR,
every evaluation / check seed is refused there."""

from __future__ import annotations

import numpy as np
import pytest

from wm.core import config as C
from wm.core.errors import WMError
from wm.core.seeds import SEED_HIGH, TRAINING_FLOOR, training_seed
from wm.es.cmaes import CMAES
from wm.rollouts.evaluation import seed_list
from wm.stages.collect import episode_seeds
from wm.stages.train_controller import eval_seeds


def test_training_seeds_are_above_the_floor():
    es = CMAES(5, 8, 0.1, 0.01, 0, True)
    for _ in range(3):
        es.ask()
        s = es.seeds(16)
        assert s.min() >= TRAINING_FLOOR and s.max() < SEED_HIGH
        es.tell(np.zeros(8))
    env = [episode_seeds(0, slot, attempt)[0] for slot in range(200) for attempt in range(3)]
    assert min(env) >= TRAINING_FLOOR and max(env) < SEED_HIGH
    assert eval_seeds(C.load(["doom_takecover"], [])).min() >= TRAINING_FLOOR
    assert training_seed(0) == TRAINING_FLOOR and training_seed(SEED_HIGH - TRAINING_FLOOR) == TRAINING_FLOOR


def test_evaluation_seeds_stay_below_the_floor():
    cfg = C.load(["doom_takecover"], [])
    assert seed_list(cfg)[0] == 1000
    with pytest.raises(WMError, match="below every training seed"):
        seed_list(cfg, 10, TRAINING_FLOOR - 5)
