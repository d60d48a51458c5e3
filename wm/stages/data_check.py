"""`python -m wm data check --run runs/x`: summarise `episodes/` (count, frames, length stats) and name bad files.

By default the small arrays of every file are read (this opens the zip index, so truncated files are found);
`--full` also decompresses `obs` and checks its shape against `env.frame_size`, which catches damage inside it.
Exit code 1 when a bad file is found.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from wm.data.episodes import EPISODE_KEYS, scan
from wm.errors import WMError
from wm.rundir import RunDir


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["check"], help="check: summarise the episodes and list bad files")
    p.add_argument("--run", required=True, help="run directory")
    p.add_argument("--full", action="store_true", help="also decompress obs (slower; catches damage inside the frames)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")


def summarise(run: RunDir, full: bool = False) -> dict:
    """Dataset summary of `run/episodes/`: episodes, frames, length min/mean/median/max, bad files by name."""
    folder = run.stage_dir("collect")
    if not folder.exists():
        raise WMError(f"no episodes folder in {run.path} (run `python -m wm collect` first)")
    keys = EPISODE_KEYS if full else tuple(k for k in EPISODE_KEYS if k != "obs")
    cfg = run.load_config()
    size = int(cfg.env.frame_size) if cfg is not None and "env" in cfg else 64
    lengths, bad = [], []
    for path, arrays, reason in scan(folder, keys):
        if reason is None and full and arrays["obs"].shape[1:] != (size, size, 3):
            reason = f"{path}: obs frames are {arrays['obs'].shape[1:]}, expected ({size}, {size}, 3)"
        if reason is None:
            lengths.append(len(arrays["done"]))
        else:
            bad.append({"file": path.name, "reason": reason})
    n = np.asarray(lengths, dtype=np.int64)
    out = {"run": str(run.path), "episodes": len(lengths), "frames": int(n.sum()), "bad_files": bad}
    if cfg is not None and "collect" in cfg:
        out["target"] = int(cfg.collect.episodes)
    if len(n):
        out.update(length_min=int(n.min()), length_mean=float(n.mean()), length_median=float(np.median(n)),
                   length_max=int(n.max()))
    return out


def main(args: argparse.Namespace) -> int:
    s = summarise(RunDir(args.run), full=args.full)
    if args.json:
        print(json.dumps(s))
    else:
        target = f" (target {s['target']})" if "target" in s else ""
        print(f"{s['run']}/episodes: {s['episodes']} episodes{target}, {s['frames']} frames")
        if s["episodes"]:
            print(f"  length min {s['length_min']}  mean {s['length_mean']:.1f}  median {s['length_median']:g}  "
                  f"max {s['length_max']}")
        print(f"  bad files: {len(s['bad_files'])}")
        for b in s["bad_files"]:
            print(f"    {b['file']}: {b['reason']}")
    return 1 if s["bad_files"] else 0
