"""`python -m wm collect`: roll out the data policy in `collect.workers` processes, one `episodes/ep_NNNNNN.npz` each.

Episode file (wm.data.episodes): obs uint8 (T, 64, 64, 3), action float32 (T, A) = `m_action` (the post-processed
action the env received, §1a), reward float32 (T,), done bool (T,), seed int64 (the env seed). Row t is the frame
seen at step t, the action taken on it and its reward; the frame after the last action is not stored (§1a, §1b).
`done[t]` is True when step t ended the episode by the env's own termination (Doom: death; CarRacing: off the
playfield, −100, or the lap completed); reaching the `env.max_steps` cap leaves every row False. With
`collect.ignore_done` (car, §1a) the episode runs on to `env.max_steps` steps as the authors' data does, but the
termination is still recorded (CarRacing repeats it, −100 per step, while the car stays off the playfield): M's
loader cuts each episode at its first done (`wm.data.sequences.load_series`), so M learns the real game's end.

Determinism: slot k (file ep_k) tries attempt 0, 1, … with `SeedSequence([run.seed, k, attempt])`, spawned into
an env seed and a policy generator; the first attempt with more than `collect.min_length` frames is kept
(§1b: ≤ 100-frame Doom episodes are not saved). A slot's file therefore depends only on (run.seed, k) and the
config, never on the number of workers or on which run of the command wrote it.

Resume: files already in the target range that pass the readers' check (`wm.data.episodes.check_file`) are kept;
a corrupt or misshapen one is reported by name and rewritten;
leftover `.tmp-*` files of a killed run are removed. Files are written atomically by the workers themselves (a
writer thread per worker overlaps compression with the next episode; progress counts an episode when it is
handed to that thread, and the stage re-checks every file on disk before writing DONE).
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wm.core.errors import RunFailed, WMError
from wm.core.flags import flag
from wm.core.procpool import spawn_map
from wm.core.rundir import RunDir
from wm.core.seeds import training_seed
from wm.data.episodes import (
    EpisodeError,
    check_file,
    episode_index,
    episode_name,
    episode_spec,
    list_episodes,
    write_episode,
)
from wm.stages.contract import StageInput

MAX_ATTEMPTS = 1000  # per slot; more means min_length is out of reach for this env and policy


def episode_seeds(run_seed: int, slot: int, attempt: int) -> tuple[int, np.random.Generator]:
    """(env seed, policy generator) of one attempt at one episode slot, from SeedSequence([run_seed, slot, attempt])."""
    env_ss, policy_ss = np.random.SeedSequence([int(run_seed), int(slot), int(attempt)]).spawn(2)
    env_seed = training_seed(int(env_ss.generate_state(1, np.uint32)[0]))  # never an evaluation seed (wm.core.seeds)
    return env_seed, np.random.default_rng(policy_ss)


def rollout(env, policy, post: str, env_seed: int, ignore_done: bool = False) -> dict[str, np.ndarray]:
    """One episode of `policy` in `env` (a wm.envs env); returns the episode arrays (see the module docstring).
    `post`: what turns the policy's action into the one M sees (`Setup.post`)."""
    from wm.envs import m_action

    obs, _ = env.reset(seed=env_seed)
    policy.reset()
    frames, actions, rewards, dones = [], [], [], []
    while True:
        a = policy.act(obs)
        frames.append(obs)
        actions.append(a)
        obs, r, terminated, truncated, _ = env.step(a)
        rewards.append(r)
        dones.append(terminated)  # recorded even when ignored (see the module docstring)
        if (terminated and not ignore_done) or truncated:
            break
    return {
        "obs": np.stack(frames).astype(np.uint8),
        "action": m_action(post, np.stack(actions)).astype(np.float32),
        "reward": np.asarray(rewards, dtype=np.float32),
        "done": np.asarray(dones, dtype=bool),
        "seed": np.int64(env_seed),
    }


# ---------------------------------------------------------------- worker process


class _Writer:
    """One background thread per worker that compresses and writes the previous episode while the next one runs.

    zlib releases the GIL and `np.savez_compressed` costs about as much per frame as a Doom step, so this keeps a
    single worker's env busy. At most one episode is being written (bounded memory): `put()` first waits for the
    previous write's future, which re-raises its error there (waiting is what makes the error certain to be seen:
    checked before the write had ended, it was missed under load and the stage reported only a missing file).
    `close()` waits for the last write at worker exit and raises its error, which the worker pool hands back to the
    stage (`spawn_map(strict_close=True)`): the stage fails with that one line.
    """

    def __init__(self, background: bool = True) -> None:
        # on an MPI rank (one core each) the write is the task's own: its error is the task's, no thread overlaps it
        self.pool = ThreadPoolExecutor(max_workers=1) if background else None
        self.pending: Future | None = None

    def _wait(self) -> None:
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.result()  # the write's error, raised once

    def put(self, path: Path, ep: dict[str, np.ndarray]) -> None:
        self._wait()
        if self.pool is None:
            write_episode(path, **ep)
            return
        self.pending = self.pool.submit(write_episode, path, **ep)

    def close(self) -> None:
        try:
            self._wait()
        finally:
            if self.pool is not None:
                self.pool.shutdown()


