"""Why CarRacing's `small` C plateaus below 700 (issue 15): how fast it drives, and whether its inputs know the speed.

On a finished CarRacing run (its config, V, M and best C) the agent plays `--tracks` seeded tracks (seeds from
`--seed`, disjoint from the evaluation's 1000–1099 by default) with the run's renderer. Every step records the car's
true speed (the Box2D hull's |v|), C's inputs z (V's μ of the frame) and h (M's state C sees), and the action applied.
Reported (one JSON object):
- the return, steps and share of tiles visited per track, and the speed's mean and quantiles;
- the action statistics (gas, brake > 0, |steer|);
- how linearly the speed can be read from z, from h and from [z, h]: a ridge map fitted on the first three quarters
  of the tracks, R² on the last quarter. The paper crops the speed bar out of the frame (rows 0:84), so only M's
  h can carry the speed to C.
Usage: `python bench/car_speed_probe.py --run runs/car0`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def ridge_r2(x_train, y_train, x_test, y_test, lam: float = 1e-2) -> float:
    """Held-out R² of a ridge map x → y (features standardised on the training part)."""
    import numpy as np

    mu, sd = x_train.mean(0), x_train.std(0) + 1e-6
    a, b = (x_train - mu) / sd, (x_test - mu) / sd
    a1, b1 = np.c_[a, np.ones(len(a))], np.c_[b, np.ones(len(b))]
    w = np.linalg.solve(a1.T @ a1 + lam * len(a1) * np.eye(a1.shape[1]), a1.T @ y_train)
    pred = b1 @ w
    return float(1.0 - ((y_test - pred) ** 2).sum() / ((y_test - y_test.mean()) ** 2).sum())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True)
    p.add_argument("--tracks", type=int, default=12)
    p.add_argument("--seed", type=int, default=7_000_000)
    args = p.parse_args()

    import numpy as np

    from wm import tf_setup
    from wm.agent import AgentModels, AgentPolicy
    from wm.envs import make_env
    from wm.rundir import RunDir
    from wm.world import load_world

    tf_setup.setup(threads=1, gpu=False)
    run = RunDir(args.run)
    cfg = run.load_config()
    world = load_world(cfg, run, need=("vae", "mdnrnn", "params"), params="best")
    policy = AgentPolicy(AgentModels.from_world(world), np.random.default_rng(0), 0.0, 1, 1)
    env = make_env(cfg)
    car = env.inner
    tracks, frames, hs, speeds, acts, which = [], [], [], [], [], []
    for k in range(args.tracks):
        obs, _ = env.reset(seed=args.seed + k)
        policy.reset()
        ret, steps, done = 0.0, 0, False
        while not done:
            h = np.array(policy.h[0])  # the h C sees at this step (before M takes this step's action)
            a = policy.act(obs)
            frames.append(obs)
            hs.append(h)
            speeds.append(float(np.linalg.norm(car.car.hull.linearVelocity)))
            acts.append(np.asarray(a, np.float32))  # controller space: gas = (a₁ + 1) / 2, brake = clip(a₂, 0, 1)
            which.append(k)
            obs, r, term, trunc, _ = env.step(a)
            ret, steps, done = ret + float(r), steps + 1, bool(term or trunc)
        tiles = int(car.tile_visited_count) / max(len(car.track), 1)
        tracks.append({"seed": args.seed + k, "return": round(ret, 1), "steps": steps, "tiles": round(tiles, 3)})
        print(json.dumps(tracks[-1]), file=sys.stderr)
    x = np.asarray(frames)
    mu = np.concatenate([world.vae.encode(x[i : i + 500])[0].numpy() for i in range(0, len(x), 500)])
    h, v, a, which = np.asarray(hs), np.asarray(speeds), np.asarray(acts), np.asarray(which)
    train, test = which < (3 * args.tracks) // 4, which >= (3 * args.tracks) // 4
    zh = np.c_[mu, h]
    gas = (a[:, 1] + 1) / 2
    out = {
        "run": str(args.run),
        "tracks": tracks,
        "return_mean": round(float(np.mean([t["return"] for t in tracks])), 1),
        "tiles_mean": round(float(np.mean([t["tiles"] for t in tracks])), 3),
        "speed_mean": round(float(v.mean()), 2),
        "speed_q10_50_90": [round(float(q), 2) for q in np.quantile(v, [0.1, 0.5, 0.9])],
        "gas_mean": round(float(gas.mean()), 3),
        "brake_share": round(float((a[:, 2] > 0).mean()), 3),
        "abs_steer_mean": round(float(np.abs(a[:, 0]).mean()), 3),
        "speed_r2": {
            "z": round(ridge_r2(mu[train], v[train], mu[test], v[test]), 3),
            "h": round(ridge_r2(h[train], v[train], h[test], v[test]), 3),
            "zh": round(ridge_r2(zh[train], v[train], zh[test], v[test]), 3),
        },
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
