"""V and M per Keras backend at the paper's sizes: `python bench/backends.py` prints one JSON object.

Each backend trains V (the preset's z and batch, on fixed synthetic frames) and M (the preset's hidden size, batch,
sequence length, done head) for `--steps` steps after `--warm` untimed ones (the compile), each backend in its own
process (Keras fixes its backend per process): V's training frames/s and M's sequences/s and seconds per step, M's
projected time per epoch of the preset's data (`collect.episodes` × `--episode-len` frames in B × seq_len chunks),
and both loss curves, step by step. The data and the initial weights are the same on both backends (seeded), the
sampling noise each backend's own, so the curves are comparable, not equal. The ratios are JAX's over TensorFlow's.

    .venv/bin/python bench/backends.py                              # both backends on this machine's CPU (or GPU)
    .venv/bin/python bench/backends.py --backends jax --steps 200   # JAX alone (a machine without TensorFlow)
    .venv/bin/python bench/backends.py --tiny --steps 2             # small models: a dry run of the script itself

bench/device_jax.sh runs it on a lent GPU machine (JAX only) and on that machine's CPU for the same steps.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from wm.core.config import load  # noqa: E402  (no TensorFlow, no Keras)


def sizes(env: str, tiny: bool) -> dict:
    """The preset's V and M sizes (`configs/<env>.yaml`), or small ones with `--tiny`."""
    cfg = load([env], [])
    m = cfg.mdnrnn
    full = {
        "z": int(cfg.vae.z_dim),
        "v_batch": int(cfg.vae.batch_size),
        "hidden": int(m.hidden),
        "m_batch": int(m.batch_size),
        "seq": int(m.seq_len),
        "action": 1 if env == "doom_takecover" else 3,
        "done": bool(m.predict_done),
        "episodes": int(cfg.collect.episodes),
    }
    return {**full, "z": 8, "v_batch": 4, "hidden": 16, "m_batch": 4, "seq": 8} if tiny else full


