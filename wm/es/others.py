"""The authors' other evolution strategies behind CMA-ES's interface (`es.algorithm`: openes | pepg | ga).

Ha's estool offered CMA-ES, OpenES, PEPG and a simple GA behind one ask/tell interface and his essays compare them.
No maintained NumPy library covers the three (evosax is JAX, evotorch PyTorch: a second array framework for a few
dozen lines each), so these are small implementations of the published update rules, written from the papers:

* **OpenES** — Salimans et al. 2017, "Evolution Strategies as a Scalable Alternative to Reinforcement Learning":
  members θ ± σ·ε (mirrored sampling: member i and i + P/2 share ε with opposite signs, and their seeds, as
  CMA-ES's antithetic pairs), fitness shaped to centred ranks in [−0.5, 0.5], gradient
  g = Σ_i F_i ε_i / (P σ), ascended with Adam (`es.lr`); σ ← max(σ · `sigma_decay`, `sigma_min`).
* **PEPG / PGPE** — Sehnke et al. 2010, "Parameter-exploring policy gradients", symmetric sampling with reward
  normalisation: ε ~ N(0, diag σ²), members μ ± ε; with r⁺, r⁻ the pair's fitness, m the generation's best and b a
  running baseline (mean fitness, decay 0.9): g_μ = Σ_k ε_k (r⁺_k − r⁻_k) / (2m − r⁺_k − r⁻_k) / K, ascended with
  Adam (`es.lr`, as OpenES: the paper's plain step α_μ · g_μ moves μ by ≈ α_μ σ / 4 per generation, so at
  `es.lr` 0.01 and σ 0.1 a Doom C had moved 0.02 after 80 generations and scored like the random policy),
  Δσ = α_σ Σ_k ((ε_k² − σ²)/σ) ((r⁺_k + r⁻_k)/2 − b) / (m − b) / K (K = P/2 pairs, a plain step); σ clipped to
  [`sigma_min`, 10 σ₀] (the paper bounds it to keep it positive).
* **GA** — a truncation-selection genetic algorithm (Such et al. 2017, "Deep Neuroevolution"): the best
  `elite_ratio` · P members survive unchanged (the best one also re-evaluated each generation), the rest are a
  uniformly picked elite plus σ·N(0, I) noise; σ decays as OpenES's. The deployed solution is the best member.

Every class has CMAES's methods and properties (`ask`, `seeds`, `tell`, `mean`, `sigma`, `state_dict`,
`from_state`): the fitness it maximises is `R − wd · mean(θ²)` (`penalized_fitness`), NaN members (lost tasks)
rank with the worst, and the whole state is plain values and arrays (the generators' states included, `wm.es.state`)
so a resumed run asks exactly the populations an uninterrupted one would.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wm.core.errors import WMError
from wm.es import state as es_state
from wm.es.cmaes import episode_seeds, member_seeds, told_fitness

ALGORITHMS = ("cma", "openes", "pepg", "ga")


def centered_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks of `x` scaled to [−0.5, 0.5] (ties broken by position): OpenES's fitness shaping."""
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[np.argsort(x, kind="stable")] = np.arange(len(x))
    return ranks / max(len(x) - 1, 1) - 0.5


class _Adam:
    """Adam ascent on a flat vector (Kingma & Ba 2015), the optimiser OpenES's paper used."""

    def __init__(self, n: int, lr: float, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8):
        self.lr, self.b1, self.b2, self.eps = float(lr), beta1, beta2, eps
        self.m, self.v, self.t = np.zeros(n), np.zeros(n), 0

    def step(self, grad: np.ndarray) -> np.ndarray:
        self.t += 1
        self.m = self.b1 * self.m + (1 - self.b1) * grad
        self.v = self.b2 * self.v + (1 - self.b2) * grad**2
        m_hat, v_hat = self.m / (1 - self.b1**self.t), self.v / (1 - self.b2**self.t)
        return self.lr * m_hat / (np.sqrt(v_hat) + self.eps)

    def state_dict(self) -> dict[str, Any]:
        hyper = {"lr": self.lr, "b1": self.b1, "b2": self.b2, "eps": self.eps}
        return hyper | {"m": self.m.copy(), "v": self.v.copy(), "t": self.t}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> _Adam:
        self = cls.__new__(cls)
        self.lr, self.b1, self.b2, self.eps = state["lr"], state["b1"], state["b2"], state["eps"]
        self.m, self.v, self.t = _array(state["m"], "adam.m"), _array(state["v"], "adam.v"), int(state["t"])
        return self


def _array(x: Any, where: str) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise es_state.StateError(f"{where}: not an array")
    return x