class CollectWorker:
    """A collect worker's context (the pool hands it to every task): its env, its writer, and the agent's models
    when the data policy is `agent` (loaded once per worker, not once per episode)."""

    def __init__(self, inp: StageInput, folder: str, background: bool = True):
        # `inp` comes pickled from the stage: its setup is resolved again here, once
        self.inp, self.folder = inp, Path(folder)
        self.env = inp.setup.open()
        self.writer = _Writer(background)
        self.agent = agent_models(inp, self.folder.parent)

    def close(self) -> None:
        try:
            self.writer.close()  # first: the pending episode is written before the env goes
        finally:
            self.env.close()


def agent_models(inp: StageInput, run_dir: Path | None) -> Any:
    """The `agent` policy's V + M + C (`wm.rollouts.agent.AgentModels`), or None for every other data policy."""
    if inp.cfg.collect.policy != "agent":
        return None
    from wm.rollouts.agent import AgentModels, agent_source

    return AgentModels(inp.setup, agent_source(inp.cfg.collect.agent_run, run_dir))


def collect_slot(
    inp: StageInput, env, slot: int, run_dir: Path | None = None, agent: Any = None
) -> tuple[dict[str, np.ndarray], int, int]:
    """Episode of slot `slot`: (arrays, attempts used, env steps spent including rejected attempts).

    `agent`: the loaded `AgentModels` for `collect.policy: agent` (loaded here from `run_dir` when not given).
    """
    from wm.envs.policies import make_policy

    cfg, facts = inp.cfg, inp.setup
    if cfg.collect.policy == "agent" and agent is None:
        agent = agent_models(inp, run_dir)
    steps = 0
    for attempt in range(MAX_ATTEMPTS):
        env_seed, rng = episode_seeds(cfg.run.seed, slot, attempt)
        if agent is not None:
            from wm.rollouts.agent import AgentPolicy

            c = cfg.collect
            policy = AgentPolicy(agent, rng, c.explore, c.hold_min, c.hold_max)
        else:
            policy = make_policy(cfg, rng, facts.action_dim)
        ep = rollout(env, policy, facts.post, env_seed, cfg.collect.ignore_done)
        steps += len(ep["done"])
        if len(ep["done"]) > cfg.collect.min_length:
            return ep, attempt + 1, steps
    raise WMError(
        f"episode slot {slot}: no episode longer than collect.min_length={cfg.collect.min_length} in {MAX_ATTEMPTS} attempts"
    )


def _rank_worker(inp: StageInput, folder: str) -> CollectWorker:
    """An MPI rank's collect context: its writes are synchronous (`_Writer(background=False)`)."""
    return CollectWorker(inp, folder, background=False)


def _episodes(inp: StageInput, folder: Path, todo: list[int], workers: int, log: Any, on_result: Any) -> None:
    """Collect the `todo` slots, calling `on_result(result)` as each episode is written: over the MPI ranks when
    launched under mpirun/srun (rank 0 dispatches, the others play: the pool's retries and timeouts), else over
    `workers` spawned processes. An episode depends only on its slot, so both give the same files."""
    from wm.mpi import TaskFailed, launched_size, make_pool

    args, es = (inp, str(folder)), inp.cfg.es
    if launched_size() > 1:
        timeout = es.task_timeout  # a rank slower than this on one episode: another rank plays it too
        with make_pool(_rank_worker, args, timeout=timeout, retries=es.task_retries, log=log) as pool:
            results = pool.map(_work, todo, on_result=lambda i, r: isinstance(r, TaskFailed) or on_result(r))
        lost = [r for r in results if isinstance(r, TaskFailed)]
        if lost:
            raise RunFailed(
                f"collect: {len(lost)} episodes failed on their ranks (first: {lost[0].error}); the episodes on disk are "
                "kept: rerun the same command to resume"
            )
        return
    for res in spawn_map(_work, todo, min(workers, len(todo)), "collect", CollectWorker, args, strict_close=True):
        on_result(res)


def _work(w: CollectWorker, slot: int) -> tuple[int, int, int, int, float]:
    t0 = time.perf_counter()
    ep, attempts, steps = collect_slot(w.inp, w.env, slot, w.folder.parent, w.agent)
    w.writer.put(w.folder / episode_name(slot), ep)
    return slot, len(ep["done"]), attempts, steps, time.perf_counter() - t0


# ---------------------------------------------------------------- stage


