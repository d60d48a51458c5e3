"""The paper presets' cost on this machine: `python bench/paper_scale.py` prints one JSON object.

Every stage of the paper pipeline runs at the preset's true sizes (`configs/<env>.yaml`, no size preset) for about
`--seconds` seconds on whatever device is present, each in a fresh subprocess (TF's thread count and GPU are fixed
per process); the measured throughput is then scaled to the stage's full work and summed:

* collect: env steps/s of one process with the data policy (+ mean episode length, kept share) → the
  `collect.episodes` kept episodes on one process per core (at most `collect.workers`);
* train-vae: frames/s of V's compiled step (all threads, the GPU, `vae.jit_compile` auto) and of the streaming input
  pipeline alone (`vae.parallel_files` 0) over synthetic episode files, the slower of the two → `vae.epochs` × the
  collected frames;
* encode: frames/s of the compiled encoder at `encode.batch_size` → the collected frames;
* train-mdnrnn: steps/s of M's train step at the preset's batch, `seq_len` and LSTM (`mdnrnn.lstm` auto: cuDNN with a
  GPU) → streams: `epochs` × frames / (batch × seq_len); episodes: `steps`;
* train-controller: Doom: dream generations of P × K (LSTM 512, zch C, random weights with dreams of ≈ 305 steps,
  `bench/dream.py`) in the batched pool with a GPU, else on one thread (one MPI rank, × cores); CarRacing: agent
  steps/s per core in the real env (`RealEvaluator`, `es.real_envs_per_worker` envs, both renderers) →
  `--generations` (200: "enough" per the authors' README, §7) × P × K episodes of `--dream-len` dream steps (Doom)
  or 1000 real steps (CarRacing);
* evaluate: agent steps/s per core in the real env → 100 episodes of `--eval-len` (Doom) or 1000 (CarRacing) steps,
  one process per core.

Doom's dream cost grows with C's episode length: random controllers die after ≈ 305 dream steps (the rate is
measured there), trained ones live longer (the small runs' dream means were 330–670), so C's estimate uses
`--dream-len` (600). Estimates assume perfect scaling over cores for the CPU stages (the MPI and process pools
measured 1.8–1.95× on 2 cores, `bench/train_controller.py`, `bench/collect.py`) and ignore file I/O and start-up.

    .venv/bin/python bench/paper_scale.py                    # both envs, ≈ 20 s a stage (≈ 5 min on 2 cores)
    .venv/bin/python bench/paper_scale.py --env doom_takecover --seconds 40
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

from wm.core.config import load  # noqa: E402
from wm.envs.family import CARRACING, family  # noqa: E402

STAGES = ("collect", "train-vae", "encode", "train-mdnrnn", "train-controller", "evaluate")


def timed(fn, seconds: float, warm: int = 2) -> tuple[int, float]:
    """Call `fn()` (returns the work it did) `warm` times untimed, then until `seconds` pass: (work, seconds)."""
    for _ in range(warm):
        fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        n += fn()
    return n, time.perf_counter() - t0


def device_name(tf) -> str:
    gpus = tf.config.list_logical_devices("GPU")
    return f"GPU x{len(gpus)}" if gpus else "CPU"


# ---------------------------------------------------------------- measurements (each in its own process)
def m_collect(cfg, seconds: float) -> dict:
    """One process, the data policy: env steps/s, the mean length of finished episodes and the share kept."""
    from wm.envs import action_dim, make_env
    from wm.envs.policies import make_policy

    env = make_env(cfg, seed=0)
    policy = make_policy(cfg, np.random.default_rng(0), action_dim(cfg))
    obs, _ = env.reset()
    lengths, t, steps, t0 = [], 0, 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds or not lengths:
        obs, _, term, trunc, _ = env.step(policy.act(obs))
        steps, t = steps + 1, t + 1
        if trunc or (term and not cfg.collect.ignore_done):
            lengths.append(t)
            obs, _ = env.reset()
            t = 0
    dt = time.perf_counter() - t0
    env.close()
    kept = [n for n in lengths if n >= int(cfg.collect.min_length)]
    return {
        "steps_per_s": steps / dt,
        "mean_len": float(np.mean(lengths)),
        "kept_share": len(kept) / len(lengths),
        "kept_mean_len": float(np.mean(kept)) if kept else float(np.mean(lengths)),
        "episodes_seen": len(lengths),
    }


def synthetic_episodes(folder: Path, n: int, t: int) -> list[Path]:
    """n episode files of t smooth 64×64 frames (8×8 blocks: they compress like game frames, unlike noise)."""
    from wm.data.episodes import episode_name, write_episode

    rng, paths = np.random.default_rng(0), []
    for i in range(n):
        blocks = rng.integers(0, 256, (t, 8, 8, 3), dtype=np.uint8)
        obs = blocks.repeat(8, axis=1).repeat(8, axis=2)
        path = folder / episode_name(i)
        write_episode(
            path,
            obs=obs,
            action=np.zeros((t, 1), np.float32),
            reward=np.zeros(t, np.float32),
            done=np.arange(t) == t - 1,
            seed=np.int64(i),
        )
        paths.append(path)
    return paths


def m_vae(cfg, seconds: float) -> dict:
    """V's compiled train step on one batch, and the streaming input pipeline alone, in frames/s."""
    from wm.core import tf_setup

    tf = tf_setup.setup(threads=None, gpu=True)
    import keras

    from wm.data.frames import decode_files, frame_dataset
    from wm.models.vae import ConvVAE, make_optimizer
    from wm.models.vae_tf import make_train_step, use_xla

    v = cfg.vae
    keras.utils.set_random_seed(0)
    model = ConvVAE(int(v.z_dim))
    jit = use_xla(v.jit_compile)
    step = make_train_step(model, make_optimizer(float(v.lr)), float(v.kl_tolerance), 0, jit_compile=jit)
    x = tf.constant(np.random.default_rng(0).integers(0, 256, (int(v.batch_size), 64, 64, 3), dtype=np.uint8))
    i = [0]

    def one() -> int:
        i[0] += 1
        out = step(x, tf.constant(i[0], tf.int64))
        if i[0] % 20 == 0:  # the stage reads losses back every 20 steps
            float(out[0])
        return int(v.batch_size)

    frames, dt = timed(one, seconds)
    step_rate = frames / dt
    with tempfile.TemporaryDirectory() as d:
        paths = synthetic_episodes(Path(d), 16, 300)
        cycle = decode_files(v.parallel_files)

        def epoch() -> int:
            ds = frame_dataset(paths, int(v.batch_size), seed=0, epoch=i[0], shuffle_buffer=2000, cycle=cycle)
            return sum(int(b.shape[0]) for b in ds)

        frames, dt = timed(epoch, seconds / 2, warm=1)
    pipe_rate = frames / dt
    return {
        "steps_per_s": min(step_rate, pipe_rate),
        "step_frames_per_s": step_rate,
        "pipeline_frames_per_s": pipe_rate,
        "xla": jit,
        "decode_files": cycle,
        "device": device_name(tf),
    }


