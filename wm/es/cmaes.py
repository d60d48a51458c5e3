"""CMA-ES for the controller: an ask/tell wrapper around `cma.CMAEvolutionStrategy` (paper_settings.md §7).

What the wrapper adds to pycma, each item from §7 or §10:
- fitness is a return to **maximise**; pycma minimises, so we pass `-(R - wd · mean(θ²))`. The authors' `es.py`
  passed `-R - wd · mean(θ²)` (a reward for large weights, §10.5); here the penalty has the correct sign;
- the training seeds: one seed per member with **antithetic pairs** (members i and i + pop/2 share a seed, so
  they face the same tracks/dreams, §7), each member seed expanded to `trials` episode seeds;
- the whole state (the pycma object, the NumPy global RNG that pycma samples from, the seed RNG) pickles, so a
  run resumed from `es_state.pkl` asks exactly the populations the uninterrupted run would have asked.

pycma draws its samples through option `randn`; we give it a picklable generator of its own (`_Randn`). A few
pycma paths still touch `np.random`, so a private copy of that global state is also swapped in around every
call: nothing else in the process perturbs CMA-ES and CMA-ES perturbs nothing else.
"""

from __future__ import annotations

import contextlib
import pickle
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from wm.seeds import SEED_HIGH, TRAINING_FLOOR


def penalized_fitness(returns: np.ndarray, params: np.ndarray, weight_decay: float) -> np.ndarray:
    """Fitness CMA-ES maximises: `R - wd · mean(θ²)` per member (the sign the authors meant, §10.5).

    Args:
        returns: (P,) mean return of each member.
        params: (P, n) the members' parameter vectors.
        weight_decay: the L2 coefficient (0.01 in §7).
    """
    params = np.asarray(params, dtype=np.float64)
    return np.asarray(returns, dtype=np.float64) - weight_decay * np.mean(params**2, axis=1)


def told_fitness(returns: np.ndarray, params: np.ndarray, weight_decay: float) -> np.ndarray:
    """The fitness every optimiser is told: `penalized_fitness`, with a NaN/inf member (a task lost for good,
    `mpi.pool`) ranked with the generation's worst finite one; ValueError when every member is bad."""
    fit = penalized_fitness(returns, params, weight_decay)
    bad = ~np.isfinite(fit)
    if bad.all():
        raise ValueError("every member's fitness is NaN/inf")
    fit[bad] = fit[~bad].min()
    return fit


