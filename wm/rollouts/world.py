"""One world loader: V, M, C and the dream's initial z of a run, with every check in one place.

    world = load_world(setup(cfg), run, need=("mdnrnn", "initial_z"))                  # the dream
    world = load_world(setup(cfg), run, ("vae", "mdnrnn", "params"), run.params("best"))  # the real-env agent

Every consumer (the dream and real evaluators, evaluation recordings, the agent data policy, M's dream preview)
loads through here, so a missing file, a model of the wrong size, a controller vector of the wrong length or with
non-finite values, or a misshapen initial_z is refused in one line naming the file and what to run. C (the
`Controller`) is always built: it costs nothing and fixes the parameter count. It reads the config's resolved
`Setup` (`wm.envs.setup`: the sizes, heads and C's layout), not the config; which params file an evaluation plays,
and what it played with, are the evaluation's (`wm.rollouts.evaluation.played_params`, `input_digest`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from wm.core.errors import WMError
from wm.core.rundir import RunDir
from wm.envs.setup import Setup

if TYPE_CHECKING:
    from wm.models.controller import Controller

NEEDS = ("vae", "mdnrnn", "params", "initial_z")


@dataclass
class World:
    """What `load_world` built; a part not asked for is None."""

    run: RunDir
    setup: Setup  # the config's env facts (`wm.envs.setup`): what the world's users read instead of the config
    controller: Controller
    vae: Any = None
    mdnrnn: Any = None
    params: np.ndarray | None = None  # (n,) float32
    params_path: Path | None = None
    initial_mu: np.ndarray | None = None  # (N, z) float32
    initial_logvar: np.ndarray | None = None


def read_params(path: Path, n: int, what: str = "controller parameters") -> np.ndarray:
    """The `params` vector of an .npz, checked to hold `n` finite numbers; one WMError line naming the file."""
    if not Path(path).exists():
        raise WMError(f"{what} {path} not found")
    try:
        with np.load(path, allow_pickle=False) as f:
            params = np.asarray(f["params"], np.float64).reshape(-1)
    except Exception as e:  # noqa: BLE001 — any unreadable file is one clear line
        raise WMError(f"{what}: cannot read {path} ({type(e).__name__}: {e})".splitlines()[0]) from None
    if params.size != n:
        raise WMError(f"{what}: {path} holds {params.size} parameters but C needs {n}; check controller/vae/mdnrnn settings")
    if not np.all(np.isfinite(params)):
        raise WMError(f"{what}: {path} holds non-finite values")
    return params


def read_initial_z(path: Path, z_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """μ and logvar (N, z_dim) float32 of `series/initial_z.npz`, checked for shape and finiteness."""
    if not path.exists():
        raise WMError(f"{path} not found (run encode first: the dream starts from it)")
    try:
        with np.load(path, allow_pickle=False) as f:
            mu, logvar = f["mu"].astype(np.float32), f["logvar"].astype(np.float32)
    except Exception as e:  # noqa: BLE001 — any unreadable file is one clear line
        raise WMError(f"{path}: unreadable initial_z ({type(e).__name__}: {e})".splitlines()[0]) from None
    if mu.ndim != 2 or mu.shape != logvar.shape or mu.shape[1] != z_dim or not len(mu):
        raise WMError(f"{path}: initial_z has shape {mu.shape}/{logvar.shape}, expected (N, {z_dim}); check vae.z_dim")
    if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(logvar))):
        raise WMError(f"{path}: initial_z holds non-finite values")
    return mu, logvar


def load_world(facts: Setup, run: RunDir, need: tuple[str, ...] | list[str] = (), params: Path | None = None) -> World:
    """Build the parts of the run's world named in `need` (any of "vae", "mdnrnn", "params", "initial_z").

    Args:
        facts: the run's config resolved (`wm.envs.setup.setup(cfg)`).
        params: the controller parameters file "params" reads (`run.params("best")`, `played_params`).
    Raises:
        WMError, one line naming the file and the fix, for anything missing, misshapen or non-finite.
    """
    unknown = sorted(set(need) - set(NEEDS))
    if unknown:
        raise ValueError(f"load_world: unknown parts {unknown} (expected some of {NEEDS})")
    from wm.models.controller import Controller

    world, sizes = World(run, facts, Controller.from_setup(facts)), facts.sizes
    if "vae" in need:
        from wm.models.vae import load_vae

        world.vae = load_vae(run.vae_weights, sizes.z_dim)
    if "mdnrnn" in need:
        from wm.models.mdnrnn import load_mdnrnn

        world.mdnrnn = load_mdnrnn(
            run.mdnrnn_weights,
            sizes.z_dim,
            sizes.action_dim,
            sizes.hidden,
            sizes.num_mixtures,
            sizes.predict_done,
            dropout=sizes.dropout,  # in the dream, masks per episode (wm.rollouts.dream)
            predict_reward=sizes.predict_reward,
        )
    if "params" in need:
        if params is None:
            raise ValueError("load_world: the params part needs the file to read (params=run.params('best'), ...)")
        world.params_path = Path(params)
        if not world.params_path.exists():
            raise WMError(
                f"controller parameters {world.params_path} not found; run `python -m wm train-controller "
                f"--run {run.path}` or pass --params FILE.npz (or --random for the baseline)"
            )
        world.params = read_params(world.params_path, world.controller.n_params).astype(np.float32)
    if "initial_z" in need:
        world.initial_mu, world.initial_logvar = read_initial_z(run.initial_z, sizes.z_dim)
    return world
