"""CMA-ES generation time under `mpirun -n 2` (1 worker) vs `-n 3` (2 workers): `.venv/bin/python bench/train_controller.py [--quick]`.

Prints one JSON object. For each fitness (`dream`: the batched dream evaluator on a random-weight M of the
paper's Doom size, z 64 / LSTM 512, done logit biased off so every dream runs to the cap; `real`: V + M + C in
real ViZDoom with random-weight V/M of the paper's size) the stage runs end to end as
`mpirun -n N python -m wm train-controller` on a scratch run dir, and seconds per generation is the median of
the per-generation times of `metrics/controller.jsonl` (`es/elapsed` differences), skipping generation 1
(graph tracing) and the last (it also evaluates the mean). `speedup` = s/gen(1 worker) / s/gen(2 workers); the
aim is ≥ 1.8. The machine's 2 cores are shared with the master's polling and anything else running.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from wm.rundir import RunDir, read_jsonl  # noqa: E402

MPIRUN = str(Path(sys.executable).with_name("mpirun"))


def make_upstream(path: Path) -> None:
    """A run dir holding random-weight V and M of the paper's Doom sizes, initial_z and DONE sentinels."""
    from wm import tf_setup

    tf_setup.setup(threads=1, gpu=False)
    from wm.models.mdnrnn import MDNRNN
    from wm.models.vae import ConvVAE

    run = RunDir(path)
    m = MDNRNN(64, 1, 512, 5, True)
    m.step(np.zeros((1, 64), np.float32), np.zeros((1, 1), np.float32), m.initial_state(1), np.ones(1, np.float32))
    bias = m.out_bias.numpy()
    bias[0] = -20.0  # done logit off: every dream runs to dream.max_steps (uniform, comparable work)
    m.out_bias.assign(bias)
    for verb in ("train-vae", "encode", "train-mdnrnn"):
        run.stage_dir(verb).mkdir(parents=True, exist_ok=True)
    m.save_weights(str(run.stage_dir("train-mdnrnn") / "mdnrnn.weights.h5"))
    ConvVAE(64).save_weights(str(run.stage_dir("train-vae") / "vae.weights.h5"))
    rng = np.random.default_rng(0)
    np.savez(run.stage_dir("encode") / "initial_z.npz", mu=rng.normal(size=(16, 64)).astype(np.float32),
             logvar=np.full((16, 64), -2.0, np.float32))
    for verb in ("train-vae", "encode", "train-mdnrnn"):
        run.mark_done(verb, {})


def seconds_per_generation(template: Path, work: Path, ranks: int, sets: list[str]) -> dict[str, float]:
    run = work / f"{sets[0].split('=')[1]}-{ranks}"
    shutil.copytree(template, run)
    cmd = [MPIRUN, "-n", str(ranks), sys.executable, "-m", "wm", "train-controller", "--configs", "doom_takecover",
           "--run", str(run), "--set", *sets]
    t0 = time.time()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    wall = time.time() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    el = [r["es/elapsed"] for r in read_jsonl(RunDir(run).metrics_path("train-controller"))]
    dts = np.diff([0.0, *el])[1:-1]
    return {"s_per_gen": round(float(np.median(dts)), 3), "wall_s": round(wall, 1), "gens_timed": len(dts)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer generations and a shorter real episode cap (< 1 min)")
    args = ap.parse_args()
    gens = 3 if args.quick else 6
    common = ["es.eval_every=1000", "es.eval_episodes=4", "es.task_timeout=600", f"es.generations={gens}"]
    setups = {
        # 4 tasks of 4 members × 4 dreams of 200 steps each per generation
        "dream": ["es.fitness=dream", "es.popsize=16", "es.trials=4", "es.chunk=4", "dream.max_steps=200", *common],
        # 8 tasks of 2 members × 1 real episode (≤ cap steps), 2 envs per worker stepped together
        "real": ["es.fitness=real", "es.popsize=16", "es.trials=1", "es.chunk=2", "es.real_envs_per_worker=2",
                 f"env.max_steps={40 if args.quick else 150}", *common],
    }
    out: dict[str, object] = {"machine_cores": os.cpu_count(), "generations": gens}
    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp) / "template"
        make_upstream(template)
        for name, sets in setups.items():
            one = seconds_per_generation(template, Path(tmp), 2, sets)
            two = seconds_per_generation(template, Path(tmp), 3, sets)
            out[name] = {"1_worker": one, "2_workers": two, "speedup": round(one["s_per_gen"] / two["s_per_gen"], 2),
                         "settings": sets[:-len(common)]}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
