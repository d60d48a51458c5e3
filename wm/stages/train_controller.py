"""`python -m wm train-controller`: train C with CMA-ES, serially or as an MPI master/worker job (§7, §8).

    python -m wm train-controller --run runs/doom                 # serial: this process evaluates
    mpirun -n 9 python -m wm train-controller --run runs/doom     # rank 0 runs CMA-ES, ranks 1..8 evaluate

Per generation: ask `es.popsize` members → `es.trials` episodes each with antithetic seeds → fitness = mean
return → tell (with the weight decay of the correct sign, §10.5). Every `es.eval_every` generations (and at the
last) the CMA mean is evaluated on `es.eval_episodes` fixed-seed episodes and kept as
`controller/checks/gen_NNNN.npz`; the best of those evaluations is `controller/best.npz`. Every generation:
`controller/mean.npz` and `controller/es_state.npz` (the optimiser's state, the generation, every RNG state, the
byte offset of `metrics/controller.jsonl`: arrays and plain values, `wm.es.state`, read without unpickling
anything), all written atomically. A rerun resumes from `es_state.npz` and truncates history lines written after
it, so 2 + (kill) + 2 generations give the same history as 4 in one go. `--force` starts afresh; `--extend` (with
a larger `es.generations`) continues a finished training from its checkpoint. SIGINT/SIGTERM: the master stops at
once (the generation in flight is dropped), rewrites the last checkpoint, stops every worker (they close their
envs) and exits; rerunning the command resumes.

The checkpoint's reading, checks and writing are `wm.es.checkpoint`'s; an older version's pickled checkpoint
(`controller/es_state.pkl`) is refused there in one line, nothing written (`--force` trains afresh).

`es.draws: N` runs N independent CMA-ES draws of `es.generations` one after another (draw k seeded `es.seed + k`);
`es.pick_real: N` then plays every check of every draw on N real episodes (training-side seeds) and makes the best
of them `best.npz` (`_pick_real`; the worker ranks get a real-env context for it).

`es.fitness`: `dream` (M as the env, `wm.rollouts.dream`), `real` (V + M + C in real envs, `wm.rollouts.rollout`), or `toy`
(a quadratic, for tests of this machinery without trained models).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wm.core.atomic import atomic_savez
from wm.core.config import Config
from wm.core.errors import WMError
from wm.core.flags import flag
from wm.core.rundir import RunDir
from wm.core.seeds import SEED_HIGH, TRAINING_FLOOR
from wm.es import state as es_state
from wm.es.checkpoint import STATE_VERSION, check_state, state_path, stored_state, truncate, write_state
from wm.es.rules import check_fitness
from wm.stages.contract import StageInput

VERB = "train-controller"


@dataclass(frozen=True)
class Options:
    """train-controller's flags (`wm.core.flags`) and the shared `--force`."""

    stop_after: int = flag(
        0,
        "stop (as on SIGTERM, resumable) after N generations in this session; 0 = run to es.generations",
        metavar="N",
    )
    extend: bool = flag(
        False,
        "continue a finished training from its es_state.npz to a larger es.generations (with --set "
        "es.generations=N); rerun evaluate --force afterwards",
    )
    force: bool = False  # the shared --force: start afresh, the checkpoint is deleted


REDO_HINT = "or --extend with a larger es.generations to continue"  # wm.cli's "already done" line


def continues(opts: Options) -> bool:
    """wm.cli: `--extend` runs a finished training again, on from its checkpoint."""
    return opts.extend


def check_redo(inp: StageInput, run: RunDir, opts: Options) -> None:
    """`--extend` continues the checkpoint to a larger `es.generations`: refused, before DONE is touched, when there
    is no checkpoint or nothing to add (it would only mark the same C done again)."""
    if not continues(opts) or opts.force:
        return
    cfg = inp.cfg
    if cfg.es.draws > 1:
        raise WMError(f"--extend continues one CMA-ES draw; es.draws is {cfg.es.draws} (train afresh with --force)")
    st = stored_state(run)  # before anything is written: an older pickle is refused here
    if st is None:
        raise WMError(f"--extend: no checkpoint {state_path(run)} to continue; train first (or use --force)")
    done = int(st.get("generation", 0))
    if cfg.es.generations <= done:
        raise WMError(
            f"--extend: {done} generations are trained and es.generations is {cfg.es.generations}; "
            f"pass --set es.generations=N with N > {done}"
        )


