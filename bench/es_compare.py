"""The authors' evolution strategies side by side on one world (issue 20): `python bench/es_compare.py --world RUN`.

For each `es.algorithm` (cma, openes, pepg, ga) C is trained from scratch in the dream of the same V and M (a run
that finished train-mdnrnn, e.g. a `small` Doom run's best round), with the same population, trials, generations,
seeds and MPI ranks, then scored on the run's 100 fixed real evaluation episodes. Prints one JSON object: per
algorithm the seconds per generation (wall, and dream steps per second: a better C lives longer, so its generations
cost more), the final generation's dream mean and its mean's dream evaluation, and the real score (mean ± std,
median) beside the random policy's on the same seeds.

Each algorithm trains in `OUT/<algorithm>/`, which links the world's `vae/`, `mdnrnn/` and `series/` (nothing is
written through the links: stages replace files by rename) and copies its config; rerunning resumes (a finished
algorithm is read back, not retrained).

    .venv/bin/python bench/es_compare.py --world runs/s2/round4 --out runs/es-compare --generations 30
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wm.cli import stage_command  # noqa: E402
from wm.rundir import RunDir  # noqa: E402

ALGORITHMS = ("cma", "openes", "pepg", "ga")
LINKED = ("vae", "mdnrnn", "series")


def link_world(world: Path, dst: Path) -> None:
    """`dst` shares the world's V, M and series by hard links and holds its own config; idempotent."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        if not (dst / name).exists() and (world / name).exists():
            tmp = dst / f".{name}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(world / name, tmp, copy_function=os.link)
            tmp.rename(dst / name)
    if not (dst / "config.yaml").exists():
        shutil.copy2(world / "config.yaml", dst / "config.yaml")


def summary(run: Path, tag: str) -> dict[str, Any]:
    d = json.loads(RunDir(run).eval_summary(tag).read_text())
    return {k: round(float(d[k]), 1) for k in ("mean", "std", "median", "min", "max")} | {"episodes": d["episodes"]}


def records(run: Path) -> list[dict[str, Any]]:
    path = RunDir(run).metrics_path("train-controller")
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def one(world: Path, out: Path, alg: str, a: argparse.Namespace) -> dict[str, Any]:
    run = out / alg
    link_world(world, run)
    rd = RunDir(run)
    sets = [f"es.algorithm={alg}", f"es.generations={a.generations}", *a.set]
    t = time.time()
    if not rd.is_done("train-controller"):
        # no --force: a killed algorithm resumes from its es_state (es.* are train-controller's own settings)
        subprocess.run(stage_command("train-controller", run, sets=sets, ranks=a.mpi), check=True, stdout=sys.stderr)
    train_s = time.time() - t
    if not rd.eval_summary("real").exists():
        subprocess.run(stage_command("evaluate", run, sets=[f"evaluate.episodes={a.episodes}"]), check=True, stdout=sys.stderr)
    gens = [r for r in records(run) if "es/generation" in r]
    last, evals = gens[-1], [r for r in gens if "es/eval_mean" in r]
    es = rd.load_config().es  # the settings it trained with (--set included)
    steps = sum(float(r["es/len_mean"]) for r in gens) * int(es.popsize) * int(es.trials)
    elapsed = float(last["es/elapsed"])
    return {
        "popsize": int(es.popsize),
        "trials": int(es.trials),
        "generations": int(last["es/generation"]),
        "s_per_generation": round(elapsed / len(gens), 2),
        "dream_steps_per_s": round(steps / elapsed),
        "train_wall_s": round(train_s, 1),  # 0 when read back from an earlier run
        "dream_last_generation_mean": round(float(last["es/mean"]), 1),
        "dream_eval_of_mean": round(float(evals[-1]["es/eval_mean"]), 1) if evals else None,
        "real": summary(run, "real"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=Path, required=True, help="a run that finished train-mdnrnn (V, M, initial z)")
    ap.add_argument("--out", type=Path, default=Path("runs/es-compare"))
    ap.add_argument("--algorithms", nargs="+", choices=ALGORITHMS, default=list(ALGORITHMS))
    ap.add_argument("--generations", type=int, default=30)
    ap.add_argument("--episodes", type=int, default=100, help="real evaluation episodes per algorithm")
    ap.add_argument("--mpi", type=int, default=3, help="MPI ranks (rank 0 is the ES master)")
    ap.add_argument("--set", nargs="*", default=[], help="more key=value overrides for every algorithm")
    a = ap.parse_args()
    world = a.world.resolve()
    if not RunDir(world).is_done("train-mdnrnn"):
        sys.exit(f"error: {world} has not finished train-mdnrnn (no world to train C in)")
    # each algorithm's entry gives the popsize and trials it trained with (the world's, or --set's)
    out: dict[str, Any] = {"bench": "es_compare", "world": str(a.world), "mpi_ranks": a.mpi, "sets": a.set}
    random = a.out / "random"
    link_world(world, random)
    if not RunDir(random).eval_summary("random").exists():
        cmd = stage_command("evaluate", random, sets=[f"evaluate.episodes={a.episodes}"]) + ["--random"]
        subprocess.run(cmd, check=True, stdout=sys.stderr)
    out["random"] = summary(random, "random")
    for alg in a.algorithms:
        out[alg] = one(world, a.out, alg, a)
        print(f"[es_compare] {alg}: {json.dumps(out[alg])}", file=sys.stderr, flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
