"""`python -m wm evaluate`: the paper's evaluation protocol (paper_settings.md §9) on a fixed, recorded seed list.

    python -m wm evaluate --run runs/doom                  # trained C (best) in the real env, 100 episodes → DONE
    python -m wm evaluate --run runs/doom --random         # random policy baseline (Doom paper: 210 ± 108), no model
    python -m wm evaluate --run runs/doom --dream          # C inside M at dream.temperature (or --temperature)
    python -m wm evaluate --run runs/doom --sweep          # Doom τ table: dream and real score per τ (wm/sweep.py)

Episode i uses seed `evaluate.seed + i` (env reset and every random draw of that episode), so two evaluations of the
same params give the same numbers. Results go to `eval/<tag>/{episodes.jsonl,summary.json,episode_000.gif}`; the
default real evaluation also writes `eval/summary.json` (read by `wm status`) and `eval/DONE`. Every other mode is a
side run (`side_run`) that neither needs nor touches DONE. The ± is `np.std` over the episodes, as in §9.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from wm.config import Config
from wm.errors import WMError
from wm.procpool import at_worker_exit, spawn_map
from wm.rundir import RunDir, atomic_write_json, atomic_write_text


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", default=None, metavar="{best,mean,FILE.npz}",
                   help="controller parameters: best | mean (controller/<x>.npz) | a .npz path (default: evaluate.params)")
    p.add_argument("--dream", action="store_true", help="evaluate inside M (the dream) instead of the real env")
    p.add_argument("--random", action="store_true", help="uniform random actions instead of C (needs no trained model)")
    p.add_argument("--sweep", action="store_true", help="Doom τ table over evaluate.temperatures (dream and real)")
    p.add_argument("--sweep-runs", nargs="+", default=[], metavar="RUN",
                   help="with --sweep: run dirs of controllers trained at other τ (their dream.temperature picks the row)")
    p.add_argument("--episodes", type=int, default=None, help="episodes (default: evaluate.episodes)")
    p.add_argument("--temperature", type=float, default=None, help="dream τ (default: dream.temperature)")
    p.add_argument("--tag", default=None, help="results folder eval/<tag> (default: real | dream | random | random-dream)")


def side_run(args: argparse.Namespace) -> bool:
    """Everything but the default real evaluation is a side run: it neither checks nor writes eval/DONE."""
    return bool(args.dream or args.random or args.sweep or (args.tag not in (None, "real")))


# ---------------------------------------------------------------- protocol pieces (no TF)


def seed_list(cfg: Config, episodes: int | None = None) -> list[int]:
    """The fixed evaluation seeds: `evaluate.seed + i` for i < episodes."""
    n = cfg.evaluate.episodes if episodes is None else episodes
    return [int(cfg.evaluate.seed) + i for i in range(int(n))]


def summarize(returns: np.ndarray, lengths: np.ndarray) -> dict[str, Any]:
    """Mean, std (`np.std`, ddof 0, as the paper's ± in §9), min, median, max of the returns and the mean length."""
    r, n = np.asarray(returns, float), np.asarray(lengths, float)
    if r.size == 0:
        raise WMError("no evaluation episodes to summarise")
    return {"episodes": int(r.size), "mean": float(r.mean()), "std": float(r.std()), "min": float(r.min()),
            "median": float(np.median(r)), "max": float(r.max()), "len_mean": float(n.mean())}


def format_summary(s: dict[str, Any]) -> str:
    """`412.3 ± 208.1 over 100 episodes (min 98, median 371, max 2100)`."""
    return (f"{s['mean']:.1f} ± {s['std']:.1f} over {s['episodes']} episodes "
            f"(min {s['min']:.0f}, median {s['median']:.1f}, max {s['max']:.0f})")


def default_tag(dream: bool, random: bool) -> str:
    return {(False, False): "real", (True, False): "dream", (False, True): "random", (True, True): "random-dream"}[(dream, random)]


def params_path(cfg: Config, run: RunDir, spec: str | None) -> Path:
    """`best` / `mean` → controller/<x>.npz of the run; anything else is a path to an .npz holding `params`."""
    spec = spec or cfg.evaluate.params
    return run.stage_dir("train-controller") / f"{spec}.npz" if spec in ("best", "mean") else Path(spec)


def load_params(cfg: Config, run: RunDir, spec: str | None) -> tuple[np.ndarray, Path]:
    """The controller vector and its file; a missing or malformed file is a WMError naming it."""
    path = params_path(cfg, run, spec)
    if not path.exists():
        raise WMError(f"controller parameters {path} not found; run `python -m wm train-controller --run {run.path}` "
                      "or pass --params FILE.npz (or --random for the baseline)")
    try:
        with np.load(path) as f:
            params = np.asarray(f["params"], np.float32).reshape(-1)
    except Exception as e:  # noqa: BLE001 — any unreadable file is one clear line
        raise WMError(f"cannot read controller parameters from {path}: {e}") from None
    if not np.all(np.isfinite(params)):
        raise WMError(f"controller parameters in {path} are not finite")
    from wm.envs import action_dim
    from wm.models.controller import Controller

    ctrl = Controller.from_config(cfg, action_dim(cfg.env.name))
    if params.size != ctrl.n_params:
        raise WMError(f"{path} holds {params.size} parameters but {ctrl} needs {ctrl.n_params}; check controller/vae/mdnrnn settings")
    return params, path


class Progress:
    """One progress line: `[eval] 37/100 episodes  mean 412.3  (12s)`; rewritten in place on a terminal."""

    def __init__(self, total: int, label: str):
        self.total, self.label, self.done, self.sum = total, label, 0, 0.0
        self.start, self.last, self.tty = time.time(), 0.0, sys.stdout.isatty()

    def update(self, returns: list[float]) -> None:
        self.done += len(returns)
        self.sum += float(np.sum(returns))
        now = time.time()
        if self.done < self.total and now - self.last < (0.2 if self.tty else 5.0):
            return
        self.last = now
        line = (f"[eval] {self.label}: {self.done}/{self.total} episodes  mean {self.sum / max(1, self.done):.1f}  "
                f"({now - self.start:.0f}s)")
        end = "\n" if not self.tty or self.done >= self.total else ""
        print(("\r" if self.tty else "") + line, end=end, flush=True)


# ---------------------------------------------------------------- writing results


def write_results(run: RunDir, tag: str, seeds: list[int], returns: np.ndarray, lengths: np.ndarray,
                  extra: dict[str, Any]) -> dict[str, Any]:
    """Write `eval/<tag>/episodes.jsonl` and `summary.json`; returns the summary."""
    out = run.stage_dir("evaluate") / tag
    lines = [json.dumps({"episode": i, "seed": int(s), "return": float(r), "length": int(n)})
             for i, (s, r, n) in enumerate(zip(seeds, returns, lengths, strict=True))]
    atomic_write_text(out / "episodes.jsonl", "\n".join(lines) + "\n")
    summary = {**summarize(returns, lengths), "seeds": [int(s) for s in seeds], "tag": tag, **extra}
    atomic_write_json(out / "summary.json", summary)
    return summary


# ---------------------------------------------------------------- episodes (workers import TF/envs inside)

_CTX: dict[Any, Any] = {}  # per process: the loaded agent/evaluator of one (run, mode, τ), reused across chunks


def _random_episode(cfg: Config, env: Any, seed: int, record: bool = False) -> tuple[float, int, dict[str, list]]:
    """One episode of uniform random controller-space actions (the paper's random policy, §9) in the real env."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=int(seed))
    shape = env.action_space.shape
    frames: dict[str, list] = {"real": [], "input": []}
    total, t = 0.0, 0
    while t < cfg.env.max_steps:
        if record:
            frames["input"].append(obs)
            frames["real"].append(info.get("raw", obs))
        obs, r, term, trunc, info = env.step(rng.uniform(-1.0, 1.0, shape).astype(np.float32))
        total, t = total + float(r), t + 1
        if term or trunc:
            break
    return total, t, frames


def m_weights(run: RunDir) -> Path:
    """M's weights file in the run (`mdnrnn/mdnrnn.weights.h5`); WMError naming it when missing."""
    path = run.stage_dir("train-mdnrnn") / "mdnrnn.weights.h5"
    if not path.exists():
        raise WMError(f"M weights {path} not found (run train-mdnrnn first)")
    return path


def dream_env(cfg: Config, run: RunDir, temperature: float, params: np.ndarray | None = None) -> Any:
    """A single `wm.dream.DreamEnv` of the run at temperature τ (M and initial_z as `load_dream` reads them)."""
    from wm import dream as D
    from wm.models.controller import Controller
    from wm.models.mdnrnn import load_mdnrnn

    a_dim = D.action_dim(cfg)
    m = load_mdnrnn(m_weights(run), cfg.vae.z_dim, a_dim, cfg.mdnrnn.hidden, cfg.mdnrnn.num_mixtures, cfg.mdnrnn.predict_done)
    mu, logvar = D.load_initial_z(run.stage_dir("encode") / "initial_z.npz")
    return D.DreamEnv(m, Controller.from_config(cfg, a_dim), mu, logvar, temperature, cfg.dream.max_steps, params=params,
                       done_sampling=cfg.dream.done_sampling, done_weight=cfg.mdnrnn.done_weight)


def dream_episode(env: Any, cfg: Config, seed: int, random: bool, decode: Any = None) -> tuple[float, int, dict[str, list]]:
    """One dream episode: C acts (`step(None)`) or uniform random actions (post-processed for CarRacing, §6);
    with `decode` (z (1, z) → (1, 64, 64, 3)), the decoded dream frame of every step."""
    rng = np.random.default_rng(seed)
    env.reset(seed=int(seed))
    frames: dict[str, list] = {"dream": []}
    total, t = 0.0, 0
    while True:
        if decode is not None:
            frames["dream"].append(np.asarray(decode(env.z[None]))[0])
        a = None
        if random:
            a = env.controller.postprocess(rng.uniform(-1.0, 1.0, (1, env.controller.action_dim)).astype(np.float32))
        _, r, term, trunc, _ = env.step(a)
        total, t = total + float(r), t + 1
        if term or trunc or t >= cfg.dream.max_steps:
            return total, t, frames


def _make_evaluator(cfg: Config, run: RunDir, params: np.ndarray | None, dream: bool, random: bool,
                    temperature: float | None) -> Any:
    """A callable `seeds -> (returns, lengths)` for the mode: real C, C in the dream at τ, or random in the dream."""
    if not dream:
        from wm import tf_setup

        tf_setup.setup(threads=1, gpu=False)  # one TF thread per worker process: the workers are the parallelism
        from wm.rollout import RealEvaluator

        ev = RealEvaluator.from_run(cfg, run, n_envs=int(cfg.es.real_envs_per_worker))

        def evaluate_real(seeds: list[int]) -> tuple[np.ndarray, np.ndarray]:
            rets, lens = ev.evaluate(params[None], np.asarray(seeds, np.int64)[None])
            return rets[0], lens[0]

        evaluate_real.close = ev.close  # type: ignore[attr-defined]  # close_ctx closes the envs
        return evaluate_real
    from wm import config as C
    from wm import dream as D

    cfg_t = C.update(cfg, {"dream": {"temperature": float(temperature)}}, source="evaluate --temperature")
    if random:
        env = dream_env(cfg_t, run, float(temperature))

        def evaluate_random(seeds: list[int]) -> tuple[np.ndarray, np.ndarray]:
            out = [dream_episode(env, cfg_t, s, random=True)[:2] for s in seeds]
            return np.array([r for r, _ in out]), np.array([n for _, n in out])

        return evaluate_random
    ev = D.load_dream(cfg_t, run)

    def evaluate(seeds: list[int]) -> tuple[np.ndarray, np.ndarray]:
        rets, lens = ev.evaluate(params[None], np.asarray(seeds, np.int64)[None])
        return np.asarray(rets)[0], np.asarray(lens)[0]

    return evaluate


def close_ctx() -> None:
    """Close and drop this process's cached env/evaluator (ViZDoom runs a child process that must be closed)."""
    for obj in list(_CTX.values()):
        for target in (obj, getattr(obj, "env", None)):
            if target is not None and hasattr(target, "close"):
                try:
                    target.close()
                except Exception:  # noqa: BLE001 — closing is best effort
                    pass
    _CTX.clear()


def _chunk_worker(job: tuple[dict, str, np.ndarray | None, list[int], bool, bool, float | None]) -> list[tuple[float, int]]:
    """Evaluate one chunk of seeds (in a worker process or in-process); heavy imports happen here."""
    cfg_dict, run_path, params, seeds, dream, random, temperature = job
    cfg, run = Config(cfg_dict), RunDir(run_path)
    key = (run_path, dream, random, temperature, None if params is None else params.tobytes())
    if key not in _CTX:
        close_ctx()
        if random and not dream:
            from wm.envs import make_env

            _CTX[key] = make_env(cfg)
        else:
            _CTX[key] = _make_evaluator(cfg, run, params, dream=dream, random=random, temperature=temperature)
    if random and not dream:
        return [_random_episode(cfg, _CTX[key], s)[:2] for s in seeds]
    rets, lens = _CTX[key](list(seeds))
    return list(zip(np.asarray(rets, float).tolist(), np.asarray(lens, int).tolist(), strict=True))


def run_episodes(cfg: Config, run: RunDir, params: np.ndarray | None, seeds: list[int], dream: bool = False,
                 random: bool = False, temperature: float | None = None, workers: int = 1,
                 progress: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Returns and lengths (in seed order) of one episode per seed, over `workers` spawned processes.

    Seeds are split into chunks of about a quarter of a worker's share, so the progress line moves and uneven
    episode lengths stay balanced; `workers <= 1` runs in this process (tests, small dream evaluations).
    """
    workers = max(1, min(int(workers), len(seeds)))
    size = max(1, -(-len(seeds) // (workers * 4)))
    chunks = [seeds[i : i + size] for i in range(0, len(seeds), size)]
    jobs = [(cfg.to_dict(), str(run.path), params, c, dream, random, temperature) for c in chunks]
    results: list[list[tuple[float, int]] | None] = [None] * len(jobs)
    if workers == 1:
        try:
            for i, job in enumerate(jobs):
                results[i] = _chunk_worker(job)
                progress and progress([r for r, _ in results[i]])
        finally:
            close_ctx()
    else:
        for i, res in spawn_map(_indexed_chunk, list(enumerate(jobs)), workers, "evaluate", at_worker_exit, (close_ctx,)):
            results[i] = res
            progress and progress([r for r, _ in res])
    flat = [x for res in results for x in (res or [])]
    return np.array([r for r, _ in flat], float), np.array([n for _, n in flat], int)


def _indexed_chunk(item: tuple[int, tuple]) -> tuple[int, list[tuple[float, int]]]:
    return item[0], _chunk_worker(item[1])


# ---------------------------------------------------------------- videos


def _record_real(cfg: Config, run: RunDir, params: np.ndarray, seed: int) -> dict[str, list]:
    """The real episode of `seed` replayed by the batched evaluator (one env, same seeding as the evaluation):
    the raw screen, V's 64×64 input and V's reconstruction of the sampled z at every step."""
    from wm import tf_setup
    from wm.rollout import RealEvaluator

    tf_setup.setup(threads=1, gpu=False)
    ev = RealEvaluator.from_run(cfg, run, n_envs=1, keep_raw=True)
    try:
        ev.evaluate(params[None], np.array([[seed]], np.int64), record=1)
    finally:
        ev.close()
    z = np.stack(ev.latents[0])
    recon = np.concatenate([np.asarray(ev.vae.decode(z[i : i + 256])) for i in range(0, len(z), 256)])  # batched
    return {"real": ev.frames[0][: len(z)], "input": ev.inputs[0], "reconstruction": list(recon)}


def record_episode(cfg: Config, run: RunDir, params: np.ndarray | None, seed: int, dream: bool = False,
                   random: bool = False, temperature: float | None = None) -> dict[str, np.ndarray]:
    """Replay the episode of `seed` and return its frames per panel, each (T, H, W, 3) uint8.

    Real: "real" (the raw screen), "input" (V's 64×64 input) and "reconstruction" (V's decoding of the sampled
    z; only when a VAE exists for random). Dream: "dream" (the decoded z of every dream step).
    """
    from wm.media import to_uint8

    if dream:
        from wm import tf_setup
        from wm.models.vae import load_vae

        tf_setup.setup(gpu=False)
        vae = load_vae(run.stage_dir("train-vae") / "vae.weights.h5", cfg.vae.z_dim)
        env = dream_env(cfg, run, float(temperature), params=params)
        frames = dream_episode(env, cfg, seed, random=random, decode=vae.decode)[2]
    elif random:
        from wm.envs import make_env

        env = make_env(cfg, keep_raw=True)
        try:
            frames = _random_episode(cfg, env, seed, record=True)[2]
        finally:
            env.close()
        vae_path = run.stage_dir("train-vae") / "vae.weights.h5"
        if vae_path.exists():  # the baseline needs no model, but shows V's view when there is one
            from wm import tf_setup
            from wm.models.vae import load_vae

            tf_setup.setup(gpu=False)
            vae = load_vae(vae_path, cfg.vae.z_dim)
            x = np.stack(frames["input"])
            frames["reconstruction"] = [np.asarray(vae.decode(vae.encode(x[i : i + 256])[0])) for i in range(0, len(x), 256)]
            frames["reconstruction"] = list(np.concatenate(frames["reconstruction"]))
    else:
        frames = _record_real(cfg, run, params, seed)
    return {k: to_uint8(np.stack(v)) for k, v in frames.items() if len(v)}


def episode_panels(frames: dict[str, np.ndarray], stride: int = 1, size: int = 192) -> np.ndarray:
    """Side-by-side GIF frames (ceil(T / stride), size, n·(size + 4) − 4, 3) from the recorded panels."""
    from wm.media import side_by_side

    order = [k for k in ("real", "input", "reconstruction", "dream") if k in frames]
    return side_by_side([frames[k][:: max(1, stride)] for k in order], size=size)


def save_episode_gif(path: Path, frames: dict[str, np.ndarray], stride: int = 1) -> None:
    """Write the side-by-side panels of one episode as a GIF (35 tics/s divided by the stride, §1b)."""
    from wm.media import save_gif

    save_gif(path, episode_panels(frames, stride), fps=max(1, round(35 / max(1, stride))))


# ---------------------------------------------------------------- the stage


def run(cfg: Config, run: RunDir, args: argparse.Namespace) -> None:
    """Evaluate (see the module docstring); prints and writes the summary, marks DONE for the default real mode."""
    from mpi import launched_rank
    from wm.metrics import make_logger

    if launched_rank() > 0:  # under mpirun only rank 0 evaluates (its workers are processes, not ranks)
        return
    if getattr(args, "sweep", False):
        from wm import sweep

        sweep.run_sweep(cfg, run, args)
        return
    dream, random = bool(getattr(args, "dream", False)), bool(getattr(args, "random", False))
    tag = getattr(args, "tag", None) or default_tag(dream, random)
    episodes = getattr(args, "episodes", None) or cfg.evaluate.episodes
    if episodes < 1:
        raise WMError(f"--episodes must be >= 1, got {episodes}")
    seeds = seed_list(cfg, episodes)
    temperature = getattr(args, "temperature", None)
    temperature = float(cfg.dream.temperature if temperature is None else temperature) if dream else None
    params, pfile = (None, None) if random else load_params(cfg, run, getattr(args, "params", None))
    mode = ("dream" if dream else "real") + ("-random" if random else "")
    extra = {"mode": mode, "config_hash": cfg.hash(), "params_file": str(pfile) if pfile else None,
             "env": cfg.env.name}
    if dream:
        extra["temperature"] = temperature
    default = not side_run(args)
    prefix = "eval" if default else f"eval/{tag}"
    with make_logger(run, "evaluate") as log:
        # the dream runs every episode in one batched graph (wm/dream.py): one process, no TF start-up per worker
        log.info("evaluating %s (%s) on %d episodes, seeds %d…%d, %d workers", tag, mode, len(seeds), seeds[0], seeds[-1],
                 1 if dream else cfg.evaluate.workers)
        t0 = time.time()
        progress = Progress(len(seeds), tag)

        def on_chunk(rets: list[float]) -> None:
            progress.update(rets)  # and `<prefix>/done` in the metrics, so the pipeline and the TUI can show progress
            log.scalars(progress.done, {f"{prefix}/done": progress.done}, console=False)

        returns, lengths = run_episodes(cfg, run, params, seeds, dream=dream, random=random, temperature=temperature,
                                          workers=1 if dream else cfg.evaluate.workers, progress=on_chunk)
        extra["seconds"] = round(time.time() - t0, 1)
        summary = write_results(run, tag, seeds, returns, lengths, extra)
        log.scalars(len(seeds), {f"{prefix}/mean": summary["mean"], f"{prefix}/std": summary["std"],
                                 f"{prefix}/episodes": summary["episodes"], f"{prefix}/len_mean": summary["len_mean"]},
                    console=False)
        log.info("%s: %s", tag, format_summary(summary))
        n_gif = min(cfg.evaluate.gif_episodes, len(seeds))
        for i in range(n_gif):
            path = run.stage_dir("evaluate") / tag / f"episode_{i:03d}.gif"
            frames = record_episode(cfg, run, params, seeds[i], dream=dream, random=random, temperature=temperature)
            save_episode_gif(path, frames, stride=cfg.evaluate.gif_stride)
            log.info("wrote %s (%d steps)", path, len(next(iter(frames.values()))))
        if default:
            atomic_write_json(run.stage_dir("evaluate") / "summary.json", summary)
            info = {f"eval/{k}": summary[k] for k in ("episodes", "mean", "std", "min", "median", "max", "len_mean")}
            run.mark_done("evaluate", {**info, **{k: summary[k] for k in ("config_hash", "params_file", "seconds")}})
