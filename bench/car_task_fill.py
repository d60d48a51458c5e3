"""How a real-env task's size costs C's training: `python bench/car_task_fill.py --run <run whose C trained in the game>`.

A real-env worker steps `es.real_envs_per_worker` envs together (16 in `carracing small`), one compiled V + M + C call
for all of them each step whether an env is busy or idle. A task of `members × es.trials` episodes smaller than that
leaves slots idle for the whole task: the call's cost is shared by fewer env steps. This bench plays tasks of several
sizes with one evaluator in this process (one TF thread, as a pool worker), alternating the sizes `--rounds` times so
a shared machine's load falls on each alike, and prints the CPU milliseconds per agent step of each and its speed
against the first size (`speed`: > 1 is faster). Members are the run's C (`--params`, default its
`controller/mean.npz`) plus N(0, `--sigma`²) noise, as a CMA-ES generation around its mean; the episodes use
training-side seeds (and CarRacing's no-progress cut-off) of the run's config, as training does. Prints JSON.
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
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from wm.core.rundir import RunDir  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=ROOT / "runs" / "car-s0", help="a finished run with es.fitness real")
    ap.add_argument("--params", default="mean", help="best | mean | an .npz path: the C the members scatter around")
    ap.add_argument("--members", type=int, nargs="+", default=[3, 4, 6], help="members per task, each size in turn")
    ap.add_argument("--rounds", type=int, default=2, help="alternations of the sizes")
    ap.add_argument("--sigma", type=float, default=0.1, help="the members' spread around the C")
    a = ap.parse_args()
    run = RunDir(a.run)
    cfg = run.load_config() if run.config_path.is_file() else None
    if cfg is None or cfg.es.fitness != "real" or not run.is_done("train-controller"):
        print(json.dumps({"skipped": f"{a.run}: no C trained in the real game (`--run` a run that has one)"}))
        return
    from wm.envs.setup import setup
    from wm.rollouts.engine import EvalSpec, init_worker
    from wm.rollouts.world import read_params

    ctx = init_worker(EvalSpec("real", cfg.to_dict(), str(run.path)))  # one TF thread, V and M loaded, envs opened
    ev = ctx.evaluator
    path = run.params(a.params) if a.params in ("best", "mean") else Path(a.params)
    centre = read_params(path, ev.c.n_params).astype(np.float32)
    trials, envs = cfg.es.trials, ev.n_envs
    cut = cfg.es.no_progress_steps if setup(cfg).family.track_tiles else 0
    rng = np.random.default_rng(7)
    ev.evaluate(centre[None], np.array([[10_000]]), max_steps=2)  # trace the step graph
    total = {m: [0, 0.0] for m in a.members}
    rows = []
    for rnd in range(a.rounds):
        for m in a.members:
            params = centre + a.sigma * rng.standard_normal((m, centre.size)).astype(np.float32)
            seeds = rng.integers(10_000, 2**31 - 1, (m, trials))
            c = time.process_time()
            _, lengths = ev.evaluate(params, seeds, no_progress=cut)
            cpu, steps = time.process_time() - c, int(lengths.sum())
            total[m][0] += steps
            total[m][1] += cpu
            rows.append({"round": rnd, "members": m, "episodes": m * trials, "steps": steps, "cpu_s": round(cpu, 2)})
    ctx.close()
    ms = {m: 1e3 * cpu / steps for m, (steps, cpu) in total.items()}
    first = ms[a.members[0]]
    sizes = {
        f"{m}x{trials}": {"episodes": m * trials, "envs": envs, "cpu_ms_per_step": round(v, 3), "speed": round(first / v, 3)}
        for m, v in ms.items()
    }
    print(json.dumps({"run": str(a.run), "passes": rows, "sizes": sizes}, indent=1))


if __name__ == "__main__":
    main()