def m_encode(cfg, seconds: float) -> dict:
    from wm.core import tf_setup

    tf = tf_setup.setup(threads=None, gpu=True)
    from wm.models.vae import ConvVAE
    from wm.models.vae_tf import make_encoder

    enc = make_encoder(ConvVAE(int(cfg.vae.z_dim)))
    b = int(cfg.encode.batch_size)
    x = tf.constant(np.random.default_rng(0).integers(0, 256, (b, 64, 64, 3), dtype=np.uint8))

    def one() -> int:
        float(enc(x)[0][0, 0])
        return b

    frames, dt = timed(one, seconds)
    return {"steps_per_s": frames / dt, "device": device_name(tf)}


def m_mdnrnn(cfg, seconds: float) -> dict:
    """M's train step at the preset's sizes (streams: B × seq_len with Doom-like restarts; episodes: B × 999)."""
    from wm.core import tf_setup

    tf = tf_setup.setup(threads=None, gpu=True)
    import keras

    from bench.mdnrnn_lstm import batch
    from wm.envs import action_dim
    from wm.models.mdnrnn import MDNRNN, make_optimizer
    from wm.models.mdnrnn_tf import make_train_step

    m_cfg, a_dim = cfg.mdnrnn, action_dim(cfg)
    seq = int(m_cfg.seq_len) - (1 if m_cfg.batching == "episodes" else 0)
    size = {"batch": int(m_cfg.batch_size), "seq": seq, "z": int(cfg.vae.z_dim), "action": a_dim}
    keras.utils.set_random_seed(0)
    m = MDNRNN(size["z"], a_dim, int(m_cfg.hidden), int(m_cfg.num_mixtures), bool(m_cfg.predict_done), lstm=m_cfg.lstm)
    step = make_train_step(m, make_optimizer(m_cfg.lr, m_cfg.lr_min, m_cfg.lr_decay, m_cfg.adam_eps, m_cfg.grad_clip))
    b = {k: tf.constant(v) for k, v in batch(size).items()}
    if m_cfg.batching == "episodes":
        b.pop("restart")
    carry = [m.initial_state(size["batch"])]
    i = [0]

    def one() -> int:
        nll, _, _, carry[0] = step(b, carry[0])
        i[0] += 1
        if i[0] % 10 == 0:  # the stage reads losses back every 10 steps
            float(nll)
        return 1

    steps, dt = timed(one, seconds)
    return {"steps_per_s": steps / dt, "lstm": m.lstm_impl, "params": int(m.count_params()), "device": device_name(tf)}


