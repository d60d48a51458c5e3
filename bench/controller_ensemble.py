"""Several trained controllers play the real game as one agent (issue 22): `python bench/controller_ensemble.py
--member RUN[:PARAMS.npz] --member … --out FILE.jsonl`.

Each member is a C with the M it was trained in (a run or round directory; PARAMS defaults to its
`controller/best.npz`); all members must share one V (rounds link theirs). Per step V encodes the frame once, every
member's C acts on [z, its own M's c, h], the agent plays the mean of their tanh actions (`--rule mean`) or the mean
of their thresholded votes (`--rule vote`: −1, 0, +1 at DoomTakeCover's ±1/3), and every M is stepped with the action
played — each M follows the same game. Plays the first member's run's evaluation seeds (`--seed`, `--episodes`)
through `wm.rollout.RealEvaluator`, writes one JSON line per episode (`seed`, `return`, `length`, as
`eval/<tag>/episodes.jsonl`, so `python -m wm results --paired` reads it) and prints one JSON summary.

One member is the member's own evaluation bit for bit (seed 7's round 3: 717.8 either way); the README's
"Nor is an ensemble of controllers" has the measured ensembles.

    .venv/bin/python bench/controller_ensemble.py --member runs/s7-long/round3 --member runs/s7-long/round4 \\
        --out runs/screen/ens-c-s7-34.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RULES = ("mean", "vote")
VOTE_THRESHOLD = 1.0 / 3.0  # DoomTakeCover's action thresholds (wm/envs/doom.py)


class EnsembleM:
    """K Ms as one: the state is their (c, h) side by side; every M steps with the same z and the action played."""

    def __init__(self, ms: list[Any]):
        self.ms, self.z_dim, self.h1 = ms, ms[0].z_dim, ms[0].hidden
        self.hidden, self.predict_done = len(ms) * self.h1, ms[0].predict_done

    def part(self, x, k: int):
        return x[:, k * self.h1 : (k + 1) * self.h1]

    def step(self, z, a, state, restart=None, masks=None):
        import tensorflow as tf

        c, h = state
        out = [m.step(z, a, (self.part(c, k), self.part(h, k)), restart)[1] for k, m in enumerate(self.ms)]
        return None, (tf.concat([s[0] for s in out], -1), tf.concat([s[1] for s in out], -1))


class EnsembleC:
    """K controllers as one: params side by side; the action is the mean of their tanh actions (or of their votes)."""

    def __init__(self, controllers: list[Any], ens_m: EnsembleM, rule: str = "mean"):
        if rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
        self.cs, self.m, self.rule = controllers, ens_m, rule
        self.z_dim, self.hidden, self.action_dim = ens_m.z_dim, ens_m.hidden, controllers[0].action_dim
        self.sizes = [c.n_params for c in controllers]
        self.n_params = int(sum(self.sizes))

    def act_tf(self, params, z, c=None, h=None, postprocess: bool = True):
        import tensorflow as tf

        acts, o = [], 0
        for k, ctl in enumerate(self.cs):
            p = params[:, o : o + self.sizes[k]]
            o += self.sizes[k]
            a = ctl.act_tf(p, z, self.m.part(c, k), self.m.part(h, k), postprocess=False)
            if self.rule == "vote":
                a = tf.sign(a) * tf.cast(tf.abs(a) > VOTE_THRESHOLD, a.dtype)
            acts.append(a)
        return tf.add_n(acts) / len(acts)

    def postprocess_tf(self, a):
        return a  # DoomTakeCover's action goes to M and the env as is (§6)


def load_members(specs: list[str]) -> tuple[Any, Any, list[Any], list[Any], list[np.ndarray]]:
    """(config, V, Ms, Cs, params) of `RUN[:PARAMS]` specs; one clear line for a missing file or a different V."""
    from wm.errors import WMError
    from wm.rundir import RunDir, same_file
    from wm.world import load_world

    cfg0 = vae = None
    ms, cs, params = [], [], []
    for spec in specs:
        run_s, _, p = spec.partition(":")
        run = RunDir(run_s)
        cfg = run.load_config()
        if cfg is None:
            raise WMError(f"--member {spec}: {run_s} has no config.yaml (a finished run or round directory)")
        if cfg0 is None:
            cfg0 = cfg
        elif not same_file(run.vae_weights, RunDir(specs[0].partition(":")[0]).vae_weights):
            raise WMError(f"--member {spec}: its V differs from the first member's (the members must share one V)")
        w = load_world(cfg, run, need=("mdnrnn", "params") + (() if vae is not None else ("vae",)), params=p or "best")
        vae = vae if vae is not None else w.vae
        ms.append(w.mdnrnn)
        cs.append(w.controller)
        params.append(w.params)
    return cfg0, vae, ms, cs, params


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--member", action="append", required=True, help="RUN[:PARAMS.npz] (default params: best)")
    ap.add_argument("--rule", choices=RULES, default="mean")
    ap.add_argument("--seed", type=int, default=None, help="first evaluation seed (default: the first run's)")
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--envs", type=int, default=8, help="envs stepped together")
    ap.add_argument("--out", required=True, help="episodes file (JSON lines)")
    a = ap.parse_args(argv)

    from wm import tf_setup
    from wm.errors import WMError
    from wm.evaluation import seed_list, summarize
    from wm.rollout import RealEvaluator
    from wm.rundir import atomic_write_text

    tf_setup.setup()  # before any model is built: the device decision (a GPU when TF sees one)
    try:
        cfg, vae, ms, cs, params = load_members(a.member)
    except WMError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    ens_m = EnsembleM(ms)
    ev = RealEvaluator(cfg, vae, ens_m, EnsembleC(cs, ens_m, a.rule), n_envs=a.envs)
    seeds = seed_list(cfg, a.episodes, a.seed)
    t = time.time()
    try:
        returns, lengths = ev.evaluate(np.concatenate(params)[None], np.asarray(seeds)[None])
    finally:
        ev.close()
    lines = [
        json.dumps({"episode": i, "seed": int(s), "return": float(r), "length": int(n)})
        for i, (s, r, n) in enumerate(zip(seeds, returns[0], lengths[0], strict=True))
    ]
    atomic_write_text(Path(a.out), "\n".join(lines) + "\n")
    summary = summarize(returns[0], lengths[0])
    took = round(time.time() - t)
    print(json.dumps({"bench": "controller_ensemble", "members": a.member, "rule": a.rule, "seconds": took, **summary}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