def member_seeds(rng: np.random.Generator, popsize: int, antithetic: bool) -> np.ndarray:
    """One seed per member; with `antithetic`, members i and i + pop/2 share a seed (the authors' Seeder, §7)."""
    if antithetic:
        if popsize % 2:
            raise ValueError(f"antithetic seeds need an even population, got {popsize}")
        half = rng.integers(TRAINING_FLOOR, SEED_HIGH, popsize // 2, dtype=np.int64)
        return np.concatenate([half, half])
    return rng.integers(TRAINING_FLOOR, SEED_HIGH, popsize, dtype=np.int64)


def episode_seeds(seeds: np.ndarray, trials: int) -> np.ndarray:
    """Expand member seeds (P,) into episode seeds (P, trials): row i depends only on seeds[i].

    The authors seeded one env once per member and ran the 16 episodes in sequence (§7); here each episode has
    its own seed so episodes can run in any order, in parallel, and still be reproducible.
    """
    return np.stack([np.random.default_rng(int(s)).integers(TRAINING_FLOOR, SEED_HIGH, trials, dtype=np.int64) for s in seeds])


class _Randn:
    """A picklable `randn(*shape)` for pycma's `randn` option, drawing from its own generator.

    pycma's default (`np.random.randn`) is a bound method of NumPy's global RandomState; pickling it pickles a
    *copy* of that state, so a restored optimiser would sample from a private stream while the live one samples
    from the global one. With this object the stream lives in the optimiser and pickles with it.
    """

    def __init__(self, seed: int):
        self.rng = np.random.default_rng([int(seed), 0xC3A])

    def __call__(self, *shape: int) -> np.ndarray:
        return self.rng.standard_normal(shape)


class CMAES:
    """Ask/tell CMA-ES on a flat parameter vector (pycma, full covariance, active CMA as in the authors' log, §7;
    `diagonal`: pycma's separable CMA-ES, `CMA_diagonal`, whose ask+tell stays cheap at n ≈ 1000).

    `ask()` returns the (popsize, n) population; `seeds(trials)` the (popsize, trials) episode seeds of this
    generation; `tell(returns)` takes the (popsize,) mean returns (higher is better) of the last `ask()`.
    """

    def __init__(
        self,
        n: int,
        popsize: int = 64,
        sigma0: float = 0.1,
        weight_decay: float = 0.01,
        seed: int = 0,
        antithetic: bool = True,
        x0: np.ndarray | None = None,
        diagonal: bool = False,
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "could not import matplotlib" at import
            import cma

        self.n, self.popsize, self.weight_decay, self.antithetic = int(n), int(popsize), float(weight_decay), bool(antithetic)
        x0 = np.zeros(self.n) if x0 is None else np.asarray(x0, dtype=np.float64)
        outer = np.random.get_state()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.es = cma.CMAEvolutionStrategy(
                    x0,
                    float(sigma0),
                    {
                        "popsize": self.popsize,
                        "randn": _Randn(seed),  # also keeps pycma from seeding the global RNG with the time
                        "verbose": -9,
                        "verb_log": 0,
                        "verb_disp": 0,  # no console output, no outcmaes/ files
                        "signals_filename": None,
                        # separable CMA-ES: a diagonal covariance, O(n) per sample instead of O(n²) (es.cma_diagonal)
                        **({"CMA_diagonal": True} if diagonal else {}),
                    },
                )
            self._np_state = np.random.get_state()
        finally:
            np.random.set_state(outer)
        self._seed_rng = np.random.default_rng([int(seed), 0x5EED])
        self._asked: np.ndarray | None = None
        self._seeds: np.ndarray | None = None

    @contextlib.contextmanager
    def _rng(self) -> Iterator[None]:
        outer = np.random.get_state()
        np.random.set_state(self._np_state)
        try:
            yield
        finally:
            self._np_state = np.random.get_state()
            np.random.set_state(outer)

    def ask(self) -> np.ndarray:
        """The next population, (popsize, n) float64. Also draws this generation's member seeds."""
        with self._rng(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._asked = np.asarray(self.es.ask(), dtype=np.float64)
        self._seeds = member_seeds(self._seed_rng, self.popsize, self.antithetic)
        return self._asked.copy()

    def seeds(self, trials: int) -> np.ndarray:
        """Episode seeds (popsize, trials) of the population last asked; antithetic rows are identical."""
        if self._seeds is None:
            raise RuntimeError("call ask() first")
        return episode_seeds(self._seeds, trials)

    def tell(self, returns: np.ndarray) -> np.ndarray:
        """Update with the members' mean returns (higher is better); returns the penalised fitness told.

        A NaN return (a member whose evaluation failed for good, `mpi.pool`) is ranked with the worst finite
        fitness of the generation, so one lost task costs a little selection pressure and nothing else.
        """
        if self._asked is None:
            raise RuntimeError("call ask() first")
        fit = told_fitness(returns, self._asked, self.weight_decay)
        with self._rng(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.es.tell(list(self._asked), list(-fit))  # pycma minimises
        self._asked = None
        return fit

    @property
    def mean(self) -> np.ndarray:
        """The current CMA mean (the solution evaluated and deployed, `es.result[5]` in §7)."""
        return np.asarray(self.es.mean, dtype=np.float64).copy()

    @property
    def sigma(self) -> float:
        """The mean per-coordinate standard deviation, σ · mean(√diag C) (the `.hist.json` column of §8)."""
        return float(np.mean(self.es.result.stds))

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue identically (pickled pycma object and both RNG states)."""
        return {
            "es": pickle.dumps(self.es),
            "np_state": self._np_state,
            "seed_rng": self._seed_rng.bit_generator.state,
            "n": self.n,
            "popsize": self.popsize,
            "weight_decay": self.weight_decay,
            "antithetic": self.antithetic,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> CMAES:
        """Rebuild a wrapper from `state_dict()`."""
        self = cls.__new__(cls)
        self.n, self.popsize = state["n"], state["popsize"]
        self.weight_decay, self.antithetic = state["weight_decay"], state["antithetic"]
        self.es = pickle.loads(state["es"])
        self._np_state = state["np_state"]
        self._seed_rng = np.random.default_rng()
        self._seed_rng.bit_generator.state = state["seed_rng"]
        self._asked = self._seeds = None
        return self
