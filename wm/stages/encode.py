"""`encode`: run V over every episode and write the series M trains on (docs/paper-settings.md §3).

`series/ep_NNNNNN.npz` holds μ and logvar (float16, as the authors' `series.py`), plus the episode's action,
reward and done; `series/initial_z.npz` holds float32 μ and logvar of frame 0 of the first `encode.initial_z`
episodes in sorted order (the dream's start states, §3, §5). Each episode is written atomically, so a rerun skips
every valid existing output and continues; a bad episode file is reported and skipped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wm.core.atomic import atomic_savez
from wm.core.config import Config
from wm.core.errors import WMError
from wm.core.metrics import make_logger
from wm.core.rundir import RunDir
from wm.data.episodes import (
    SERIES_KEYS,
    EpisodeError,
    check_folder,
    episode_index,
    episode_name,
    episode_spec,
    list_episodes,
    read_episode,
    write_episode,
)
from wm.stages.contract import StageInput


def _series_ok(path: Path, z_dim: int) -> bool:
    """An existing output is kept when it loads, has every key and μ (and logvar) of width z_dim."""
    if not path.exists():
        return False
    try:
        d = read_episode(path, SERIES_KEYS)
    except EpisodeError:
        return False
    return d["mu"].ndim == 2 and d["mu"].shape[1] == z_dim and d["mu"].shape == d["logvar"].shape


def encode_frames(encoder, obs: np.ndarray, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """μ and logvar of every frame of `obs`, in batches of `batch_size` through the compiled encoder."""
    mus, lvs = [], []
    for i in range(0, len(obs), batch_size):
        mu, lv = encoder(obs[i : i + batch_size])
        mus.append(mu.numpy())
        lvs.append(lv.numpy())
    return np.concatenate(mus), np.concatenate(lvs)


@dataclass
class _Tally:
    """What the encode loop keeps and counts: the good episodes, frame 0's μ and logvar for initial_z, the files."""

    bad: int  # bad episode files: the header check's, then those found damaged while reading (`late`)
    late: int = 0
    skipped: int = 0
    written: int = 0
    frames: int = 0
    initial: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    good: list[Path] = field(default_factory=list)


def _check_upstream(run: RunDir, z_dim: int) -> None:
    """Refuse without a finished V of this z size, or without episodes."""
    vae_dir = run.stage_dir("train-vae")
    if not run.is_done("train-vae"):
        raise WMError(f"no finished V in {vae_dir} (run `train-vae` first)")
    done_info = run.done_info("train-vae")
    if done_info.get("z_dim") not in (None, z_dim):
        raise WMError(f"V in {vae_dir} was trained with z_dim={done_info['z_dim']} but vae.z_dim is {z_dim}")
    if not list_episodes(run.episodes_dir):
        raise WMError(f"no episode files in {run.stage_dir('collect')}")


@dataclass(frozen=True)
class Options:
    """encode has no flags of its own and reads none of the shared ones (a rerun keeps every valid output)."""


def run(inp: StageInput, run: RunDir, opts: Options) -> None:
    """Encode every episode of `episodes/` with the best V of `vae/` into `series/`."""
    from wm.core import tf_setup
    from wm.models.vae import load_vae
    from wm.models.vae_tf import make_encoder

    cfg = inp.cfg
    z_dim = cfg.vae.z_dim
    out = run.stage_dir("encode")
    _check_upstream(run, z_dim)

    with make_logger(run, "encode") as log:
        # the one validation path, over every episode before anything is written: a misshapen or corrupt file is
        # named and skipped (never half-encoded), and too many of them refuse the stage with series/ untouched
        spec = episode_spec(inp.setup)
        checked = check_folder(run.episodes_dir, "episode", max_bad_share=cfg.data.max_bad_share, log=log, **spec)
        out.mkdir(parents=True, exist_ok=True)
        tf_setup.setup()
        model = load_vae(run.vae_weights, z_dim)  # WMError naming the file when the z size does not fit
        encoder = make_encoder(model)
        tally = _Tally(bad=len(checked.bad))
        t0 = time.perf_counter()
        _encode_episodes(cfg, encoder, checked.paths, out, tally, t0, log)
        checked.refuse_if_too_many_bad(cfg.data.max_bad_share, tally.late)
        _finish(cfg, run, tally, t0, log)


def _encode_episodes(cfg: Config, encoder, episodes: list[Path], out: Path, tally: _Tally, t0: float, log) -> None:
    """Encode each episode into `out` (a valid existing output is kept), frame 0 of the first `encode.initial_z` good
    ones kept for initial_z; a file found damaged is named and skipped."""
    z_dim, bs, n_init = cfg.vae.z_dim, cfg.encode.batch_size, cfg.encode.initial_z
    good, last = tally.good, 0.0
    for path in episodes:
        target = out / episode_name(episode_index(path))
        need_initial = len(good) < n_init
        if _series_ok(target, z_dim) and not need_initial:
            good.append(path)
            tally.skipped += 1
            continue
        try:
            ep = read_episode(path)
        except EpisodeError as e:  # damage inside the compressed data, which the header check cannot see
            log.warning("skipping bad episode file: %s", e)
            tally.bad, tally.late = tally.bad + 1, tally.late + 1
            continue
        if _series_ok(target, z_dim):  # already encoded: only frame 0 is needed for initial_z
            mu, lv = (a.numpy() for a in encoder(ep["obs"][:1]))
            tally.skipped += 1
        else:
            mu, lv = encode_frames(encoder, ep["obs"], bs)
            write_episode(
                target,
                mu=mu.astype(np.float16),
                logvar=lv.astype(np.float16),
                action=ep["action"],
                reward=ep["reward"],
                done=ep["done"],
            )
            tally.written += 1
            tally.frames += len(mu)
        if need_initial:
            tally.initial[len(good)] = (mu[0].astype(np.float32), lv[0].astype(np.float32))
        good.append(path)
        now = time.perf_counter()
        if now - last >= 2.0 or path == episodes[-1]:
            last = now
            log.scalars(
                len(good),
                {"encode/episodes": len(good), "encode/frames_per_s": tally.frames / max(now - t0, 1e-9)},
                console=15.0,
            )


def _finish(cfg: Config, run: RunDir, tally: _Tally, t0: float, log) -> None:
    """Write initial_z, the last record and DONE."""
    n_init, good, bad = cfg.encode.initial_z, tally.good, tally.bad
    k = sorted(tally.initial)[:n_init]
    initial = tally.initial
    atomic_savez(run.initial_z, mu=np.stack([initial[i][0] for i in k]), logvar=np.stack([initial[i][1] for i in k]))
    fps = tally.frames / max(time.perf_counter() - t0, 1e-9)
    log.scalars(len(good), {"encode/episodes": len(good), "encode/frames_per_s": fps, "encode/bad_files": bad})
    info = {
        "episodes": len(good),
        "written": tally.written,
        "kept": tally.skipped,
        "bad_files": bad,
        "z_dim": cfg.vae.z_dim,
        "initial_z": len(k),
        "frames_per_s": round(fps, 1),
    }
    run.mark_done("encode", info)
    log.info(
        "encoded %d episodes (%d new, %d kept, %d bad files skipped); initial_z: %d",
        len(good),
        tally.written,
        tally.skipped,
        bad,
        len(k),
    )
