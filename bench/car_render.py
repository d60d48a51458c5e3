"""CarRacing renderers: `env.renderer: official` vs `fast`. `.venv/bin/python bench/car_render.py` prints one JSON.

Both envs are built with `wm.envs.make_env` from the `carracing` preset (`ha2018` preprocessing) with only
`env.renderer` changed, reset with the same seed and stepped in lockstep with the same actions (a data policy
driven by a fixed rng; `--policy brownian` by default: smooth random steering, gas and brake, so the car turns,
speeds up, brakes and leaves the road; `random_agent` is the §1a collection policy). Per renderer:
- `steps_per_s`: the bare gymnasium env's `step` (physics + drawing the 96×96 state; no preprocessing), wall clock;
- `cpu_steps_per_s`: the same per CPU second of this process (robust to other work sharing the cores);
- `wrapped_steps_per_s`: `FrameEnv.step` (+ crop, stretch, resize to 64×64), wall clock.
`ratio` = fast / official, measured in the same run (so a shared, loaded machine cancels out). Pixel differences
are |official − fast| on the 64×64 frames the suite sees (0..255 levels): per frame the mean over pixels and
channels and the max; then both averaged over frames, the largest max, the worst frame (by mean;
[seed, step]), and the first second (the camera's zoom-in, 50 steps) apart from the rest. `ha2018` stretches each
frame by its own min and max, so one pixel at an extreme that differs moves the whole frame: `stretch_differs` is
the share of frames whose raw crop has a different (min, max) under the two renderers (the large worst frames).
`raw_96` and `clean_64` are the same on the raw 96×96 frames (rows 0:84) and after the `clean` preprocessing.
`physics_steps_per_s` is Box2D alone (drawing skipped), the ceiling for any renderer.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from wm.core.config import load  # noqa: E402
from wm.envs import make_env  # noqa: E402
from wm.envs.policies import make_policy  # noqa: E402
from wm.envs.preprocess import CAR_CROP, clean  # noqa: E402

ZOOM_STEPS = 50  # gymnasium's camera zooms in over the first second (50 steps)


class Timed:
    """Wraps a bound `step`, adding its wall and CPU seconds up."""

    def __init__(self, fn):
        self.fn, self.wall, self.cpu = fn, 0.0, 0.0

    def __call__(self, *args):
        w, c = time.perf_counter(), time.process_time()
        out = self.fn(*args)
        self.wall += time.perf_counter() - w
        self.cpu += time.process_time() - c
        return out


def frame_stats(diffs: list[np.ndarray], where: list[tuple[int, int]]) -> dict:
    t = np.array([w[1] for w in where])
    means = np.array([d.mean() for d in diffs])
    maxes = np.array([d.max() for d in diffs])
    worst = int(means.argmax())
    return {
        "worst_frame": [int(where[worst][0]), int(where[worst][1])],
        "mean_abs": round(float(means.mean()), 3),
        "max_abs": round(float(maxes.mean()), 2),
        "max_abs_any_frame": int(maxes.max()),
        "worst_frame_mean_abs": round(float(means[worst]), 3),
        "worst_frame_max_abs": int(maxes[worst]),
        "zoom_mean_abs": round(float(means[t < ZOOM_STEPS].mean()), 3),
        "after_zoom_mean_abs": round(float(means[t >= ZOOM_STEPS].mean()), 3) if (t >= ZOOM_STEPS).any() else None,
    }


def physics_speed(steps: int) -> float:
    from gymnasium.envs.box2d.car_racing import CarRacing

    class NoDraw(CarRacing):
        def _render(self, mode):
            return None

    env, rng = NoDraw(), np.random.default_rng(0)
    env.reset(seed=0)
    t0 = time.process_time()
    for _ in range(steps):
        env.step(np.array([rng.uniform(-1, 1), rng.uniform(0, 1), 0.0]))
    return steps / (time.process_time() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300, help="steps per seed")
    ap.add_argument("--policy", default="brownian", choices=["brownian", "random_agent"])
    a = ap.parse_args()

    sets = [f"env.max_steps={a.steps}", f"collect.policy={a.policy}"]
    cfg = load(["carracing"], sets)
    envs = {r: make_env(load(["carracing"], sets + [f"env.renderer={r}"]), keep_raw=True) for r in ("official", "fast")}
    for env in envs.values():
        env.inner.step = Timed(env.inner.step)  # the bare gymnasium step inside FrameEnv.step
    wrapped = {r: 0.0 for r in envs}
    diffs: dict[str, list[np.ndarray]] = {"ha2018_64": [], "clean_64": [], "raw_96": []}
    stretch_differs = []
    where, same, n = [], True, 0
    for seed in range(a.seeds):
        policy = make_policy(cfg, np.random.default_rng(1000 + seed), 3)
        obs = {r: env.reset(seed=seed) for r, env in envs.items()}
        for t in range(a.steps):
            action = policy.act(obs["official"][0])
            out = {}
            for r, env in envs.items():
                w = time.perf_counter()
                out[r] = env.step(action)
                wrapped[r] += time.perf_counter() - w
            (o1, r1, d1, u1, i1), (o2, r2, d2, u2, i2) = out["official"], out["fast"]
            same &= (r1, d1, u1) == (r2, d2, u2)
            diffs["ha2018_64"].append(np.abs(o1.astype(np.int16) - o2))
            raw1, raw2 = i1["raw"], i2["raw"]
            diffs["clean_64"].append(np.abs(clean(raw1, CAR_CROP).astype(np.int16) - clean(raw2, CAR_CROP)))
            diffs["raw_96"].append(np.abs(raw1[:84].astype(np.int16) - raw2[:84]))
            stretch_differs.append((raw1[:84].min(), raw1[:84].max()) != (raw2[:84].min(), raw2[:84].max()))
            where.append((seed, t))
            obs = {r: out[r] for r in out}
            n += 1
    for env in envs.values():
        env.close()
    speed = {
        r: {
            "steps_per_s": round(n / env.inner.step.wall, 1),
            "cpu_steps_per_s": round(n / env.inner.step.cpu, 1),
            "wrapped_steps_per_s": round(n / wrapped[r], 1),
        }
        for r, env in envs.items()
    }
    result = {
        "seeds": a.seeds,
        "steps_per_seed": a.steps,
        "policy": a.policy,
        "official": speed["official"],
        "fast": speed["fast"],
        "ratio": round(speed["fast"]["steps_per_s"] / speed["official"]["steps_per_s"], 2),
        "cpu_ratio": round(speed["fast"]["cpu_steps_per_s"] / speed["official"]["cpu_steps_per_s"], 2),
        "wrapped_ratio": round(speed["fast"]["wrapped_steps_per_s"] / speed["official"]["wrapped_steps_per_s"], 2),
        "physics_steps_per_s": round(physics_speed(500), 1),
        "pixel_diff": {k: frame_stats(v, where) for k, v in diffs.items()},
        "stretch_differs": round(float(np.mean(stretch_differs)), 3),
        "rewards_terminated_truncated_identical": bool(same),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
