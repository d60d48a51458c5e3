"""Does V see the controller's frames as well as the random policy's? (issue 22 item 2: iterative training with V too)

On a finished run with rounds of iterative training, one pass's V (`--pass`, default the last round) encodes and
decodes (z = μ) every `--stride`-th frame of a sample of each kind of episode, and the mean per-frame reconstruction
error Σ_pixels (x − x̂)² (the first term of V's training loss) is reported per group:
- `vae_train`: V's own training episodes (the first `vae.episodes` of the random-policy data);
- `random_heldout`: the rest of the first pass's random-policy episodes;
- `round<k>`: the episodes round k added, played by the previous pass's C (with its exploration segments).
A V trained on random data only that reconstructs C's frames much worse than held-out random ones has drifted out
of its data: what `iterate.vae_epochs` (fine-tune V on C's episodes each round) is meant to fix.
One JSON object. Usage: `python bench/vae_shift.py --run runs/s3`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True, help="a finished run with round1/, round2/, …")
    p.add_argument("--pass", dest="which", default=None, help="whose V: 0 (the first pass) or k (round k); default last")
    p.add_argument("--episodes", type=int, default=40, help="episodes sampled per group")
    p.add_argument("--stride", type=int, default=10, help="every n-th frame of an episode")
    args = p.parse_args()

    import numpy as np

    from wm import tf_setup
    from wm.data.episodes import list_episodes, read_episode
    from wm.rundir import RunDir, round_dirs
    from wm.world import load_world

    tf_setup.setup(threads=1, gpu=False)
    base = RunDir(args.run)
    rounds = [RunDir(d) for d in round_dirs(base.path)]
    passes = [base, *rounds]
    if not rounds:
        sys.exit(f"bench/vae_shift.py: {base.path} has no round1/: run the pipeline with iterate.rounds > 0")
    k = len(rounds) if args.which is None else int(args.which)
    if not 0 <= k <= len(rounds):
        sys.exit(f"bench/vae_shift.py: --pass {k}: {base.path} has passes 0–{len(rounds)}")
    cfg = passes[k].load_config()
    vae = load_world(cfg, passes[k], ("vae",)).vae

    def files(run: RunDir) -> list[Path]:
        return list_episodes(run.stage_dir("collect"))

    first = files(base)
    n_vae = int(base.load_config().vae.episodes) or len(first)
    groups = {"vae_train": first[:n_vae], "random_heldout": first[n_vae:]}
    seen = len(first)
    for j, r in enumerate(rounds, 1):
        now = files(r)
        groups[f"round{j}"] = now[seen:]
        seen = len(now)

    def recon(paths: list[Path]) -> dict[str, float]:
        step = max(1, len(paths) // args.episodes)
        errs = []
        for path in paths[::step][: args.episodes]:
            obs = read_episode(path, ("obs",))["obs"][:: args.stride]
            x_hat = vae(obs).numpy()  # ConvVAE.call: decode(μ)
            errs.append(((obs / 255.0 - x_hat) ** 2).sum(axis=(1, 2, 3)))
        e = np.concatenate(errs) if errs else np.zeros(0)
        return {"episodes": len(errs), "frames": int(e.size), "recon": round(float(e.mean()), 2) if e.size else None}

    out = {"run": str(base.path), "vae_of": "first pass" if k == 0 else f"round{k}"}
    out["groups"] = {name: recon(paths) for name, paths in groups.items()}
    ref = out["groups"]["random_heldout"]["recon"]
    for g in out["groups"].values():
        g["vs_random_heldout"] = round(g["recon"] / ref, 2) if g["recon"] and ref else None
    print(json.dumps(out))


if __name__ == "__main__":
    main()