def check_upstream(inp: StageInput, run: RunDir) -> None:
    """Refuse to start without the artifacts the fitness needs (no damage to anything on disk)."""
    cfg = inp.cfg
    check_fitness(cfg, inp.setup.family)
    kind = cfg.es.fitness
    if kind == "toy":
        return
    if not run.is_done("train-mdnrnn"):
        raise WMError(f"{run.stage_dir('train-mdnrnn')}/DONE missing: run train-mdnrnn first")
    if kind == "dream" and not run.initial_z.exists():
        raise WMError(f"{run.initial_z} missing: run encode first (the dream starts from it)")
    if (kind == "real" or cfg.es.pick_real > 0) and not run.is_done("train-vae"):
        raise WMError(f"{run.stage_dir('train-vae')}/DONE missing: run train-vae first (real episodes encode frames with V)")


def eval_seeds(cfg: Config) -> np.ndarray:
    """The fixed seeds of every evaluation of the mean (the authors used 0…63 × 16 episodes each, §7)."""
    return np.random.default_rng([cfg.es.seed, 0xE7A1]).integers(
        TRAINING_FLOOR, SEED_HIGH, cfg.es.eval_episodes, dtype=np.int64
    )


def pick_seeds(cfg: Config) -> np.ndarray:
    """The fixed training-side seeds of `es.pick_real`'s real episodes (every check plays the same ones)."""
    return np.random.default_rng([cfg.es.seed, 0x91C4]).integers(TRAINING_FLOOR, SEED_HIGH, cfg.es.pick_real, dtype=np.int64)