class _Base:
    """What the three share: member seeds, the penalised fitness, NaN handling, the state as plain values.

    `_STATE` names a subclass's own attributes of the state (plain values, arrays, or the `_Adam`); what an ask
    leaves for its tell (`_asked`, `_eps`, `_seeds`) is not state: a checkpoint is taken after a tell.
    """

    name = ""
    _STATE: tuple[str, ...] = ()

    def __init__(self, n: int, popsize: int, sigma0: float, weight_decay: float, seed: int, antithetic: bool, x0):
        self.n, self.popsize, self.weight_decay, self.antithetic = int(n), int(popsize), float(weight_decay), bool(antithetic)
        self.x = np.zeros(self.n) if x0 is None else np.asarray(x0, np.float64).copy()
        self.sigma0 = float(sigma0)
        self.rng = np.random.default_rng([int(seed), 0xE5])
        self._seed_rng = np.random.default_rng([int(seed), 0x5EED])
        self._asked: np.ndarray | None = None
        self._seeds: np.ndarray | None = None

    def _draw_seeds(self) -> None:
        self._seeds = member_seeds(self._seed_rng, self.popsize, self.antithetic)

    def seeds(self, trials: int) -> np.ndarray:
        if self._seeds is None:
            raise RuntimeError("call ask() first")
        return episode_seeds(self._seeds, trials)

    def _fitness(self, returns: np.ndarray) -> np.ndarray:
        if self._asked is None:
            raise RuntimeError("call ask() first")
        return told_fitness(returns, self._asked, self.weight_decay)

    @property
    def mean(self) -> np.ndarray:
        """The solution to deploy and evaluate (OpenES, PEPG: the mean; GA: the best member)."""
        return self.x.copy()

    def state_dict(self) -> dict[str, Any]:
        if self._asked is not None:
            raise RuntimeError("state_dict() between ask() and tell(): a checkpoint holds a told generation")

        def plain(v: Any) -> Any:
            return v.state_dict() if isinstance(v, _Adam) else v.copy() if isinstance(v, np.ndarray) else v

        return {
            "algorithm": self.name,
            "n": self.n,
            "popsize": self.popsize,
            "weight_decay": self.weight_decay,
            "antithetic": self.antithetic,
            "sigma0": self.sigma0,
            "x": self.x.copy(),
            "rng": self.rng.bit_generator.state,
            "seed_rng": self._seed_rng.bit_generator.state,
            **{k: plain(getattr(self, k)) for k in self._STATE},
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> _Base:
        """Rebuild the optimiser `state_dict()` describes; `StateError` when it does not fit this class."""
        if state.get("algorithm") != cls.name:
            raise es_state.StateError(f"a {state.get('algorithm')!r} state, not {cls.name}'s")
        self = cls.__new__(cls)
        try:
            self.n, self.popsize = int(state["n"]), int(state["popsize"])
            self.weight_decay, self.antithetic = float(state["weight_decay"]), bool(state["antithetic"])
            self.sigma0, self.x = float(state["sigma0"]), _array(state["x"], "x")
            self.rng = es_state.generator(state["rng"], "rng")
            self._seed_rng = es_state.generator(state["seed_rng"], "seed_rng")
            for k in cls._STATE:
                setattr(self, k, _Adam.from_state(state[k]) if k == "adam" else state[k])
        except (KeyError, TypeError) as e:
            raise es_state.StateError(f"a {cls.name} state that does not fit ({type(e).__name__}: {e})") from None
        if self.x.shape != (self.n,):
            raise es_state.StateError(f"a {cls.name} state whose mean has shape {self.x.shape}, not ({self.n},)")
        self._asked = self._seeds = self._eps = None
        return self


class OpenES(_Base):
    name = "openes"
    _STATE = ("_sigma", "sigma_decay", "sigma_min", "adam")

    def __init__(self, *a, lr: float = 0.01, sigma_decay: float = 0.999, sigma_min: float = 0.01, **kw):
        super().__init__(*a, **kw)
        if self.popsize % 2:
            raise WMError(f"es.algorithm openes samples mirrored pairs: es.popsize must be even, got {self.popsize}")
        self._sigma, self.sigma_decay, self.sigma_min = self.sigma0, float(sigma_decay), float(sigma_min)
        self.adam = _Adam(self.n, lr)
        self._eps: np.ndarray | None = None

    @property
    def sigma(self) -> float:
        return float(self._sigma)

    def ask(self) -> np.ndarray:
        half = self.rng.standard_normal((self.popsize // 2, self.n))
        self._eps = np.concatenate([half, -half])
        self._asked = self.x + self._sigma * self._eps
        self._draw_seeds()
        return self._asked.copy()

    def tell(self, returns: np.ndarray) -> np.ndarray:
        fit = self._fitness(returns)
        grad = centered_ranks(fit) @ self._eps / (self.popsize * self._sigma)
        self.x = self.x + self.adam.step(grad)
        self._sigma = max(self._sigma * self.sigma_decay, self.sigma_min)
        self._asked = None
        return fit


class PEPG(_Base):
    name = "pepg"
    _STATE = ("sigmas", "lr", "lr_sigma", "sigma_min", "baseline", "adam")

    def __init__(self, *a, lr: float = 0.01, lr_sigma: float = 0.2, sigma_min: float = 0.01, **kw):
        super().__init__(*a, **kw)
        if self.popsize % 2:
            raise WMError(f"es.algorithm pepg samples symmetric pairs: es.popsize must be even, got {self.popsize}")
        self.sigmas = np.full(self.n, self.sigma0)
        self.lr, self.lr_sigma, self.sigma_min = float(lr), float(lr_sigma), float(sigma_min)
        self.baseline: float | None = None
        self.adam = _Adam(self.n, self.lr)
        self._eps: np.ndarray | None = None

    @property
    def sigma(self) -> float:
        return float(np.mean(self.sigmas))

    def ask(self) -> np.ndarray:
        self._eps = self.rng.standard_normal((self.popsize // 2, self.n)) * self.sigmas
        self._asked = np.concatenate([self.x + self._eps, self.x - self._eps])
        self._draw_seeds()
        return self._asked.copy()

    def tell(self, returns: np.ndarray) -> np.ndarray:
        fit = self._fitness(returns)
        k = self.popsize // 2
        r_plus, r_minus = fit[:k], fit[k:]
        m = float(fit.max())
        b = float(fit.mean()) if self.baseline is None else self.baseline
        denom_t = 2 * m - r_plus - r_minus  # ≥ 0; 0 only when both members of a pair are the best
        r_t = np.divide(r_plus - r_minus, denom_t, out=np.zeros(k), where=denom_t > 1e-12)
        self.x = self.x + self.adam.step(r_t @ self._eps / k)
        if m - b > 1e-12:
            r_s = ((r_plus + r_minus) / 2 - b) / (m - b)
            grad_s = r_s @ ((self._eps**2 - self.sigmas**2) / self.sigmas) / k
            self.sigmas = np.clip(self.sigmas + self.lr_sigma * grad_s, self.sigma_min, 10 * self.sigma0)
        self.baseline = 0.9 * b + 0.1 * float(fit.mean())
        self._asked = None
        return fit


class SimpleGA(_Base):
    name = "ga"
    _STATE = ("n_elite", "_sigma", "sigma_decay", "sigma_min", "elites")

    def __init__(self, *a, elite_ratio: float = 0.1, sigma_decay: float = 0.999, sigma_min: float = 0.01, **kw):
        super().__init__(*a, **kw)
        self.n_elite = max(1, int(round(elite_ratio * self.popsize)))
        self._sigma, self.sigma_decay, self.sigma_min = self.sigma0, float(sigma_decay), float(sigma_min)
        self.elites = self.x[None].copy()  # generation 0 mutates the start point

    @property
    def sigma(self) -> float:
        return float(self._sigma)

    def ask(self) -> np.ndarray:
        pick = self.rng.integers(0, len(self.elites), self.popsize - len(self.elites))
        children = self.elites[pick] + self._sigma * self.rng.standard_normal((len(pick), self.n))
        self._asked = np.concatenate([self.elites, children])
        self._draw_seeds()
        return self._asked.copy()

    def tell(self, returns: np.ndarray) -> np.ndarray:
        fit = self._fitness(returns)
        order = np.argsort(-fit, kind="stable")[: self.n_elite]
        self.elites = self._asked[order].copy()
        self.x = self.elites[0].copy()
        self._sigma = max(self._sigma * self.sigma_decay, self.sigma_min)
        self._asked = None
        return fit


def make_es(es_cfg, n: int, x0: np.ndarray | None = None, seed: int | None = None):
    """The optimiser `es.algorithm` names, from the `es` config section (`seed`: instead of `es.seed`, a draw's)."""
    algo = es_cfg.algorithm
    e = es_cfg
    seed = e.seed if seed is None else int(seed)
    args = (n, e.popsize, e.sigma0, e.weight_decay, seed, e.antithetic)
    if algo == "cma":
        from wm.es.cmaes import CMAES

        return CMAES(*args, x0=x0)
    if algo == "openes":
        return OpenES(*args, x0, lr=es_cfg.lr, sigma_decay=es_cfg.sigma_decay, sigma_min=es_cfg.sigma_min)
    if algo == "pepg":
        return PEPG(*args, x0, lr=es_cfg.lr, lr_sigma=es_cfg.lr_sigma, sigma_min=es_cfg.sigma_min)
    if algo == "ga":
        return SimpleGA(*args, x0, elite_ratio=es_cfg.elite_ratio, sigma_decay=es_cfg.sigma_decay, sigma_min=es_cfg.sigma_min)
    raise WMError(f"es.algorithm must be one of {', '.join(ALGORITHMS)}, got {algo!r}")


def es_from_state(state: dict[str, Any]):
    """Rebuild the optimiser a checkpoint holds (`state_dict()`'s plain values); `StateError` when it cannot."""
    algo = state.get("algorithm") if isinstance(state, dict) else None
    if algo == "cma":
        from wm.es.cmaes import CMAES

        return CMAES.from_state(state)
    classes = {c.name: c for c in (OpenES, PEPG, SimpleGA)}
    if algo not in classes:
        raise es_state.StateError(f"an optimiser state of algorithm {algo!r}")
    return classes[algo].from_state(state)
