"""Collection throughput vs raw env speed, both envs: `.venv/bin/python bench/collect.py [--quick]` prints one JSON.

Per env:
- `bare_env_steps_per_s`: the gymnasium/ViZDoom env alone (no preprocessing), one process;
- `raw_env_steps_per_s`: `wm.envs.make_env` (with the config's preprocessing) driven by the data policy, one process;
- `collect_{1,2}w_steps_per_s`: the collect stage end to end (pool spawn, env start, files) with 1 and 2 workers;
- `collect_{1,2}w_steady_steps_per_s`: the same between the first and the last finished episode (no start-up);
- `ratio_1w` = collect_1w_steady / raw_env (aim ≥ 0.9) and `ratio_2w` = collect_2w_steady / raw_env (aim ≥ 1.8).
The machine's 2 cores are shared, so ratios are measured in the same run and still carry noise.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from wm.core.bounded import read_jsonl  # noqa: E402
from wm.core.config import load, update  # noqa: E402
from wm.core.rundir import RunDir  # noqa: E402
from wm.envs.family import CARRACING, family  # noqa: E402


def bare_speed(name: str, steps: int) -> float:
    import gymnasium as gym

    if family(name) is CARRACING:
        env = gym.make("CarRacing-v3").unwrapped
        act = lambda rng: np.array([rng.uniform(-1, 1), rng.uniform(0, 1), 0.0])
    else:
        import vizdoom.gymnasium_wrapper  # noqa: F401

        env = gym.make("VizdoomTakeCover-v1", doom_skill=5).unwrapped
        act = lambda rng: int(rng.integers(3))
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    t0 = time.perf_counter()
    for _ in range(steps):
        _, _, term, trunc, _ = env.step(act(rng))
        if term or trunc:
            env.reset()
    dt = time.perf_counter() - t0
    env.close()
    return steps / dt


def raw_speed(cfg, steps: int) -> float:
    from wm.envs import action_dim, make_env
    from wm.envs.policies import make_policy

    env = make_env(cfg, seed=0)
    policy = make_policy(cfg, np.random.default_rng(0), action_dim(cfg))
    obs, _ = env.reset()
    t0 = time.perf_counter()
    for _ in range(steps):
        obs, _, term, trunc, _ = env.step(policy.act(obs))
        if trunc or (term and not cfg.collect.ignore_done):
            obs, _ = env.reset()
    dt = time.perf_counter() - t0
    env.close()
    return steps / dt


def collect_speed(cfg, workers: int) -> tuple[float, float]:
    from wm.stages import collect
    from wm.stages.contract import stage_input

    with tempfile.TemporaryDirectory() as d:
        run = RunDir(d)
        run.bind_config(cfg)
        t0 = time.perf_counter()
        info = collect.run(stage_input(cfg, "collect"), run, collect.Options(workers=workers))
        wall = time.perf_counter() - t0
        recs = [r for r in read_jsonl(run.metrics_path("collect")) if "collect/rejected" in r]
        first, last = recs[0], recs[-1]
        steady = (last["collect/frames"] - first["collect/frames"]) / max(last["time"] - first["time"], 1e-9)
    return info["collect/frames"] / wall, steady


def bench_env(name: str, quick: bool) -> dict[str, float]:
    if family(name) is CARRACING:
        steps, episodes = (300, 8) if quick else (2000, 16)
        cfg = load(["carracing"], [f"env.max_steps={steps // 4 if quick else 1000}", f"collect.episodes={episodes}"])
    else:
        steps, episodes = (3000, 24) if quick else (20000, 64)
        cfg = load(["doom_takecover"], [f"collect.episodes={episodes}"])
    cfg = update(cfg, {"collect": {"min_length": 0}})  # every step becomes a stored frame
    out = {"bare_env_steps_per_s": bare_speed(name, steps), "raw_env_steps_per_s": raw_speed(cfg, steps)}
    for w in (1, 2):
        wall, steady = collect_speed(cfg, w)
        out[f"collect_{w}w_steps_per_s"] = wall
        out[f"collect_{w}w_steady_steps_per_s"] = steady
    out["ratio_1w"] = out["collect_1w_steady_steps_per_s"] / out["raw_env_steps_per_s"]
    out["ratio_2w"] = out["collect_2w_steady_steps_per_s"] / out["raw_env_steps_per_s"]
    return {k: round(v, 3) for k, v in out.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small runs (under a minute)")
    p.add_argument("--env", choices=["doom_takecover", "carracing"], nargs="+", default=["doom_takecover", "carracing"])
    args = p.parse_args()
    import contextlib
    import io

    result = {"quick": args.quick}
    for name in args.env:
        with contextlib.redirect_stdout(io.StringIO()):  # the stage logs to the console; keep stdout one JSON object
            result[name] = bench_env(name, args.quick)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
