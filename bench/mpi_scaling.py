"""collect and evaluate over MPI ranks, 1 → 2 playing ranks, and the master's dispatch cost per task: one JSON object.

    .venv/bin/python bench/mpi_scaling.py                       # DoomTakeCover, 48 episodes of ≤ 300 steps each way
    .venv/bin/python bench/mpi_scaling.py --episodes 48 --steps 500

Each measurement is one `mpirun -n R python -m wm <stage>` in a fresh run directory (R = 2: the dispatching rank 0 and
one playing rank; R = 3: two playing ranks), timed from start to exit, so start-up (ViZDoom's, the ranks') is in both
and the ratio is what a user sees; for evaluate also its episodes alone (the summary's `seconds`: every rank imports
TensorFlow first, seconds that do not shrink with the ranks). `collect` plays the tiny preset's data policy;
`evaluate --random` plays the random policy on the evaluation seeds (the same engine path as C's real-game
evaluation, without needing a trained C). Both runs of a stage must give the same episodes (the bench checks the
scores), so the speed-up is of the same work.

The dispatch cost: rank 0's MPI pool (`wm.mpi.make_pool`) maps a task that does nothing over `--tasks` payloads on 2
worker ranks; its wall time per task is the master's round trip (send, the worker's receive and reply, the poll).
Run on an idle machine: the ranks are processes on its cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from anywhere: the checkout's wm
MPIRUN = str(Path(sys.executable).with_name("mpirun"))

from wm.core.rundir import RunDir  # noqa: E402


def _timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - t0


def _wm(ranks: int, *args: str) -> list[str]:
    return [MPIRUN, "-n", str(ranks), sys.executable, "-m", "wm", *args, "--progress-every", "0"]


def stages(episodes: int, steps: int) -> dict:
    """Wall seconds of collect and evaluate --random with 1 and 2 playing ranks, and their ratios."""
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        sets = ["--set", f"collect.episodes={episodes}", f"env.max_steps={steps}"]
        means = {}
        for ranks in (2, 3):
            run = str(Path(tmp) / f"r{ranks}")
            col = _timed(_wm(ranks, "collect", "--configs", "doom_takecover", "tiny", "--run", run, *sets))
            ev = _timed(_wm(ranks, "evaluate", "--run", run, "--random", "--episodes", str(episodes), "--gifs", "0"))
            summary = json.loads(RunDir(run).eval_summary("random").read_text())
            means[ranks] = summary["mean"]
            out[f"collect_s_{ranks - 1}_rank"] = round(col, 2)
            out[f"evaluate_s_{ranks - 1}_rank"] = round(ev, 2)
            out[f"evaluate_play_s_{ranks - 1}_rank"] = summary["seconds"]  # the episodes alone: no TF start-up
        if means[2] != means[3]:
            raise SystemExit(f"evaluate --random differs between 1 and 2 playing ranks: {means}")
    for what in ("collect", "evaluate", "evaluate_play"):
        out[f"{what}_speedup_1_to_2"] = round(out[f"{what}_s_1_rank"] / out[f"{what}_s_2_rank"], 3)
    return out


def _nothing(ctx, payload):
    return payload


def dispatch_child(tasks: int) -> None:
    """Under `mpirun -n 3`: rank 0 maps `_nothing` over `tasks` payloads, prints ms per task; the others serve."""
    from wm.mpi import launched_rank, make_pool

    if launched_rank() > 0:
        from wm.mpi.worker import main as serve

        raise SystemExit(serve())
    with make_pool(None, ()) as pool:
        pool.map(_nothing, list(range(20)))  # warm: the ranks' first messages
        t0 = time.perf_counter()
        pool.map(_nothing, list(range(tasks)))
        print(json.dumps({"dispatch_ms_per_task": round(1000 * (time.perf_counter() - t0) / tasks, 3)}))


def dispatch(tasks: int) -> dict:
    cmd = [MPIRUN, "-n", "3", sys.executable, str(Path(__file__).resolve()), "--dispatch-child", str(tasks)]
    p = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=48)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--dispatch-child", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.dispatch_child:
        dispatch_child(a.dispatch_child)
        return
    result = {"episodes": a.episodes, "max_steps": a.steps, **stages(a.episodes, a.steps), **dispatch(a.tasks)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
