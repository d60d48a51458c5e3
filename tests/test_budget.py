"""Training-time episode budgets of real-env fitness: the curriculum cap, the CarRacing no-progress stop,
and how they reach the real evaluator through the engine's tasks."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import tiny_cfg
from wm.core.config import load
from wm.core.errors import WMError
from wm.envs.setup import setup
from wm.es.budget import Curriculum, check_budget, fitness_budget


def _car(*sets: str):
    return tiny_cfg("env.max_steps=40", *sets, env="carracing")


def test_curriculum_raises_the_cap_only_when_the_generation_mean_is_the_best_yet():
    cur = Curriculum.from_config(_car("es.curriculum=[10, 5]"))
    caps = []
    for mean in (-50.0, -60.0, -20.0, -20.0, 5.0, 7.0, 8.0, 9.0, 10.0):
        caps.append(cur.cap)
        cur.update(mean)
    assert caps == [10, 15, 15, 20, 20, 25, 30, 35, 40]  # flat after a worse or equal mean, capped at env.max_steps
    assert cur.cap == 40
    again = Curriculum.from_config(_car("es.curriculum=[10, 5]"))
    again.load(cur.state_dict())  # resume: the cap and the best mean come back
    assert (again.cap, again.best) == (40, 10.0)
    off = Curriculum.from_config(_car())
    off.update(1e9)
    assert off.cap == 0 and fitness_budget(_car(), off) == {}
    assert fitness_budget(_car("es.no_progress_steps=25"), cur) == {"max_steps": 40, "no_progress": 25}


@pytest.mark.parametrize(
    "configs,sets,match",
    [
        (["carracing", "tiny"], ["es.curriculum=[10]"], "es.curriculum must be"),
        (["carracing", "tiny"], ["es.curriculum=[10, 5]", "es.fitness=dream"], "es.curriculum applies to es.fitness: real"),
        (["doom_takecover", "tiny"], ["es.no_progress_steps=20", "es.fitness=real"], "counts CarRacing's track tiles"),
    ],
)
def test_budgets_the_fitness_cannot_apply_are_refused(configs, sets, match):
    with pytest.raises(WMError, match=match):
        cfg = load(configs, sets)
        check_budget(cfg, setup(cfg).family)


def test_tasks_carry_the_budget_to_the_evaluator():
    from wm.rollouts.engine import evaluate_task, make_tasks

    seen = []

    class Ev:
        def evaluate(self, params, seeds, **kw):
            seen.append(kw)
            return np.zeros(seeds.shape), np.ones(seeds.shape, np.int64)

    ctx = type("Ctx", (), {"spec": type("S", (), {"kind": "real"})(), "evaluator": Ev()})()
    params, seeds = np.zeros((3, 4)), np.arange(6).reshape(3, 2)
    for t in make_tasks(params, seeds, 2, {"max_steps": 7}):
        evaluate_task(ctx, t)
    for t in make_tasks(params, seeds, 2):
        evaluate_task(ctx, t)
    assert seen == [{"max_steps": 7}] * 2 + [{}] * 2


@pytest.mark.env
def test_real_carracing_episodes_stop_at_the_cap_and_when_no_tile_is_reached():
    from wm.models.controller import Controller
    from wm.models.mdnrnn import MDNRNN
    from wm.models.vae import ConvVAE
    from wm.rollouts.rollout import RealEvaluator

    cfg = _car("mdnrnn.hidden=16")
    ctrl = Controller.from_setup(setup(cfg))
    ev = RealEvaluator(setup(cfg), ConvVAE(32), MDNRNN(32, 3, 16, 5, False), ctrl, n_envs=2, should_stop=lambda: False)
    try:
        still = np.zeros((2, ctrl.n_params))
        still[:, 1] = -10.0  # the gas bias: tanh → −1 → gas 0, the car never moves off its start tile
        seeds = np.array([[11], [12]])
        assert ev.evaluate(still, seeds)[1].tolist() == [[40], [40]]  # no budget: the env's own cap
        assert ev.evaluate(still, seeds, max_steps=7)[1].tolist() == [[7], [7]]
        assert ev.evaluate(still, seeds, no_progress=15)[1].tolist() == [[15], [15]]
        r_full, _ = ev.evaluate(still, seeds, max_steps=7)
        assert np.allclose(r_full, ev.evaluate(still, seeds, max_steps=7)[0])  # deterministic per seed
    finally:
        ev.close()


@pytest.mark.parametrize(
    ("configs", "sets", "workers", "members"),
    [
        (["carracing", "small"], [], 2, 4),  # 24 members on 2 workers: a quarter is 3 (12 episodes in 16 envs): 4
        (["carracing", "small"], ["es.trials=8"], 2, 3),  # 3 × 8 fills 16 envs already: the quarter
        (["carracing", "small"], ["es.trials=1"], 2, 12),  # 16 members would fill them: no more than the slice
        (["carracing", "small"], ["es.chunk=5"], 2, 5),  # es.chunk is taken as it is
        (["doom_takecover", "small"], [], 2, 16),  # dream fitness: the whole slice, one batch a worker
    ],
)
def test_a_real_task_fills_the_workers_envs(configs, sets, workers, members):
    """Members per task (auto `es.chunk`): a quarter of a worker's slice, at least enough for the task's episodes to
    fill `es.real_envs_per_worker` envs, at most the slice; dream fitness takes the slice."""
    from wm.stages.train_controller import task_chunk

    es = load(configs, sets).es
    assert task_chunk(es, es.popsize, workers) == members