def m_dream(cfg, seconds: float, gens: int) -> dict:
    """One Doom dream generation at the paper's P × K and LSTM: the batched pool with a GPU, else one thread."""
    from wm.core import tf_setup

    gpu = bool(tf_setup.quiet_import().config.list_physical_devices("GPU"))  # no context yet: setup comes next
    from bench.dream_pool import dream_variant

    es = cfg.es
    r = dream_variant(None if gpu else 1, gpu, False, int(cfg.dream.max_steps), gens, int(es.popsize), int(es.trials), 512)
    return {**r, "device": "GPU" if gpu else "CPU (1 thread = 1 MPI rank)"}


def m_real(cfg, seconds: float, renderer: str = "official") -> dict:
    """The agent (V + M + C batched over `es.real_envs_per_worker` envs, random weights) in the real env, one TF
    thread as a pool worker: agent steps/s per core."""
    from wm.core import tf_setup

    tf_setup.setup(threads=1, gpu=False)
    from wm.core.config import update
    from wm.envs.setup import setup
    from wm.models.controller import Controller
    from wm.models.mdnrnn import MDNRNN
    from wm.models.vae import ConvVAE
    from wm.rollouts.rollout import RealEvaluator

    cfg = update(cfg, {"env": {"renderer": renderer}}) if family(cfg).renderers else cfg
    facts = setup(cfg)
    s = facts.sizes
    m = MDNRNN(s.z_dim, s.action_dim, s.hidden, s.num_mixtures, s.predict_done)
    c = Controller.from_setup(facts)
    n_envs = int(cfg.es.real_envs_per_worker)
    ev = RealEvaluator(facts, ConvVAE(s.z_dim), m, c, n_envs=n_envs)
    params = np.random.default_rng(1).normal(0.0, 0.1, (n_envs, c.n_params))
    cap = 300  # steps per episode here: the rate, not whole episodes (CarRacing's zoom-in is its first 50)
    k = [0]

    def one() -> int:
        k[0] += 1
        _, lengths = ev.evaluate(params, np.arange(n_envs)[:, None] + 1000 * k[0], max_steps=cap)
        return int(lengths.sum())

    steps, dt = timed(one, seconds, warm=1)
    close = getattr(ev, "close", None)
    if callable(close):
        close()
    return {"steps_per_s": steps / dt, "envs": n_envs, **({"renderer": renderer} if family(cfg).renderers else {})}


