"""Dream evaluator benchmark at the Doom paper scale (paper settings §5, §7): one CMA-ES generation in the dream.

P = 64 members × K = 16 trials, z 64, LSTM 512, ≤ 2100 steps, τ 1.25, ZCH controller (1088 params), random
weights. A random M's done logit almost never (or always) fires, so its bias is set to give a death rate of
1/305 per step (the authors' generation-1 mean episode length, §7); the random controller barely matters.

Measured in the same run:
* batched: `DreamEvaluator.evaluate` of the whole generation (one graph, finished episodes dropped);
* loop: the authors' scheme, one episode at a time — the same compiled graph at batch 1 (a few episodes,
  extrapolated to the P·K episodes of a generation), and per-step `DreamEnv.step` calls (a few hundred steps).

Prints one JSON object. `--quick`: P 8, K 4, ≤ 300 steps (under a minute).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def calibrate_done(m, c, mu0, params, steps: int = 200, n: int = 64, mean_len: float = 305.0) -> float:
    """Set M's done-logit bias so that P(logit > 0) per step ≈ 1/mean_len along dream rollouts of C (τ 1.25)."""
    import numpy as np
    import tensorflow as tf

    from wm.models import mixture_tf

    @tf.function
    def roll(z, p):
        state, logits = m.initial_state(n), tf.TensorArray(tf.float32, steps)
        for t in tf.range(steps):
            a = c.act_tf(p, z, *state)
            out, state = m.step(z, a, state, tf.fill([n], tf.cast(t == 0, tf.float32)))
            logits = logits.write(t, out.done_logit)
            z = mixture_tf.sample_mixture(
                out.logmix, out.mu, out.logstd, 1.25, tf.random.uniform(tf.shape(z)), tf.random.normal(tf.shape(z))
            )
        return logits.stack()

    rng = np.random.default_rng(0)
    z = tf.constant(mu0[rng.integers(len(mu0), size=n)])
    logits = roll(z, tf.constant(params[rng.integers(len(params), size=n)])).numpy()
    b = m.out_bias.numpy()
    shift = float(np.quantile(logits, 1.0 - 1.0 / mean_len))
    b[0] -= shift
    m.out_bias.assign(b)
    return shift


def random_world(hidden: int, p: int):
    """A random-weight Doom world for timing: M (z 64, LSTM `hidden`, done head), the zch controller, 1000 start
    latents and `p` controller vectors, with M's done bias calibrated to ≈ 305-step dreams. Returns
    (m, c, mu0, logvar0, params, rng); the rng continues for the caller's seeds."""
    import keras
    import numpy as np

    from wm.models.controller import Controller
    from wm.models.mdnrnn import MDNRNN

    keras.utils.set_random_seed(0)
    m = MDNRNN(64, 1, hidden, 5, predict_done=True)
    c = Controller("zch", 64, hidden, 1, bias=False)
    rng = np.random.default_rng(0)
    mu0 = rng.normal(0, 1, (1000, 64)).astype(np.float32)
    lv0 = np.full((1000, 64), -2.0, np.float32)
    params = rng.normal(0, 0.1, (p, c.n_params)).astype(np.float32)
    calibrate_done(m, c, mu0, params)
    return m, c, mu0, lv0, params, rng


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--compact-every", type=int, default=10)
    args = ap.parse_args()
    from wm.core import tf_setup

    tf_setup.setup()

    from wm.rollouts.dream import DreamEnv, DreamEvaluator

    p, k, cap = (8, 4, 300) if args.quick else (64, 16, 2100)
    m, c, mu0, lv0, params, rng = random_world(512, p)
    seeds = rng.integers(0, 2**31, (p, k))
    ev = DreamEvaluator(m, c, mu0, lv0, 1.25, cap, compact_every=args.compact_every)

    t0 = time.perf_counter()
    ev.evaluate(params[:1], seeds[:1, :1])  # trace + first run
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, lengths = ev.evaluate(params, seeds)
    batched_s = time.perf_counter() - t0
    steps = int(lengths.sum())

    # the authors' scheme: one episode at a time (same compiled graph, batch 1)
    n_loop = 3 if args.quick else 6
    t0 = time.perf_counter()
    loop_steps = 0
    for i in range(n_loop):
        _, n = ev.evaluate(params[i % p : i % p + 1], seeds[i % p : i % p + 1, :1])
        loop_steps += int(n.sum())
    loop_s = time.perf_counter() - t0
    loop_rate = loop_steps / loop_s

    # per-step Python calls (a gym env over M, like the authors' DoomCoverRNNEnv)
    env = DreamEnv(m, c, mu0, lv0, 1.25, cap, params=params[0])
    env.reset(seed=1)
    env.step()
    n_env, t0 = 0, time.perf_counter()
    while n_env < (100 if args.quick else 300):
        _, _, term, trunc, _ = env.step()
        n_env += 1
        if term or trunc:
            env.reset(seed=n_env)
    env_rate = n_env / (time.perf_counter() - t0)

    out = {
        "bench": "dream",
        "quick": args.quick,
        "P": p,
        "K": k,
        "z": 64,
        "hidden": 512,
        "cap": cap,
        "temperature": 1.25,
        "controller": "zch/1088",
        "compact_every": args.compact_every,
        "mean_episode_len": round(float(lengths.mean()), 1),
        "max_episode_len": int(lengths.max()),
        "batched_s_per_generation": round(batched_s, 2),
        "batched_steps_per_s": round(steps / batched_s),
        "loop_batch1_steps_per_s": round(loop_rate),
        "loop_batch1_s_per_generation_extrapolated": round(steps / loop_rate, 1),
        "env_step_calls_steps_per_s": round(env_rate),
        "env_step_s_per_generation_extrapolated": round(steps / env_rate, 1),
        "speedup_vs_batch1_graph": round(loop_s and (steps / batched_s) / loop_rate, 1),
        "speedup_vs_env_step_calls": round((steps / batched_s) / env_rate, 1),
        "compile_s": round(compile_s, 1),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