def existing(folder: Path, target: int, log=None, spec: dict | None = None) -> tuple[dict[int, int], list[int]]:
    """({slot: length} of good files in range, slots to (re)do); bad files are reported by name.

    A file is judged by the readers' own check (`check_file` with `spec`, from `episode_spec`), so a file the
    later stages would skip (a wrong frame size, arrays of different lengths) is regenerated here.
    """
    good: dict[int, int] = {}
    for path in list_episodes(folder):
        k = episode_index(path)
        try:
            n = check_file(path, "episode", **(spec or {}))
        except EpisodeError as e:
            if log is not None:
                log.warning("bad episode file %s (%s)%s", path.name, e, "; regenerating it" if k < target else "; skipped")
            continue
        if k < target:
            good[k] = n
    return good, [k for k in range(target) if k not in good]


@dataclass(frozen=True)
class Options:
    """collect's flags (`wm.core.flags`)."""

    workers: int | None = flag(None, "override collect.workers for this invocation only (0: every core)")


def run(inp: StageInput, run: RunDir, opts: Options | None = None) -> dict[str, float]:
    """Collect `cfg.collect.episodes` episodes into `run/episodes/`, resuming; returns the key figures. Under an MPI
    launcher rank 0 runs this and the other ranks play its episodes (`_episodes`)."""
    from wm.core.metrics import make_logger
    from wm.mpi import launched_rank, launched_size

    if launched_rank() > 0:
        from wm.mpi.worker import main as serve

        serve()
        return {}

    # what the readers require of a file; its action size refuses an env this cannot play (collect.policy's choices
    # and the other ranges are config.RULES')
    cfg = inp.cfg
    spec = episode_spec(inp.setup)
    if cfg.collect.min_length >= cfg.env.max_steps:
        raise WMError(f"collect.min_length={cfg.collect.min_length} must be below env.max_steps={cfg.env.max_steps}")
    if cfg.collect.policy == "agent":
        from wm.rollouts.agent import agent_source, check_agent_run

        check_agent_run(agent_source(cfg.collect.agent_run, run.path))
    from wm.core.procpool import worker_count

    flag = (opts or Options()).workers
    if flag is not None and flag < 0:
        raise WMError(f"--workers must be >= 0 (0: every core), got {flag}")
    workers = launched_size() - 1 if launched_size() > 1 else worker_count(cfg.collect.workers if flag is None else flag)
    folder = run.episodes_dir
    folder.mkdir(parents=True, exist_ok=True)
    for tmp in folder.glob(".tmp-ep_*"):  # torn writes of a killed run (never visible as episodes)
        tmp.unlink(missing_ok=True)
    target = cfg.collect.episodes
    with make_logger(run, "collect") as log:
        good, todo = existing(folder, target, log, spec)
        frames = sum(good.values())
        log.info(
            "%s: %d/%d episodes on disk, %d to collect with %d workers (policy %s, preprocess %s)",
            cfg.env.name,
            len(good),
            target,
            len(todo),
            workers,
            cfg.collect.policy,
            cfg.env.preprocess,
        )
        tally = {"frames": frames, "steps": 0, "rejected": 0}
        t0 = time.perf_counter()

        def written(res: tuple[int, int, int, int, float]) -> None:
            slot, n, attempts, spent, _ = res
            good[slot] = n
            tally["frames"] += n
            tally["steps"] += spent
            tally["rejected"] += attempts - 1
            sps = tally["steps"] / max(time.perf_counter() - t0, 1e-9)
            figures = {"collect/episodes": len(good), "collect/frames": tally["frames"], "collect/steps_per_s": sps}
            log.scalars(len(good), {**figures, "collect/rejected": tally["rejected"]}, console=5.0)

        if todo:
            _episodes(inp, folder, todo, workers, log, written)
        steps, rejected = tally["steps"], tally["rejected"]
        elapsed = time.perf_counter() - t0
        good, todo = existing(folder, target, spec=spec)
        if todo:
            raise RunFailed(
                f"collect: {len(todo)} episode files missing or unreadable after collection (first: "
                f"{episode_name(todo[0])}); the episodes on disk are kept: rerun the same command to resume"
            )
        lengths = np.array([good[k] for k in range(target)]) if target else np.zeros(1)
        info = {
            "collect/episodes": target,
            "collect/frames": int(lengths.sum()) if target else 0,
            "collect/steps_per_s": steps / elapsed if steps else 0.0,
            "collect/rejected": rejected,
            "collect/mean_length": float(lengths.mean()),
            "collect/workers": workers,
        }
        log.scalars(target, {k: info[k] for k in ("collect/episodes", "collect/frames", "collect/steps_per_s")})
        log.info("done: %d episodes, %d frames, mean length %.1f", target, info["collect/frames"], info["collect/mean_length"])
    run.mark_done("collect", info)
    return info
