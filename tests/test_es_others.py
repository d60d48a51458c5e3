"""The authors' other evolution strategies (`es.algorithm`: openes | pepg | ga, wm/es/others.py): each learns a toy
problem to a threshold, follows its published update rule on a hand-checked case, resumes exactly from its state,
and runs the train-controller stage (toy fitness) with exact resume."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import history, stage, tiny_cfg, toy_cfg
from wm.core.errors import WMError
from wm.core.rundir import RunDir
from wm.es import state as es_state
from wm.es.others import PEPG, OpenES, SimpleGA, centered_ranks, es_from_state, make_es

TARGET = np.linspace(-1.0, 1.0, 10)


def sphere(x: np.ndarray) -> np.ndarray:
    return -np.sum((x - TARGET) ** 2, axis=1)


@pytest.mark.parametrize(
    "make, gens, tol",
    [
        (lambda: OpenES(10, 32, 0.1, 0.0, 3, True, None, lr=0.05, sigma_decay=0.99, sigma_min=0.01), 300, 0.05),
        (lambda: PEPG(10, 32, 0.3, 0.0, 3, True, None, lr=0.2, lr_sigma=0.1, sigma_min=0.005), 300, 0.05),
        (lambda: SimpleGA(10, 32, 0.3, 0.0, 3, True, None, elite_ratio=0.25, sigma_decay=0.98, sigma_min=0.005), 300, 0.05),
    ],
    ids=["openes", "pepg", "ga"],
)
def test_learns_a_10d_quadratic(make, gens, tol):
    """From 0, distance² to the target starts at 3.67; each must end below `tol`."""
    es = make()
    for _ in range(gens):
        es.tell(sphere(es.ask()))
    assert np.sum((es.mean - TARGET) ** 2) < tol, np.sum((es.mean - TARGET) ** 2)


def test_openes_update_is_the_published_rule():
    """Mirrored samples; the Adam step follows g = Σ rank(F_i) ε_i / (P σ) (one step: Adam moves each coordinate
    by lr · sign(g))."""
    es = OpenES(3, 4, 0.5, 0.0, 0, True, None, lr=0.1, sigma_decay=0.9, sigma_min=0.01)
    x = es.ask()
    eps = (x - 0.0) / 0.5
    np.testing.assert_allclose(eps[:2], -eps[2:])
    fit = np.array([3.0, 1.0, 0.0, 2.0])
    es.tell(fit)
    g = centered_ranks(fit) @ eps / (4 * 0.5)
    np.testing.assert_allclose(es.mean, 0.1 * np.sign(g), atol=1e-6)
    assert es.sigma == pytest.approx(0.45)
    np.testing.assert_allclose(centered_ranks(np.array([5.0, -1.0, 2.0])), [0.5, -0.5, 0.0])


def test_pepg_update_is_the_published_rule():
    es = PEPG(2, 4, 1.0, 0.0, 1, True, None, lr=0.5, lr_sigma=0.1, sigma_min=0.01)
    x = es.ask()
    eps = x[:2]  # μ = 0
    np.testing.assert_allclose(x[2:], -eps)
    fit = np.array([4.0, 1.0, 0.0, 3.0])  # pairs (4, 0) and (1, 3); m = 4, b = mean = 2
    es.tell(fit)
    r_t = np.array([(4 - 0) / (8 - 4 - 0), (1 - 3) / (8 - 1 - 3)])
    np.testing.assert_allclose(es.mean, 0.5 * np.sign(r_t @ eps / 2), atol=1e-6)  # one Adam step: lr · sign(g_μ)
    r_s = np.array([(2 - 2) / 2, (2 - 2) / 2])  # both pairs' means equal the baseline: σ stays
    np.testing.assert_allclose(es.sigmas, 1.0 + 0.1 * r_s @ ((eps**2 - 1) / 1) / 2)


def test_ga_keeps_the_elite_and_deploys_the_best():
    es = SimpleGA(2, 8, 0.1, 0.0, 2, True, None, elite_ratio=0.25)
    x = es.ask()
    fit = np.arange(8.0)
    es.tell(fit)
    np.testing.assert_array_equal(es.mean, x[7])
    nxt = es.ask()
    np.testing.assert_array_equal(nxt[:2], x[[7, 6]])  # the two elites survive unchanged, best first


@pytest.mark.parametrize("cls", [OpenES, PEPG, SimpleGA])
def test_state_round_trip_continues_identically_and_nan_ranks_worst(cls, tmp_path):
    es = cls(5, 8, 0.2, 0.01, 4, True, None)
    for _ in range(3):
        es.tell(sphere(np.pad(es.ask(), ((0, 0), (0, 5)))))
    es_state.save(tmp_path / "s.npz", es.state_dict())
    twin = es_from_state(es_state.load(tmp_path / "s.npz"))
    for _ in range(3):
        a, b = es.ask(), twin.ask()
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(es.seeds(2), twin.seeds(2))
        np.testing.assert_array_equal(es.seeds(2)[:4], es.seeds(2)[4:])  # antithetic pairs share seeds
        es.tell(-np.sum(a**2, 1))
        twin.tell(-np.sum(b**2, 1))
    np.testing.assert_array_equal(es.mean, twin.mean)
    es.ask()
    told = es.tell(np.array([1.0, np.nan, 3.0, 0.5, 2.0, 2.0, 2.0, 2.0]))
    assert told[1] == told.min()


def test_make_es_and_refusals():
    from wm.core import config as C

    cfg = tiny_cfg("es.algorithm=openes")
    assert isinstance(make_es(cfg.es, 6), OpenES)
    with pytest.raises(WMError, match=r"'es.algorithm' must be cma \| openes \| pepg \| ga, got 'nes'"):
        C.update(cfg, {"es": {"algorithm": "nes"}})  # config.RULES, as every config the code builds
    with pytest.raises(WMError, match="popsize must be even"):
        OpenES(3, 5, 0.1, 0.0, 0, False, None)


@pytest.mark.parametrize("algorithm", ["openes", "pepg", "ga"])
def test_stage_resumes_exactly_and_refuses_another_algorithm(tmp_path, algorithm):
    cfg = toy_cfg(**{"es.algorithm": algorithm})
    straight = stage(cfg, tmp_path / "a")
    with pytest.raises(KeyboardInterrupt):
        stage(cfg, tmp_path / "b", stop_after=2)
    with pytest.raises(WMError, match=f"holds a {algorithm} state but es.algorithm is cma"):
        stage(toy_cfg(), tmp_path / "b")
    stage(cfg, tmp_path / "b")
    assert history(RunDir(tmp_path / "b")) == history(straight)


@pytest.mark.parametrize("algorithm", ["openes", "pepg"])
def test_learns_at_the_configs_defaults(algorithm):
    """With base.yaml's es.* (lr 0.01, σ0 0.1, pop 32) in 100 dimensions each must close most of the distance to a
    target within 200 generations. PEPG's plain Sehnke step (α_μ · g) moved its mean by ≈ 0.003 per generation at
    these settings (a Doom C scored like the random policy after 80 generations); Adam on g_μ, as OpenES, learns."""
    es_cfg = tiny_cfg(f"es.algorithm={algorithm}", "es.popsize=32", "es.weight_decay=0").es
    target = np.linspace(-0.5, 0.5, 100)
    es = make_es(es_cfg, 100)
    start = np.sum(target**2)
    for _ in range(200):
        x = es.ask()
        es.tell(-np.sum((x - target) ** 2, axis=1))
    assert np.sum((es.mean - target) ** 2) < 0.1 * start, (np.sum((es.mean - target) ** 2), start)
