"""CMA-ES for the controller: an ask/tell wrapper around `cma.CMAEvolutionStrategy` (docs/paper-settings.md §7).

What the wrapper adds to pycma, each item from §7 or §10:
- fitness is a return to **maximise**; pycma minimises, so we pass `-(R - wd · mean(θ²))`. The authors' `es.py`
  passed `-R - wd · mean(θ²)` (a reward for large weights, §10.5); here the penalty has the correct sign;
- the training seeds: one seed per member with **antithetic pairs** (members i and i + pop/2 share a seed, so
  they face the same tracks/dreams, §7), each member seed expanded to `trials` episode seeds;
- the whole state (pycma's object, the generator it samples from, the NumPy global RNG state, the seed RNG) is
  plain values and arrays (`state_dict`, `wm.es.state`, no pickle), so a run resumed from `es_state.npz` asks
  exactly the populations the uninterrupted run would have asked.

pycma draws its samples through option `randn`; we give it a generator of its own (`_Randn`). A few pycma paths
still touch `np.random`, so a private copy of that global state is also swapped in around every call: nothing
else in the process perturbs CMA-ES and CMA-ES perturbs nothing else.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from wm.core.config import RETIRED_LATER_AT
from wm.core.imports import hidden
from wm.core.seeds import SEED_HIGH, TRAINING_FLOOR
from wm.es import state as es_state


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
    """A `randn(*shape)` for pycma's `randn` option, drawing from its own generator.

    pycma's default (`np.random.randn`) is a bound method of NumPy's global RandomState, shared with everything
    else in the process. With this object the stream belongs to the optimiser, and its state (`rng`) is what the
    checkpoint stores.
    """

    def __init__(self, seed: int):
        self.rng = np.random.default_rng([int(seed), 0xC3A])

    def __call__(self, *shape: int) -> np.ndarray:
        return self.rng.standard_normal(shape)


class CMAES:
    """Ask/tell CMA-ES on a flat parameter vector (pycma, full covariance, active CMA as in the authors' log, §7).

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
    ):
        # pycma's optional scipy.stats (a surrogate model's rank test) and matplotlib (its plots) are never used
        # here: skipped, the CMA-ES master starts ≈ 0.9 s of CPU sooner (wm.core.imports)
        with warnings.catch_warnings(), hidden("scipy.stats", "matplotlib"):
            warnings.simplefilter("ignore")  # "could not import matplotlib" at import
            import cma

        self.n, self.popsize, self.weight_decay, self.antithetic = int(n), int(popsize), float(weight_decay), bool(antithetic)
        self.sigma0 = float(sigma0)
        self._randn = _Randn(seed)
        x0 = np.zeros(self.n) if x0 is None else np.asarray(x0, dtype=np.float64)
        outer = np.random.get_state()
        try:
            # pycma's own draws from numpy's global RNG (samples come from `randn`) start from the seed, not from the
            # entropy numpy seeded the process with: the checkpointed state is then the same in every run
            np.random.seed([int(seed), 0xC3A])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.es = cma.CMAEvolutionStrategy(
                    x0,
                    float(sigma0),
                    {
                        "popsize": self.popsize,
                        "randn": self._randn,  # also keeps pycma from seeding the global RNG with the time
                        "verbose": -9,
                        "verb_log": 0,
                        "verb_disp": 0,  # no console output, no outcmaes/ files
                        "signals_filename": None,
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
        """Everything needed to continue identically, as plain values and arrays (`wm.es.state`): pycma's object
        graph (`dump_object`), the state of its generator, of the NumPy global RNG it sees, of the seed RNG, and
        pycma's options (not stored in the graph: `from_state` builds them again and checks they are these)."""
        if self._asked is not None:
            raise RuntimeError("state_dict() between ask() and tell(): a checkpoint holds a told generation")
        return {
            "algorithm": "cma",
            "n": self.n,
            "popsize": self.popsize,
            "sigma0": self.sigma0,
            "weight_decay": self.weight_decay,
            "antithetic": self.antithetic,
            "options": _plain_options(self.es),
            "es": es_state.dump_object(self.es),
            "randn": self._randn.rng.bit_generator.state,
            "np_state": (self._np_state[0], self._np_state[1].copy(), *self._np_state[2:]),
            "seed_rng": self._seed_rng.bit_generator.state,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> CMAES:
        """Rebuild a wrapper from `state_dict()`: a CMA-ES constructed afresh with the same settings, pycma's stored
        attributes written onto it (`load_object`), the generators set; `StateError` when they do not fit."""
        try:
            if state.get("diagonal"):
                raise es_state.StateError(
                    f"it is separable CMA-ES's (es.cma_diagonal, retired: it needs the code of commit "
                    f"{RETIRED_LATER_AT['es.cma_diagonal']})"
                )
            self = cls(
                int(state["n"]),
                int(state["popsize"]),
                float(state["sigma0"]),
                float(state["weight_decay"]),
                antithetic=bool(state["antithetic"]),
            )
            if json.dumps(state["options"], sort_keys=True) != json.dumps(_plain_options(self.es), sort_keys=True):
                raise es_state.StateError("pycma's options differ from this code's (another pycma version?)")
            es_state.load_object(state["es"], self.es)
            if self.es.countiter and not hasattr(self.es, "timer"):  # wall-clock time, not stored (`SKIP`): anew
                from cma.utilities.utils import ElapsedWCTime

                self.es.timer = ElapsedWCTime()
            self._randn.rng = es_state.generator(state["randn"], "randn")
            self._seed_rng = es_state.generator(state["seed_rng"], "seed_rng")
            np_state = state["np_state"]
            outer = np.random.get_state()
            try:
                np.random.set_state(np_state)  # checks it
            finally:
                np.random.set_state(outer)
            self._np_state = np_state
        except es_state.StateError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise es_state.StateError(f"a CMA-ES state that does not fit ({type(e).__name__}: {e})") from None
        return self


def _plain_options(es: Any) -> dict[str, Any]:
    """pycma's options that are plain values (its functions, classes and our generator left out), as JSON values."""

    def plain(v: Any) -> bool:
        if v is None or isinstance(v, (bool, int, float, str)):
            return True
        if isinstance(v, (list, tuple)):
            return all(plain(x) for x in v)
        if isinstance(v, dict):
            return all(isinstance(k, str) and plain(x) for k, x in v.items())
        return False

    return json.loads(json.dumps({k: v for k, v in es.opts.items() if plain(v)}, sort_keys=True))