# ---------------------------------------------------------------- the driver
def measure(stage: str, env: str, seconds: float, extra: list[str] | None = None) -> dict:
    """Run one measurement in a fresh subprocess; its JSON, or {"error": last line of stderr}."""
    cmd = [sys.executable, __file__, "--measure", stage, "--env", env, "--seconds", str(seconds), *(extra or [])]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def estimate(env: str, a: argparse.Namespace, cores: int) -> dict[str, Any]:
    cfg = load([env])
    rows: dict[str, Any] = {}
    col = measure("collect", env, a.seconds)
    rows["collect"] = col
    if "error" not in col:
        workers = max(1, min(cores, int(cfg.collect.workers)))
        frames = int(cfg.collect.episodes) * col["kept_mean_len"]
        steps = int(cfg.collect.episodes) / max(col["kept_share"], 1e-3) * col["mean_len"]
        col.update(work=f"{steps:.3g} env steps on {workers} processes", est_s=steps / (col["steps_per_s"] * workers))
    else:
        frames = int(cfg.collect.episodes) * (1000 if family(env) is CARRACING else 308)  # the paper's data (§1)
    rows["frames"] = round(frames)
    vae = measure("train-vae", env, a.seconds)
    if "error" not in vae:
        epochs = int(cfg.vae.epochs)
        vae.update(work=f"{epochs} epochs × {frames:.3g} frames", est_s=epochs * frames / vae["steps_per_s"])
    rows["train-vae"] = vae
    enc = measure("encode", env, a.seconds)
    if "error" not in enc:
        enc.update(work=f"{frames:.3g} frames", est_s=frames / enc["steps_per_s"])
    rows["encode"] = enc
    mdn = measure("train-mdnrnn", env, a.seconds)
    if "error" not in mdn:
        m_cfg = cfg.mdnrnn
        if m_cfg.batching == "streams":
            steps = int(m_cfg.epochs) * frames / (int(m_cfg.batch_size) * int(m_cfg.seq_len))
        else:
            steps = int(m_cfg.steps)
        mdn.update(work=f"{steps:.4g} steps", est_s=steps / mdn["steps_per_s"])
    rows["train-mdnrnn"] = mdn
    es = cfg.es
    members = int(es.popsize) * int(es.trials)
    if family(env).renderers:
        ctl = {r: measure("real", env, a.seconds, ["--renderer", r]) for r in ("official", "fast")}
        for r in ctl.values():
            if "error" not in r:
                steps = a.generations * members * int(cfg.env.max_steps)
                r.update(work=f"{a.generations} gens × {members} × {int(cfg.env.max_steps)} steps on {cores} cores")
                r["est_s"] = steps / (r["steps_per_s"] * cores)
        rows["train-controller"] = ctl
        ctl_s = ctl["fast"].get("est_s"), ctl["official"].get("est_s")
        rows["train-controller_s_per_generation"] = {
            k: round(v / a.generations, 1) for k, v in zip(("fast", "official"), ctl_s, strict=True) if v
        }
        ev = ctl["official"]
        eval_len = int(cfg.env.max_steps)
    else:
        ctl = measure("dream", env, a.seconds, ["--gens", str(a.dream_gens)])
        if "error" not in ctl:
            rate = ctl["steps_per_s"] * (1 if ctl["gpu"] else cores)
            steps = a.generations * members * a.dream_len
            ctl.update(
                work=f"{a.generations} gens × {members} dreams × {a.dream_len} steps"
                + ("" if ctl["gpu"] else f" on {cores} MPI ranks"),
                est_s=steps / rate,
                s_per_generation_at_dream_len=round(members * a.dream_len / rate, 2),
            )
        rows["train-controller"] = ctl
        ev = measure("real", env, a.seconds)
        rows["evaluate_agent"] = ev
        eval_len = a.eval_len
    if "error" not in ev:
        steps = int(cfg.evaluate.episodes) * eval_len
        rows["evaluate"] = {"work": f"{int(cfg.evaluate.episodes)} episodes × {eval_len} steps on {cores} processes"}
        rows["evaluate"]["est_s"] = steps / (ev["steps_per_s"] * cores)
    total = 0.0
    for stage in STAGES:
        row = rows.get(stage, {})
        if stage == "train-controller" and family(env).renderers:
            row = row.get("fast", {})
        total += float(row.get("est_s", 0.0))
    rows["total_est_h"] = round(total / 3600, 2)
    if family(env).renderers:
        rows["total_note"] = "C with the fast renderer (the official one: see train-controller.official)"
    return rows


def rounded(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in x.items()}
    if isinstance(x, float):
        return round(x, 3) if abs(x) < 100 else round(x, 1)
    return x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", nargs="+", choices=["doom_takecover", "carracing"], default=["doom_takecover", "carracing"])
    ap.add_argument("--seconds", type=float, default=20.0, help="timed seconds per measurement")
    ap.add_argument("--generations", type=int, default=200, help="C's generations in the estimate")
    ap.add_argument("--dream-len", type=int, default=600, help="mean dream steps per episode in C's estimate (Doom)")
    ap.add_argument("--eval-len", type=int, default=1000, help="mean real steps per evaluation episode (Doom)")
    ap.add_argument("--dream-gens", type=int, default=1, help="timed dream generations (Doom)")
    ap.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="CPU cores to extrapolate over")
    ap.add_argument("--measure", help=argparse.SUPPRESS)  # one measurement in this process (the driver's subprocess)
    ap.add_argument("--renderer", default="official", help=argparse.SUPPRESS)
    ap.add_argument("--gens", type=int, default=1, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.measure:
        cfg = load([a.env[0]])
        fns = {
            "collect": lambda: m_collect(cfg, a.seconds),
            "train-vae": lambda: m_vae(cfg, a.seconds),
            "encode": lambda: m_encode(cfg, a.seconds),
            "train-mdnrnn": lambda: m_mdnrnn(cfg, a.seconds),
            "dream": lambda: m_dream(cfg, a.seconds, a.gens),
            "real": lambda: m_real(cfg, a.seconds, a.renderer),
        }
        print(json.dumps(fns[a.measure]()))
        return
    t0 = time.perf_counter()
    out: dict[str, Any] = {"bench": "paper_scale", "cores": a.cores, "seconds_per_measurement": a.seconds}
    out["load_before"] = round(os.getloadavg()[0], 2)  # > 0.5 on an idle machine means others share the cores
    for env in a.env:
        out[env] = estimate(env, a, a.cores)
    out["bench_wall_s"] = round(time.perf_counter() - t0, 1)
    out["load_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(rounded(out)))


if __name__ == "__main__":
    main()
