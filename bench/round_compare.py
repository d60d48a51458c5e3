"""One iterative round run again with other settings, beside the original (issue 22): `python bench/round_compare.py
--run RUN --round K --out OUT --set KEY=VALUE ...`.

Round K of a finished run is rebuilt in `OUT/round<K>` from the run's own round K − 1 exactly as the pipeline builds
it (`wm.iterate.prepare_round`: episodes, V and series linked, M warm-started from round K − 1's M, a fresh C), but
with `--set` applied to the run's config first, so a round-level lever (`iterate.explore`, `iterate.episodes`,
`iterate.mdnrnn_epochs`, `iterate.generations`, `iterate.set`, …) is measured on the data and world the original
round started from. Its stages run as the pipeline runs them (`python -m wm pipeline --run OUT/round<K> --mpi N`:
collect with round K − 1's C, encode, M, C under mpirun, 100 real episodes on the run's evaluation seeds). Prints
one JSON object: what the round collected, its real score and its M's final NLL beside the original round's, and
the difference paired by episode seed (`wm.results.paired_row`); `original` and `paired` are null when the run's round K
was never evaluated.

`OUT/round<K-1>` is a symbolic link to the run's round K − 1 (nothing is written there: the round's stages write only
under `OUT/round<K>`; its episodes are hard links, replaced by rename, never written through). Rerunning resumes
(finished stages are skipped). `iterate.episodes` keeps its meaning: round K holds `collect.episodes + K ×
iterate.episodes` episodes, so `new_episodes` in the JSON says how many this round played.

    .venv/bin/python bench/round_compare.py --run runs/s7-long --round 4 --out runs/screen/expl0-s7 \\
        --set iterate.explore=0.0
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/: its sibling es_compare

from es_compare import summary  # noqa: E402

from wm import config as C  # noqa: E402
from wm.data.episodes import list_episodes  # noqa: E402
from wm.errors import WMError  # noqa: E402
from wm.iterate import prepare_round, round_dir  # noqa: E402
from wm.results import paired_row  # noqa: E402
from wm.rundir import RunDir, read_jsonl  # noqa: E402


def side(run: RunDir) -> dict[str, Any] | None:
    """A round's real score and M's last logged training NLL; None when it has no real evaluation."""
    if not run.eval_summary("real").exists():
        return None
    nll = [r["mdnrnn/nll"] for r in read_jsonl(run.metrics_path("train-mdnrnn")) if "mdnrnn/nll" in r]
    return {"real": summary(run.path, "real"), "m_final_nll": round(float(nll[-1]), 4) if nll else None}


def setup(run: Path, k: int, out: Path, sets: list[str]) -> RunDir:
    """OUT with the run's config, a link to its round k − 1 and round k prepared under `sets`."""
    if k < 2:
        raise WMError(f"--round must be >= 2 (round 1 builds on the run itself), got {k}")
    base = RunDir(run)
    prev = round_dir(base, k - 1)
    if base.load_config() is None or not prev.is_done("train-controller"):
        raise WMError(f"{prev.path} has no finished train-controller: round {k} has nothing to build on")
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "config.yaml").exists():
        shutil.copy2(base.config_path, out / "config.yaml")
    link = out / f"round{k - 1}"
    if not link.exists():
        link.symlink_to(prev.path.resolve(), target_is_directory=True)
    cfg = C.update(RunDir(out).load_config(), C.parse_set(sets), source="--set")
    return prepare_round(RunDir(out), cfg, k)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True, help="a finished run with rounds (e.g. runs/s7-long)")
    ap.add_argument("--round", type=int, required=True, help="the round K to run again (≥ 2)")
    ap.add_argument("--out", type=Path, required=True, help="new directory for the rerun round")
    ap.add_argument("--mpi", type=int, default=3, help="MPI ranks for train-controller (rank 0 is the ES master)")
    ap.add_argument("--set", nargs="*", default=[], help="overrides applied to the run's config before the round")
    a = ap.parse_args()
    run, out = a.run.resolve(), a.out.resolve()
    try:
        child = setup(run, a.round, out, a.set)
    except WMError as e:
        sys.exit(f"error: {e}")
    base = RunDir(run)
    prev_n = len(list_episodes(round_dir(base, a.round - 1).episodes_dir))
    cmd = [sys.executable, "-m", "wm", "pipeline", "--run", str(child.path), "--mpi", str(a.mpi)]
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    orig = round_dir(base, a.round)
    ccfg = child.load_config()
    doc: dict[str, Any] = {
        "bench": "round_compare",
        "run": str(a.run),
        "round": a.round,
        "sets": a.set,
        "new_episodes": int(ccfg.collect.episodes) - prev_n,
        "explore": float(ccfg.collect.explore),
        "rerun": side(child),
        "original": side(orig),
        "paired": None,
    }
    if doc["original"] is not None:
        p = paired_row(str(orig.path), str(child.path))
        doc["paired"] = {k: p[k] for k in ("matched", "diff", "paired_se", "ci95")}
    print(json.dumps(doc))


if __name__ == "__main__":
    main()