def task_chunk(es_cfg: Any, popsize: int, workers: int) -> int:
    """Members per task: `es.chunk`, or when 0 (auto) the whole slice of each worker for dream fitness (one
    batched graph per worker is fastest) and for real fitness a quarter of it (uneven episode lengths stay balanced
    across ranks), but at least enough members for a task's episodes to fill the worker's `es.real_envs_per_worker`
    envs: an env left idle for a whole task still pays its share of every step's V + M + C call (the `carracing`
    preset's 3 members × 4 tracks in 16 envs cost 1.09–1.25× the CPU a step of 4 × 4: `bench/carracing.py
    --task-fill`). A task's results do not depend on how members are grouped (`wm.rollouts.rollout`)."""
    if es_cfg.chunk > 0:
        return es_cfg.chunk
    per_worker = -(-popsize // max(1, workers))
    if es_cfg.fitness == "dream":
        return per_worker
    fill = -(-es_cfg.real_envs_per_worker // max(1, es_cfg.trials))
    return min(per_worker, max(-(-per_worker // 4), fill))


def run(inp: StageInput, run: RunDir, opts: Options) -> None:
    """The stage. On MPI ranks > 0 this serves tasks; on rank 0 (or alone) it runs CMA-ES."""
    from wm.core.devices import decide_devices
    from wm.mpi import launched_rank, launched_size, release_workers

    if launched_rank() > 0:
        from wm.mpi.worker import main as serve

        serve()
        return
    # TF's devices, once, before anything starts it (`wm.core.devices`).
    try:
        devices = decide_devices(inp.cfg, under_mpi=launched_size() > 1)
        _train(inp, run, opts, devices)
    finally:
        release_workers()


@dataclass
class _Training:
    """What every generation works with: the optimiser and curriculum (both replaced at a new draw), the checkpoint
    dict `st` it updates, and where the checkpoint and the metrics go."""

    cfg: Config
    run: RunDir
    n: int
    es: Any
    st: dict[str, Any]
    curriculum: Any
    spath: Path
    metrics: Path
    seeds_eval: np.ndarray


def _fresh_es(es_cfg: Any, n: int, draw: int) -> Any:
    """CMA-ES (or `es.algorithm`) afresh for draw `draw`: from zero, seeded `es.seed + draw`."""
    from wm.es.others import make_es

    return make_es(es_cfg, n, seed=es_cfg.seed + draw)


def _start(cfg: Config, run: RunDir, stored: dict[str, Any] | None, spath: Path, n: int) -> tuple[Any, dict[str, Any]]:
    """The optimiser and checkpoint dict to go on from: the stored checkpoint's (checked against the config), or afresh
    (an earlier training's checks removed)."""
    from wm.es.others import es_from_state

    es_cfg = cfg.es
    P, G, D = es_cfg.popsize, es_cfg.generations, es_cfg.draws
    if stored is not None:
        st = check_state(stored, spath, n, P, es_cfg.algorithm)
        if (D > 1 or st.get("draw", 0)) and st.get("draw_generations", G) != G:
            raise WMError(
                f"{spath}: its draws are {st.get('draw_generations')} generations long and es.generations is "
                f"{G}; rerun with --force to start afresh"
            )
        try:
            es = es_from_state(st["es"])
        except es_state.StateError as e:
            raise es_state.read_error(spath, e) from None
        return es, st
    shutil.rmtree(run.checks_dir, ignore_errors=True)  # an earlier training's checks
    es = _fresh_es(es_cfg, n, 0)
    st = {
        "version": STATE_VERSION,
        "n_params": n,
        "popsize": P,
        "generation": 0,
        "elapsed": 0.0,
        "best_fitness": -np.inf,
        "best_eval": -np.inf,
        "best_eval_gen": 0,
        "metrics_bytes": 0,
        "draw": 0,  # es.draws: the draw in progress (0-based), each draw_generations long
        "draw_generations": G,
    }
    return es, st


def _train(inp: StageInput, run: RunDir, opts: Options, devices: Any = None) -> None:
    """Train C (see the module docstring): resume or start, run the generations of every draw, pick, mark DONE."""
    from dataclasses import replace

    from wm.core.metrics import make_logger
    from wm.es.budget import Curriculum
    from wm.mpi import StopFlag, launched_size
    from wm.rollouts.engine import EvalSpec

    check_upstream(inp, run)
    cfg = inp.cfg
    es_cfg = cfg.es
    G, D = es_cfg.generations, es_cfg.draws
    n = inp.setup.n_params
    out = run.stage_dir(VERB)
    spath, metrics = state_path(run), run.metrics_path(VERB)
    if opts.force:
        spath.unlink(missing_ok=True)
        run.es_state_legacy.unlink(missing_ok=True)  # an older version's pickled checkpoint too
    stored = stored_state(run)  # an older pickle: refused, nothing written
    out.mkdir(parents=True, exist_ok=True)
    es, st = _start(cfg, run, stored, spath, n)
    curriculum = Curriculum.from_config(cfg)
    curriculum.load(st.get("curriculum"))
    truncate(metrics, st["metrics_bytes"])  # history written after the checkpoint is redone identically
    spec = EvalSpec.of(es_cfg.fitness, cfg, str(run.path), facts=inp.setup)
    batched = devices is not None and es_cfg.fitness == "dream" and launched_size() <= 1
    if batched:  # alone with dream fitness: this process is the only worker, with the devices decided in `run`
        spec = replace(spec, threads=devices.threads, gpu=devices.gpu)
    t = _Training(cfg, run, n, es, st, curriculum, spath, metrics, eval_seeds(cfg))
    stop_after = int(opts.stop_after)

    with make_logger(run, VERB) as log, StopFlag() as stop:
        gen0 = st["generation"]
        _log_start(log, cfg, n, gen0)
        pool, chunk = _open_pool(spec, es_cfg, log, stop, devices if batched else None)
        try:
            rec = _generations(t, pool, chunk, stop, stop_after, gen0, log)
            picked = _pick_real(cfg, run, pool, spec, log) if es_cfg.pick_real > 0 else {}
        except KeyboardInterrupt:
            if "es" in st:
                write_state(spath, st)  # the last complete generation; the one in flight is dropped
            log.info(
                "stopped at generation %d; checkpoint %s written; rerun the same command to resume",
                st["generation"],
                spath,
            )
            raise
        finally:
            pool.close()
        if not run.params("best").exists():
            raise WMError("no evaluation of the mean was recorded")
        log.info(
            "done: %d generations, best eval %.2f at generation %d", st["generation"], st["best_eval"], st["best_eval_gen"]
        )
    last = {k: v for k, v in (rec if G * D > gen0 else {}).items() if k in ("es/mean",)}
    run.mark_done(
        VERB,
        {
            "es/generation": st["generation"],
            "es/best": st["best_fitness"],
            "es/eval_best": st["best_eval"],
            "best_generation": st["best_eval_gen"],
            **picked,
            **last,
        },
    )


def _log_start(log: Any, cfg: Config, n: int, gen0: int) -> None:
    """The training's first line: resuming or starting, the optimiser, its sizes and the generation it starts at."""
    es_cfg = cfg.es
    G, D = es_cfg.generations, es_cfg.draws
    log.info(
        "%s %s: %d params, pop %d × %d episodes, fitness %s, generation %d/%d%s%s",
        "resuming" if gen0 else "starting",
        {"cma": "CMA-ES", "openes": "OpenES", "pepg": "PEPG", "ga": "GA"}.get(es_cfg.algorithm, es_cfg.algorithm),
        n,
        es_cfg.popsize,
        es_cfg.trials,
        es_cfg.fitness,
        gen0,
        G * D,
        f", {D} draws of {G}" if D > 1 else "",
        "" if gen0 else f" (σ₀ {es_cfg.sigma0})",
    )


def _open_pool(spec: Any, es_cfg: Any, log: Any, stop: Any, devices: Any) -> tuple[Any, int]:
    """The evaluating pool (a WMError when it cannot start) and the members per task; `devices`: the batched dream
    pool's, None otherwise."""
    from wm.mpi import make_pool
    from wm.rollouts.engine import init_worker

    try:
        pool = make_pool(init_worker, (spec,), timeout=es_cfg.task_timeout, retries=es_cfg.task_retries, log=log, stop=stop)
    except RuntimeError as e:
        raise WMError(str(e)) from None
    chunk = task_chunk(es_cfg, es_cfg.popsize, pool.size)
    log.info(
        "%d evaluating process(es), %d member(s) per task%s",
        pool.size,
        chunk,
        f"; the batched dream pool: this process, {devices} (es.device {es_cfg.device})" if devices is not None else "",
    )
    return pool, chunk


def _generations(t: _Training, pool: Any, chunk: int, stop: Any, stop_after: int, gen0: int, log: Any) -> dict[str, Any]:
    """Every generation left (of every draw), until done or stopped (KeyboardInterrupt); returns the last's record."""
    G, D = t.cfg.es.generations, t.cfg.es.draws
    rec: dict[str, Any] = {}
    while t.st["generation"] < G * D:
        if stop_after and t.st["generation"] - gen0 >= stop_after:
            stop.set()
        if stop.is_set():
            raise KeyboardInterrupt
        rec = _generation(t, pool, chunk, log)
    return rec


def _generation(t: _Training, pool: Any, chunk: int, log: Any) -> dict[str, Any]:
    """One generation: ask, play, tell, the mean's check when due, the record, a new draw when one ends, the
    checkpoint; returns the record."""
    from wm.es.budget import Curriculum, fitness_budget
    from wm.rollouts.engine import evaluate_task, gather, make_tasks

    cfg, es_cfg, st, es = t.cfg, t.cfg.es, t.st, t.es
    P, K, G, D = es_cfg.popsize, es_cfg.trials, es_cfg.generations, es_cfg.draws
    t0 = time.time()
    params = es.ask()
    budget = fitness_budget(cfg, t.curriculum)
    results = pool.map(evaluate_task, make_tasks(params, es.seeds(K), chunk, budget))
    returns, lengths, lost = gather(results, P, K)
    fitness = returns.mean(axis=1)
    es.tell(fitness)
    gen = st["generation"] + 1
    draw = int(st.get("draw", 0))
    local = gen - draw * G  # the generation within its draw
    ok = np.isfinite(fitness)
    st["best_fitness"] = max(st["best_fitness"], float(fitness[ok].max()))
    rec = {
        "es/generation": gen,
        "es/mean": fitness[ok].mean(),
        "es/min": fitness[ok].min(),
        "es/max": fitness[ok].max(),
        "es/std": fitness[ok].std(),
        "es/best": st["best_fitness"],
        "es/sigma": es.sigma,
        "es/len_mean": lengths[ok].mean(),
        "es/len_max": lengths[ok].max(),
        "es/lost": lost,
    }
    if D > 1:
        rec["es/draw"] = draw + 1
    if t.curriculum.cap:
        rec["es/episode_cap"] = t.curriculum.cap
        t.curriculum.update(float(np.nanmean(fitness)) if np.isfinite(fitness).any() else -np.inf)
    episodes = P * K
    mean = es.mean
    if local % es_cfg.eval_every == 0 or local == G:
        episodes += _check_mean(t, pool, chunk, mean, gen, draw, rec)
    dt = time.time() - t0
    st["elapsed"] += dt
    rec.update({"es/elapsed": st["elapsed"], "es/evals_per_s": episodes / max(dt, 1e-9)})
    log.scalars(gen, rec)
    atomic_savez(t.run.params("mean"), params=mean, generation=np.int64(gen))
    if local == G and draw + 1 < D:  # the next draw: CMA-ES afresh from the same start, its own seed
        st["draw"] = draw + 1
        t.es = _fresh_es(es_cfg, t.n, draw + 1)
        t.curriculum = Curriculum.from_config(cfg)  # a real-fitness episode budget starts over too
        log.info("draw %d/%d: CMA-ES afresh, seed %d", draw + 2, D, es_cfg.seed + draw + 1)
    st.update(generation=gen, es=t.es.state_dict(), metrics_bytes=t.metrics.stat().st_size)
    st["curriculum"] = t.curriculum.state_dict()
    write_state(t.spath, st)
    return rec


def _check_mean(t: _Training, pool: Any, chunk: int, mean: np.ndarray, gen: int, draw: int, rec: dict[str, Any]) -> int:
    """The mean's evaluation on the fixed seeds, kept as a check (and as `best.npz` when the best so far), its figures
    added to `rec`; returns the episodes it played."""
    from wm.rollouts.engine import evaluate_task, gather, make_tasks

    st, run, K = t.st, t.run, t.cfg.es.trials
    E = len(t.seeds_eval)
    rows = -(-E // K)
    padded = np.resize(t.seeds_eval, rows * K).reshape(rows, K)
    res = pool.map(evaluate_task, make_tasks(np.repeat(mean[None], rows, 0), padded, chunk))
    ev = gather(res, rows, K)[0].reshape(-1)[:E]
    ev = ev[np.isfinite(ev)]
    score = float(ev.mean())
    check = {"params": mean, "score": np.float64(score), "generation": np.int64(gen), "draw": np.int64(draw)}
    run.checks_dir.mkdir(parents=True, exist_ok=True)
    atomic_savez(run.check_params(gen), **check)
    if score > st["best_eval"]:
        st["best_eval"], st["best_eval_gen"] = score, gen
        atomic_savez(run.params("best"), **check)
    rec.update({"es/eval_mean": score, "es/eval_std": float(ev.std()), "es/eval_best": st["best_eval"]})
    return E


def _pick_real(cfg: Config, run: RunDir, pool: Any, spec: Any, log: Any) -> dict[str, float]:
    """`es.pick_real`: every kept check (all draws) plays the same N real episodes on training-side seeds, with the
    run's V and M and the renderer C trained with; `best.npz` becomes the best of them. Each check's results are
    kept in its file (`real`, `real_std`, `real_episodes`), so a rerun after a kill plays only the checks left. The
    workers get a real-env context (`pool.reinit`); the checks of one draw go out together."""
    from dataclasses import replace

    from wm.rollouts.engine import evaluate_task, gather, init_worker, make_tasks

    N = cfg.es.pick_real
    found = run.checks()
    files, checks = [f for f, _ in found], [c for _, c in found]
    todo = [i for i, c in enumerate(checks) if int(c.get("real_episodes", 0)) != N]
    lost = []
    if todo:
        kind = "toy" if spec.kind == "toy" else "real"  # toy: the tests' stand-in for the real game
        pool.reinit(init_worker, (replace(spec, kind=kind),))
        log.info("pick: %d of %d checks × %d real episodes (training-side seeds)", len(todo), len(checks), N)
        seeds = pick_seeds(cfg)
        for d in sorted({int(checks[i].get("draw", 0)) for i in todo}):
            part = [i for i in todo if int(checks[i].get("draw", 0)) == d]
            params = np.stack([checks[i]["params"] for i in part])
            res = pool.map(evaluate_task, make_tasks(params, np.tile(seeds, (len(part), 1)), -(-len(part) // pool.size)))
            for i, r in zip(part, gather(res, len(part), N)[0], strict=True):
                if not np.isfinite(r).all():  # a task lost for good
                    lost.append(files[i].name)
                    continue
                c = checks[i]
                c.update(real=np.float64(r.mean()), real_std=np.float64(r.std()), real_episodes=np.int64(N))
                atomic_savez(files[i], **c)
                log.info(
                    "pick: generation %d (draw %d): check %.1f, real %.1f ± %.1f",
                    int(c["generation"]),
                    int(c.get("draw", 0)) + 1,
                    float(c["score"]),
                    float(c["real"]),
                    float(c["real_std"]),
                )
    if lost:  # the others' results are kept: a rerun plays only these
        raise WMError(f"pick: the real episodes of {', '.join(sorted(lost))} were lost (a failed task); rerun to play them")
    best = max(checks, key=lambda c: float(c["real"]))
    atomic_savez(run.params("best"), **best)
    log.info(
        "pick: best.npz is generation %d (draw %d): real %.1f on %d episodes, check %.1f",
        int(best["generation"]),
        int(best.get("draw", 0)) + 1,
        float(best["real"]),
        N,
        float(best["score"]),
    )
    return {"pick/generation": int(best["generation"]), "pick/real": float(best["real"]), "pick/check": float(best["score"])}
