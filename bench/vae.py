"""Benchmark V: training frames/s streamed from episode shards vs from one in-memory array, peak memory, encode frames/s.

    .venv/bin/python bench/vae.py [--quick]

Prints one JSON object. Each measurement runs in its own subprocess so its peak RSS (ru_maxrss) is its own.
"stream" is the train-vae pipeline (tf.data over the .npz shards: parallel decode, shuffle buffer, prefetch);
"memory" is the authors' scheme (every frame in one uint8 array, random batches by index, docs/paper-settings.md §2).
Both run the same compiled train step of the paper's ConvVAE (z=64, batch 100). "xla" is `vae.jit_compile: auto`'s
probe (`wm.models.vae_tf.xla_probe`): the graph and the XLA train step timed in one process, at the `small` presets'
batch of 32; which is faster depends on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def make_shards(folder: Path, episodes: int, t: int, seed: int = 0) -> None:
    """Synthetic episodes: coloured squares on a noisy background (compresses like real frames, not like zeros)."""
    from wm.data.episodes import episode_name, write_episode

    rng = np.random.default_rng(seed)
    for i in range(episodes):
        obs = rng.integers(20, 60, (t, 64, 64, 3), dtype=np.uint8)
        for k in range(t):
            y, x = rng.integers(0, 44, 2)
            obs[k, y : y + 20, x : x + 20] = rng.integers(0, 256, 3)
        write_episode(
            folder / episode_name(i),
            obs=obs,
            action=rng.uniform(-1, 1, (t, 1)).astype(np.float32),
            reward=np.ones(t, np.float32),
            done=np.arange(t) == t - 1,
            seed=np.int64(i),
        )


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def worker(mode: str, folder: Path, steps: int, warmup: int, batch: int, buffer: int) -> dict:
    from wm.core import tf_setup

    tf = tf_setup.setup()
    from wm.data.episodes import list_episodes, read_episode
    from wm.models.vae import ConvVAE, make_optimizer
    from wm.models.vae_tf import make_encoder, make_train_step

    if mode == "xla":
        from wm.models.vae_tf import xla_probe

        return xla_probe(64, 32, 0.5, steps=steps)
    paths = list_episodes(folder)
    base = _rss_mb()
    model = ConvVAE(64)
    out: dict = {"mode": mode}
    if mode == "encode":
        from wm.stages.encode import encode_frames

        enc = make_encoder(model)
        encode_frames(enc, read_episode(paths[0])["obs"][:100], 1000)  # trace
        t0, n = time.perf_counter(), 0
        for p in paths:
            n += len(encode_frames(enc, read_episode(p)["obs"], 1000)[0])
        out.update(frames_per_s=n / (time.perf_counter() - t0), frames=n)
        out["peak_rss_mb"] = _rss_mb()
        return out
    opt = make_optimizer()
    step_fn = make_train_step(model, opt, 0.5, 0)
    if mode == "stream":
        from wm.data.frames import frame_dataset

        def batches():
            epoch = 0
            while True:
                yield from frame_dataset(paths, batch, seed=0, epoch=epoch, shuffle_buffer=buffer, cycle=4)
                epoch += 1
    else:
        data = np.concatenate([read_episode(p, ("obs",))["obs"] for p in paths])  # the authors' one big array
        out["dataset_mb"] = data.nbytes / 2**20

        def batches():
            rng = np.random.default_rng(0)
            while True:
                perm = rng.permutation(len(data))
                for i in range(len(data) // batch):
                    yield tf.constant(data[np.sort(perm[i * batch : (i + 1) * batch])])

    it = batches()
    for s in range(warmup):
        step_fn(next(it), tf.constant(s, tf.int64))[0].numpy()
    t0 = time.perf_counter()
    for s in range(steps):
        step_fn(next(it), tf.constant(warmup + s, tf.int64))[0].numpy()
    out.update(frames_per_s=steps * batch / (time.perf_counter() - t0), base_rss_mb=base, peak_rss_mb=_rss_mb())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small data and few steps (under a minute)")
    ap.add_argument("--worker", choices=("stream", "memory", "encode", "xla"), help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    quick = args.quick
    episodes, t = (6, 300) if quick else (40, 1000)
    steps, warmup, batch, buffer = (10, 3, 100, 2000) if quick else (60, 5, 100, 20000)
    if args.worker:
        print(json.dumps(worker(args.worker, Path(args.dir), steps, warmup, batch, buffer)))
        return
    with tempfile.TemporaryDirectory(prefix="bench-vae-") as tmp:
        folder = Path(tmp)
        make_shards(folder, episodes, t)
        res = {}
        for mode in ("stream", "memory", "encode", "xla"):
            cmd = [sys.executable, __file__, "--worker", mode, "--dir", str(folder)] + (["--quick"] if quick else [])
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            if proc.returncode != 0:
                raise SystemExit(f"{mode} worker failed:\n{proc.stderr[-2000:]}")
            res[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    s, m, e, x = res["stream"], res["memory"], res["encode"], res["xla"]
    print(
        json.dumps(
            {
                "quick": quick,
                "episodes": episodes,
                "frames": episodes * t,
                "batch": batch,
                "z_dim": 64,
                "shuffle_buffer": buffer,
                "train_steps_timed": steps,
                "stream_frames_per_s": round(s["frames_per_s"], 1),
                "memory_frames_per_s": round(m["frames_per_s"], 1),
                "stream_over_memory": round(s["frames_per_s"] / m["frames_per_s"], 3),
                "stream_peak_rss_mb": round(s["peak_rss_mb"], 1),
                "memory_peak_rss_mb": round(m["peak_rss_mb"], 1),
                "memory_dataset_mb": round(m["dataset_mb"], 1),
                "encode_frames_per_s": round(e["frames_per_s"], 1),
                "batch32_graph_frames_per_s": round(x["graph"], 1),
                "batch32_xla_frames_per_s": round(x["xla"], 1),
                "xla_over_graph": round(x["xla"] / x["graph"], 2),
                "cpu_count": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
