"""`python -m wm data check --run runs/x`: summarise `episodes/` (count, frames, length stats) and name bad files.

Every file goes through the readers' own validation path (`wm.data.episodes.check_file`: the zip index and the
`.npy` headers, so truncated files, missing arrays, a wrong obs shape or dtype against `env.frame_size`, a wrong
action width and arrays of different lengths are all named without decompressing a frame); `--full` also
decompresses every array, which catches damage inside the compressed data. `series/` is checked the same way
(mu/logvar against `vae.z_dim`) when it exists. Exit code 1 when a bad file is found.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from wm.core.errors import WMError
from wm.core.rundir import RunDir
from wm.data.episodes import EPISODE_KEYS, SERIES_KEYS, EpisodeError, episode_spec, read_episode, scan
from wm.envs.setup import setup

_KEYS = {"episode": EPISODE_KEYS, "series": SERIES_KEYS}


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
    cfg = run.load_config()
    spec = episode_spec(setup(cfg)) if cfg is not None and "env" in cfg else {"frame_size": 64}
    lengths, bad = [], []
    for path, steps, reason in _scan(folder, "episode", full, spec):
        if reason is None:
            lengths.append(steps)
        else:
            bad.append({"file": path.name, "reason": reason})
    n = np.asarray(lengths, dtype=np.int64)
    out = {"run": str(run.path), "episodes": len(lengths), "frames": int(n.sum()), "bad_files": bad}
    series = run.stage_dir("encode")
    if series.exists():
        z_dim = cfg.vae.z_dim if cfg is not None and "vae" in cfg else None
        checked = list(_scan(series, "series", full, {"z_dim": z_dim, "action_dim": spec.get("action_dim")}))
        out["series"] = sum(1 for _, _, reason in checked if reason is None)
        out["series_bad_files"] = [{"file": p.name, "reason": r} for p, _, r in checked if r is not None]
    if cfg is not None and "collect" in cfg:
        out["target"] = cfg.collect.episodes
    if len(n):
        out.update(
            length_min=int(n.min()), length_mean=float(n.mean()), length_median=float(np.median(n)), length_max=int(n.max())
        )
    return out


def _scan(folder, kind: str, full: bool, spec: dict):
    """`scan` (headers only), and with `full` a complete decompression of each file that passed."""
    for path, steps, reason in scan(folder, kind, **spec):
        if reason is None and full:
            try:
                read_episode(path, keys=_KEYS[kind])
            except EpisodeError as e:
                steps, reason = None, str(e)
        yield path, steps, reason


def main(args: argparse.Namespace) -> int:
    s = summarise(RunDir(args.run), full=args.full)
    if args.json:
        print(json.dumps(s))
    else:
        target = f" (target {s['target']})" if "target" in s else ""
        print(f"{s['run']}/episodes: {s['episodes']} episodes{target}, {s['frames']} frames")
        if s["episodes"]:
            print(
                f"  length min {s['length_min']}  mean {s['length_mean']:.1f}  median {s['length_median']:g}  "
                f"max {s['length_max']}"
            )
        print(f"  bad files: {len(s['bad_files'])}")
        for b in s["bad_files"]:
            print(f"    {b['file']}: {b['reason']}")
        if "series" in s:
            print(f"{s['run']}/series: {s['series']} series files, bad files: {len(s['series_bad_files'])}")
            for b in s["series_bad_files"]:
                print(f"    {b['file']}: {b['reason']}")
    return 1 if s["bad_files"] or s.get("series_bad_files") else 0
