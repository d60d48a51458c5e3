"""Does a V trained on the fast CarRacing renderer see the official one as well? (issue 15 item 1)

    .venv/bin/python bench/car_render_vae.py             # ≈ 5 min on 2 cores; prints one JSON object

Both renderers are stepped in lockstep from the same seeds with the same actions (the `brownian` data policy:
steering, gas and brake that wander, so the car turns and leaves the road), giving the same states drawn twice;
frames are the `carracing` preset's 64×64 `ha2018` ones. One V (the paper's ConvVAE, z 32; lr 1e-3, batch 32, for
a bench's budget) is trained on the fast frames of the training episodes only, and another on their official
frames; each is then scored on the held-out episodes' frames of **both** renderers: mean squared error per pixel
(0..1 scale) of the reconstruction from μ. `transfer_gap` = MSE on the other renderer / MSE on its own: 1.0 means
the renderer does not matter to V.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from wm.config import load  # noqa: E402


def frames(episodes: int, steps: int, seed0: int) -> dict[str, np.ndarray]:
    """(episodes·steps, 64, 64, 3) uint8 frames per renderer, the same states (lockstep, same actions)."""
    from wm.envs import make_env
    from wm.envs.policies import make_policy

    out: dict[str, list] = {"official": [], "fast": []}
    base = load(["carracing"], [f"env.max_steps={steps}", "collect.policy=brownian"])
    envs = {r: make_env(load(["carracing"], [f"env.renderer={r}", f"env.max_steps={steps}"])) for r in out}
    try:
        for ep in range(episodes):
            policy = make_policy(base, np.random.default_rng([seed0, ep]), 3)
            obs = {r: e.reset(seed=seed0 + ep)[0] for r, e in envs.items()}
            for _ in range(steps):
                for r in out:
                    out[r].append(obs[r])
                a = policy.act(obs["official"])
                done = False
                for r, e in envs.items():
                    obs[r], _, term, trunc, _ = e.step(a)
                    done = done or term or trunc
                if done:
                    break
    finally:
        for e in envs.values():
            e.close()
    return {r: np.stack(v) for r, v in out.items()}


def train_v(x: np.ndarray, epochs: int, seed: int = 0):
    import keras
    import tensorflow as tf

    from wm.models.vae import ConvVAE, make_optimizer, make_train_step

    keras.utils.set_random_seed(seed)
    model = ConvVAE(32)
    step = make_train_step(model, make_optimizer(1e-3), 0.5, seed)
    rng, k = np.random.default_rng(seed), 0
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for i in range(0, len(x) - 31, 32):
            k += 1
            step(tf.constant(x[order[i : i + 32]]), tf.constant(k, tf.int64))
    return model


def mse(model, x: np.ndarray) -> float:
    errs = []
    for i in range(0, len(x), 256):
        batch = x[i : i + 256]
        recon = model(batch).numpy()
        errs.append(((recon - batch / 255.0) ** 2).mean(axis=(1, 2, 3)))
    return float(np.concatenate(errs).mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=12, help="episodes (the last quarter held out)")
    ap.add_argument("--steps", type=int, default=250, help="steps per episode")
    ap.add_argument("--epochs", type=int, default=6)
    a = ap.parse_args()
    from wm import tf_setup

    tf_setup.setup(threads=None, gpu=True)
    t0 = time.perf_counter()
    data = frames(a.episodes, a.steps, 7000)
    n_train_eps = a.episodes - max(1, a.episodes // 4)
    cut = n_train_eps * a.steps if len(data["fast"]) == a.episodes * a.steps else int(0.75 * len(data["fast"]))
    out: dict = {"bench": "car_render_vae", "frames": len(data["fast"]), "train_frames": cut, "epochs": a.epochs}
    out["mean_abs_diff_levels"] = round(float(np.abs(data["fast"].astype(int) - data["official"].astype(int)).mean()), 3)
    for trained_on in ("fast", "official"):
        model = train_v(data[trained_on][:cut], a.epochs)
        scores = {r: mse(model, data[r][cut:]) for r in ("fast", "official")}
        other = "official" if trained_on == "fast" else "fast"
        out[f"v_trained_on_{trained_on}"] = {
            **{f"mse_on_{r}": round(v, 6) for r, v in scores.items()},
            "transfer_gap": round(scores[other] / scores[trained_on], 4),
        }
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