def frames(n: int, batch: int) -> list[np.ndarray]:
    """`n` fixed batches of coloured squares on a dark background (the same on every backend)."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        x = np.full((batch, 64, 64, 3), 30, np.uint8)
        for i in range(batch):
            y0, x0 = rng.integers(0, 44, 2)
            x[i, y0 : y0 + 20, x0 : x0 + 20] = rng.integers(40, 255, 3)
        out.append(x)
    return out


def m_batch(s: dict) -> dict:
    rng = np.random.default_rng(1)
    b, t = s["m_batch"], s["seq"]
    batch = {
        "z": rng.standard_normal((b, t + 1, s["z"])).astype(np.float32),
        "action": rng.uniform(-1, 1, (b, t, s["action"])).astype(np.float32),
        "z_mask": np.ones((b, t), np.float32),
    }
    if s["done"]:
        batch.update(
            restart=(rng.random((b, t)) < 0.003).astype(np.float32),
            done_target=(rng.random((b, t)) < 0.03).astype(np.float32),
            done_mask=np.ones((b, t), np.float32),
        )
    return batch


def timed_steps(step, n_warm: int, n: int) -> tuple[list[float], float, float]:
    """Run `step(i) -> loss` n_warm + n times (a device sync each step): (losses, warm seconds, timed seconds)."""
    losses = []
    t0 = time.perf_counter()
    for i in range(n_warm):
        losses.append(float(step(i)))
    t1 = time.perf_counter()
    for i in range(n_warm, n_warm + n):
        losses.append(float(step(i)))
    return losses, t1 - t0, time.perf_counter() - t1


def steps_for(backend: str, s: dict):
    """(V step(i) -> loss, M step(i) -> nll, device name) on `backend`, from seeded weights."""
    from wm.core.backend import seed_keras
    from wm.models.mdnrnn import MDNRNN
    from wm.models.mdnrnn import make_optimizer as m_opt
    from wm.models.vae import ConvVAE
    from wm.models.vae import make_optimizer as v_opt

    xs, mb = frames(4, s["v_batch"]), m_batch(s)
    seed_keras(0)
    v = ConvVAE(s["z"])
    seed_keras(0)
    m = MDNRNN(s["z"], s["action"], s["hidden"], predict_done=s["done"])
    carry = [m.initial_state(s["m_batch"])]
    if backend == "jax":
        import jax

        from wm.models.jax_steps import MDNRNNSteps, VAESteps

        vs, ms = VAESteps(v, v_opt(), 0.5, 0), MDNRNNSteps(m, m_opt(1e-3, 1e-5, 0.99999), 10.0, 0)
        v_step = lambda i: vs.train(xs[i % len(xs)], i)[0]  # noqa: E731

        def m_step(i):
            nll, _, _, carry[0] = ms.train(mb, carry[0])
            return nll

        return v_step, m_step, str(jax.devices()[0])
    from wm.core import tf_setup

    tf = tf_setup.setup()
    from wm.models.mdnrnn_tf import make_train_step as m_train
    from wm.models.vae_tf import make_train_step as v_train

    vt, mt = v_train(v, v_opt(), 0.5, 0), m_train(m, m_opt(1e-3, 1e-5, 0.99999), 10.0, 0)
    xt, mbt = [tf.constant(x) for x in xs], {k: tf.constant(a) for k, a in mb.items()}
    v_step = lambda i: vt(xt[i % len(xt)], tf.constant(i, tf.int64))[0]  # noqa: E731

    def m_step(i):
        nll, _, _, carry[0] = mt(mbt, carry[0])
        return nll

    gpus = tf.config.list_logical_devices("GPU")
    return v_step, m_step, gpus[0].name if gpus else "CPU"


def one(backend: str, s: dict, a: argparse.Namespace) -> dict:
    """The measurement in this process (its Keras backend already set)."""
    v_step, m_step, device = steps_for(backend, s)
    v_loss, v_warm, v_s = timed_steps(v_step, a.warm, a.steps)
    m_nll, m_warm, m_s = timed_steps(m_step, a.warm, a.steps)
    chunks = s["episodes"] * a.episode_len / (s["m_batch"] * s["seq"])
    return {
        "device": device,
        "v": {"frames_per_s": a.steps * s["v_batch"] / v_s, "warm_s": v_warm, "loss": v_loss},
        "m": {
            "sequences_per_s": a.steps * s["m_batch"] / m_s,
            "step_s": m_s / a.steps,
            "epoch_s": chunks * m_s / a.steps,
            "warm_s": m_warm,
            "nll": m_nll,
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", nargs="+", choices=["tensorflow", "jax"], default=["tensorflow", "jax"])
    ap.add_argument("--env", choices=["doom_takecover", "carracing"], default="doom_takecover")
    ap.add_argument("--steps", type=int, default=10, help="timed training steps of V and of M")
    ap.add_argument("--warm", type=int, default=2, help="untimed steps first (the compile)")
    ap.add_argument("--episode-len", type=float, default=300.0, help="mean frames per collected episode (M's epoch)")
    ap.add_argument("--tiny", action="store_true", help="small models: a dry run of the script")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # one backend in this process (the driver's subprocess)
    a = ap.parse_args()
    s = sizes(a.env, a.tiny)
    if a.one:
        print(json.dumps(one(a.one, s, a)))
        return
    out = {"env": a.env, "sizes": s, "steps": a.steps, "warm": a.warm, "cpus": os.cpu_count()}
    for backend in a.backends:
        cmd = [sys.executable, __file__, "--one", backend, "--env", a.env, "--steps", str(a.steps), "--warm", str(a.warm)]
        cmd += ["--episode-len", str(a.episode_len)] + (["--tiny"] if a.tiny else [])
        done = subprocess.run(cmd, env={**os.environ, "KERAS_BACKEND": backend}, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{backend}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
        out[backend] = json.loads(done.stdout.strip().splitlines()[-1])
    if "tensorflow" in out and "jax" in out:
        out["jax_over_tensorflow"] = {
            "v_frames_per_s": out["jax"]["v"]["frames_per_s"] / out["tensorflow"]["v"]["frames_per_s"],
            "m_sequences_per_s": out["jax"]["m"]["sequences_per_s"] / out["tensorflow"]["m"]["sequences_per_s"],
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
