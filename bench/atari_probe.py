"""Why a Boxing C does not learn (issue 20): what holding one action scores, and whether V's z holds the boxers' places.

Two measurements on a finished `atari_boxing` run (its config and V):
- every one of Boxing's 18 actions held for `--steps` agent steps on `--bouts` seeded bouts: the mean return of each
  (a linear C whose argmax rarely changes plays like this);
- how linearly V's μ encodes the two boxers' positions: frames of `--random-bouts` random-policy bouts (every third
  step) are encoded, the positions read from the console's RAM (AtariARI's Boxing annotation: player x, y at 32, 34;
  enemy x, y at 33, 35), a least-squares map μ → position is fitted on the first three quarters and its R² reported
  on the last quarter;
- what a hand-written "approach and punch" policy on the true positions scores over whole bouts (`approach_return`).
Usage: `python bench/atari_probe.py --run runs/boxing0`. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

RAM = {"player_x": 32, "player_y": 34, "enemy_x": 33, "enemy_y": 35}


def held_actions(env, steps: int, bouts: int, seed: int) -> dict[str, float]:
    """Mean return of each action held for `steps` steps, over `bouts` bouts (seeds seed, seed + 1, …)."""
    import numpy as np

    names = env.inner.unwrapped.get_action_meanings()
    out = {}
    for i, name in enumerate(names):
        a = -np.ones(len(names), np.float32)
        a[i] = 1.0  # controller space: the argmax picks action i
        total = 0.0
        for b in range(bouts):
            env.reset(seed=seed + b)
            for _ in range(steps):
                _, r, term, trunc, _ = env.step(a)
                total += r
                if term or trunc:
                    break
        out[name] = total / bouts
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


APPROACH = ((10, 0), (20, 0), (28, 0), (28, 5), (28, 15), (35, 0))  # (|dx| kept, |dy| tolerated) of the hand policy


def approach_policy(env, bouts: int, seed: int) -> dict[str, float]:
    """Mean return over whole bouts of a hand-written policy on the true (RAM) positions, for each (tx, ty) of
    APPROACH: step toward the opponent until the horizontal gap is ≤ tx and the vertical gap ≤ ty, punching all
    along. A linear C on z (which holds the positions, R² below) can express it."""
    import numpy as np

    names = env.inner.unwrapped.get_action_meanings()
    index = {n: i for i, n in enumerate(names)}
    ale = env.inner.unwrapped.ale
    out = {}
    for tx, ty in APPROACH:
        total = 0.0
        for b in range(bouts):
            env.reset(seed=seed + b)
            done = False
            while not done:
                ram = ale.getRAM()
                dx = int(ram[RAM["enemy_x"]]) - int(ram[RAM["player_x"]])
                dy = int(ram[RAM["enemy_y"]]) - int(ram[RAM["player_y"]])
                move = ("DOWN" if dy > ty else "UP" if dy < -ty else "") + ("RIGHT" if dx > tx else "LEFT" if dx < -tx else "")
                a = -np.ones(len(names), np.float32)
                a[index[move + "FIRE" if move else "FIRE"]] = 1.0
                _, r, term, trunc, _ = env.step(a)
                total, done = total + r, term or trunc
        out[f"tx{tx}_ty{ty}"] = total / bouts
    return out


def position_r2(env, vae, bouts: int, seed: int) -> dict[str, float]:
    """Held-out R² of a least-squares map from V's μ to each boxer coordinate and to the vertical gap."""
    import numpy as np

    ale = env.inner.unwrapped.ale
    rng = np.random.default_rng(0)
    frames, pos = [], []
    for b in range(bouts):
        obs, _ = env.reset(seed=seed + b)
        t, done = 0, False
        while not done:
            if t % 3 == 0:
                ram = ale.getRAM()
                frames.append(obs)
                pos.append([int(ram[i]) for i in RAM.values()])
            obs, _, term, trunc, _ = env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
            done, t = term or trunc, t + 1
    x, p = np.asarray(frames), np.asarray(pos, np.float64)
    mu = np.concatenate([vae.encode(x[i : i + 256])[0].numpy() for i in range(0, len(x), 256)])
    targets = dict(zip(RAM, p.T, strict=True))
    targets["gap_y"] = p[:, 3] - p[:, 1]
    a = np.c_[mu, np.ones(len(mu))]
    cut = len(mu) * 3 // 4
    out = {"frames": len(mu)}
    for name, y in targets.items():
        w, *_ = np.linalg.lstsq(a[:cut], y[:cut], rcond=None)
        err, var = ((a[cut:] @ w - y[cut:]) ** 2).sum(), ((y[cut:] - y[cut:].mean()) ** 2).sum()
        out[f"r2_{name}"] = round(float(1 - err / var), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="a finished atari_boxing run (its config and V)")
    ap.add_argument("--steps", type=int, default=600, help="agent steps each action is held")
    ap.add_argument("--bouts", type=int, default=2, help="bouts per held action (seeds 500, 501, …)")
    ap.add_argument("--random-bouts", type=int, default=4, help="random-policy bouts for the R² (seeds 2000, …)")
    ap.add_argument("--approach-bouts", type=int, default=4, help="whole bouts per hand policy (seeds 3000, …)")
    args = ap.parse_args()
    from wm.envs import make_env
    from wm.rundir import RunDir
    from wm.world import load_world

    run = RunDir(args.run)
    cfg = run.load_config()
    env = make_env(cfg)
    out = {"run": args.run, "steps": args.steps, "bouts": args.bouts}
    out["held_action_return"] = held_actions(env, args.steps, args.bouts, 500)
    out["approach_return"] = approach_policy(env, args.approach_bouts, 3000)
    out.update(position_r2(env, load_world(cfg, run, ("vae",)).vae, args.random_bouts, 2000))
    env.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
