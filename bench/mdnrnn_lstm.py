"""Benchmark M's training step: the custom `tf.scan` cell vs `keras.layers.LSTM` (mdnrnn.lstm).

    .venv/bin/python bench/mdnrnn_lstm.py [--quick] [--steps N] [--rounds R] [--xla]

Prints one JSON object: training steps/s of `make_train_step` (the train-mdnrnn step: forward, loss, gradients,
clipped Adam) for each implementation, and keras/custom, at the small Doom size (hidden 256, seq 100, batch 32,
z 64) and the paper's Doom size (hidden 512, seq 500, batch 100; `--quick` skips it), each the best of R
alternating rounds (the machine may be shared). Synthetic batches with a restart on 1 frame in 300 per stream
(Doom's mean episode length, paper settings §0), so the keras path cuts chunks into segments as in training
(`keras_no_restart`: the same without restarts). On a GPU the keras path runs cuDNN. `--xla` adds the custom
step under `jit_compile` (the compiled-cell alternative for the restart). `--loop` adds the train-mdnrnn loop at the
small size with synthetic series: batches assembled between steps and every loss read (before) vs a prefetch
thread and losses read every READ_EVERY steps (the stage now).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

SIZES = {"small": dict(hidden=256, seq=100, batch=32, z=64), "paper": dict(hidden=512, seq=500, batch=100, z=64)}
RESTART_RATE = 1 / 300


def batch(size: dict, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    B, L, Z = size["batch"], size["seq"], size["z"]
    restart = (rng.random((B, L)) < RESTART_RATE).astype(np.float32)
    return {
        "z": rng.standard_normal((B, L + 1, Z)).astype(np.float32),
        "action": rng.uniform(-1, 1, (B, L, size.get("action", 1))).astype(np.float32),
        "restart": restart,
        "z_mask": np.ones((B, L), np.float32),
        "done_target": np.roll(restart, -1, axis=1),
        "done_mask": np.ones((B, L), np.float32),
    }


def build(impl: str, size: dict, restarts: bool = True, xla: bool = False):
    """A compiled train step of a fresh M (seed 0) with its batch and carried state, warmed up (traced)."""
    import keras
    import tensorflow as tf

    from wm.models.mdnrnn import MDNRNN, make_optimizer
    from wm.models.mdnrnn_tf import make_train_step

    keras.utils.set_random_seed(0)
    m = MDNRNN(size["z"], 1, size["hidden"], 5, True, lstm=impl)
    step = make_train_step(m, make_optimizer(1e-3, 1e-5, 0.99999))
    if xla:
        step = tf.function(step.python_function, jit_compile=True)
    b = batch(size)
    if not restarts:
        b["restart"][:] = 0.0
    b = {k: tf.constant(v) for k, v in b.items()}
    carry = [m.initial_state(size["batch"])]

    def run(n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            nll, _, _, carry[0] = step(b, carry[0])
        float(nll)
        return (time.perf_counter() - t0) / n

    run(1)
    return run, int(m.count_params())


def measure(variants: dict, steps: int, rounds: int) -> dict:
    """Seconds per step of each variant, timed in alternating rounds (the best round: the machine may be shared)."""
    built = {k: build(**v) for k, v in variants.items()}
    best = {k: float("inf") for k in variants}
    for _ in range(rounds):
        for k, (run, _) in built.items():
            best[k] = min(best[k], run(steps))
    return {
        k: {"s_per_step": round(best[k], 4), "steps_per_s": round(1 / best[k], 3), "params": built[k][1]} for k in variants
    }


def series(frames: int, z: int, seed: int = 0):
    """Synthetic `series/`: episodes of 100–600 frames (Doom-like lengths), float16 μ/logvar as encode writes them."""
    from wm.data.sequences import Series

    rng = np.random.default_rng(seed)
    lengths = rng.integers(100, 600, max(1, frames // 350))
    n = int(lengths.sum())
    return Series(
        rng.normal(size=(n, z)).astype(np.float16),
        (rng.normal(size=(n, z)) - 2).astype(np.float16),
        rng.uniform(-1, 1, (n, 1)).astype(np.float32),
        np.concatenate([[0], np.cumsum(lengths)[:-1]]),
        lengths,
    )


def loop(size: dict, steps: int, rounds: int) -> dict:
    """The train-mdnrnn streams loop two ways: batches assembled between steps and every loss read back (before), vs
    assembled in a prefetch thread and losses read every READ_EVERY steps (wm.models.training.prefetch, the stage now)."""
    from contextlib import closing
    from itertools import islice

    import keras
    import tensorflow as tf

    from wm.data.sequences import StreamBatches
    from wm.models.mdnrnn import MDNRNN, make_optimizer
    from wm.models.mdnrnn_tf import make_train_step
    from wm.models.training import prefetch
    from wm.stages.train_mdnrnn import READ_EVERY

    keras.utils.set_random_seed(0)
    data = StreamBatches(series(size["batch"] * size["seq"] * (steps + 2), size["z"]), size["batch"], size["seq"], 0)
    m = MDNRNN(size["z"], 1, size["hidden"], 5, True)
    step = make_train_step(m, make_optimizer(1e-3, 1e-5, 0.99999))

    def chunks():
        for _, b in data.epoch(0):
            yield {k: tf.constant(v) for k, v in b.items()}

    def run(fast: bool) -> float:
        carry, pending = m.initial_state(size["batch"]), []
        items = closing(prefetch(chunks())) if fast else closing(chunks())
        t0 = time.perf_counter()
        with items as it:
            for b in islice(it, steps):
                nll, _, _, carry = step(b, carry)
                pending.append(nll)
                if not fast or len(pending) >= READ_EVERY:
                    [float(x) for x in pending]
                    pending.clear()
        [float(x) for x in pending]
        return (time.perf_counter() - t0) / steps

    run(False)  # trace
    t = {"before": float("inf"), "prefetch_read_every": float("inf")}
    for _ in range(rounds):
        t["before"] = min(t["before"], run(False))
        t["prefetch_read_every"] = min(t["prefetch_read_every"], run(True))
    b0 = time.perf_counter()
    next(iter(data.epoch(0)))
    assemble = time.perf_counter() - b0
    return {
        "size": size,
        "steps": steps,
        "read_every": READ_EVERY,
        "assemble_s": round(assemble, 4),
        **{k: {"s_per_step": round(v, 4), "steps_per_s": round(1 / v, 3)} for k, v in t.items()},
        "speedup": round(t["before"] / t["prefetch_read_every"], 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the small size only")
    ap.add_argument("--steps", type=int, default=0, help="timed steps per round (default: 5 small, 1 paper)")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds; the best is reported")
    ap.add_argument("--xla", action="store_true", help="also the custom step under jit_compile")
    ap.add_argument("--loop", action="store_true", help="also the stage loop: prefetch + losses read every N steps")
    args = ap.parse_args()
    from wm.core import tf_setup

    tf = tf_setup.setup()
    out: dict = {
        "device": "GPU" if tf.config.list_logical_devices("GPU") else "CPU",
        "cpus": os.cpu_count(),
        "restart_rate": round(RESTART_RATE, 5),
    }
    for name in ["small"] if args.quick else ["small", "paper"]:
        size = SIZES[name]
        steps = args.steps or (5 if name == "small" else 1)
        variants = {"custom": dict(impl="custom", size=size), "keras": dict(impl="keras", size=size)}
        if name == "small":  # what the restart segments cost the keras path
            variants["keras_no_restart"] = dict(impl="keras", size=size, restarts=False)
        if args.xla:
            variants["custom_xla"] = dict(impl="custom", size=size, xla=True)
        row: dict = {"size": size, "steps": steps, "rounds": args.rounds}
        row.update(measure(variants, steps, args.rounds))
        row["keras_over_custom"] = round(row["keras"]["steps_per_s"] / row["custom"]["steps_per_s"], 3)
        out[name] = row
    if args.loop:
        out["loop_small"] = loop(SIZES["small"], args.steps or 20, args.rounds)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
