"""C's dream in one process: the old serial path (one TF thread) vs the batched pool (all TF threads,
the GPU when present), pycma's ask+tell cost, and with `--xla` the dream graph under XLA.

The small Doom dream: P = 32 members × K = 16 trials, z 64, LSTM 256, ZCH controller, random weights with the done
bias calibrated to the authors' generation-1 mean episode length (305 steps, `bench/dream.py`), τ 1.25, episodes
capped at `--cap` steps (2100 in the paper; lower here for speed, reported). Thread counts are fixed per process
(`wm.core.tf_setup`), so each dream variant runs in a subprocess of its own: one warm-up generation (tracing, compiling),
then `--gens` timed generations. pycma: `CMAES` ask+tell per generation at n = 1088 (Doom zch, LSTM 512),
n = 867 (CarRacing zh) and n = 576 (the `small` Doom zch), popsize 64, mean and max over the generations after 4
warm-up ones (the full covariance's eigendecomposition is lazy: every few generations, hence the max).

    .venv/bin/python bench/dream_pool.py            # < 2 min on 2 cores; prints one JSON object
    .venv/bin/python bench/dream_pool.py --xla      # + both variants under jit_compile=True (measurement only:
                                                    #   the compacted loop miscounts lengths under XLA)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def dream_variant(threads: int | None, gpu: bool, xla: bool, cap: int, gens: int, p: int, k: int, hidden: int = 256) -> dict:
    """One variant, in this (fresh) process: generations/s of the Doom dream (LSTM `hidden`: 256 small, 512 paper)."""
    from wm.core import tf_setup

    tf = tf_setup.setup(threads=threads, gpu=gpu)
    import numpy as np

    from bench.dream import random_world
    from wm.rollouts.dream import DreamEvaluator

    m, c, mu0, lv0, params, rng = random_world(hidden, p)
    ev = DreamEvaluator(m, c, mu0, lv0, 1.25, cap)
    if xla:  # measurement only: under XLA the compacted loop miscounts episode lengths (docs/results/timings.md)
        ev._run = tf.function(ev._graph, reduce_retracing=True, jit_compile=True)  # noqa: SLF001
    seeds = [rng.integers(0, 2**31, (p, k)) for _ in range(gens + 1)]
    t0 = time.perf_counter()
    ev.evaluate(params, seeds[0])
    warm = time.perf_counter() - t0
    t0, steps, lengths = time.perf_counter(), 0, []
    for s in seeds[1:]:
        _, n = ev.evaluate(params, s)
        steps += int(n.sum())
        lengths.append(n)
    dt = time.perf_counter() - t0
    return {
        "threads": "all" if threads is None else threads,
        "gpu": bool(gpu and tf.config.list_logical_devices("GPU")),
        "xla": xla,
        "s_per_generation": round(dt / gens, 2),
        "generations_per_s": round(gens / dt, 3),
        "steps_per_s": round(steps / dt),
        "mean_episode_len": round(float(np.mean(lengths)), 1),
        "warmup_s": round(warm, 1),
    }


def cma_times(gens: int = 12) -> dict:
    """pycma ask+tell ms per generation (mean, max) at n = 1088, 867 and 576 (the small Doom C), popsize 64."""
    import numpy as np

    from wm.es.cmaes import CMAES

    out = {}
    for n in (1088, 867, 576):
        es, ts = CMAES(n, 64, 0.1, 0.01, 0, True), []
        for _ in range(gens + 4):
            t0 = time.perf_counter()
            x = es.ask()
            es.tell(-np.sum(x**2, axis=1))
            ts.append(time.perf_counter() - t0)
        ts = ts[4:]
        out[f"n{n}"] = {"mean_ms": round(1000 * float(np.mean(ts)), 1), "max_ms": round(1000 * float(np.max(ts)), 1)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cap", type=int, default=300, help="episode step cap (the paper: 2100)")
    ap.add_argument("--gens", type=int, default=2, help="timed generations per variant")
    ap.add_argument("--pop", type=int, default=32)
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--xla", action="store_true", help="also the dream graph under XLA (not equivalent)")
    ap.add_argument("--variant", help=argparse.SUPPRESS)  # "threads,gpu,xla": run one variant here (a subprocess)
    args = ap.parse_args()
    if args.variant:
        t, g, x = args.variant.split(",")
        res = dream_variant(None if t == "all" else int(t), g == "1", x == "1", args.cap, args.gens, args.pop, args.trials)
        print(json.dumps(res))
        return
    t_start = time.perf_counter()
    variants = [("1", "0", "0"), ("all", "1", "0")]
    if args.xla:
        variants += [("1", "0", "1"), ("all", "1", "1")]
    dream = {}
    for v in variants:
        cmd = [sys.executable, __file__, "--variant", ",".join(v)]
        cmd += ["--cap", str(args.cap), "--gens", str(args.gens), "--pop", str(args.pop), "--trials", str(args.trials)]
        env = {k: val for k, val in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
        if out.returncode:
            dream["_".join(v)] = {"error": (out.stderr.strip().splitlines() or ["?"])[-1]}
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        dream[f"{'serial_1thread' if v[0] == '1' else 'batched_all_threads'}{'_xla' if v[2] == '1' else ''}"] = r
    cma = cma_times()
    res: dict = {
        "bench": "dream_pool",
        "P": args.pop,
        "K": args.trials,
        "z": 64,
        "hidden": 256,
        "cap": args.cap,
        "cpus": os.cpu_count(),
        "dream": dream,
    }
    one, batched = dream.get("serial_1thread", {}), dream.get("batched_all_threads", {})
    if "s_per_generation" in one and "s_per_generation" in batched:
        res["batched_vs_1thread"] = round(one["s_per_generation"] / batched["s_per_generation"], 2)
    for key in ("serial_1thread", "batched_all_threads"):
        xla = dream.get(key + "_xla", {})
        if "s_per_generation" in xla and "s_per_generation" in dream.get(key, {}):
            res[f"xla_speedup_{key}"] = round(dream[key]["s_per_generation"] / xla["s_per_generation"], 2)
    res["cma_ask_tell"] = cma
    if "s_per_generation" in batched:
        s = batched["s_per_generation"]
        for n in (1088, 867, 576):
            ms = cma[f"n{n}"]["mean_ms"] / 1000
            res.setdefault("cma_share_of_batched_generation", {})[f"n{n}"] = round(ms / (ms + s), 3)
    res["wall_s"] = round(time.perf_counter() - t_start, 1)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
