"""How far ahead M's dream pays what the game paid (issue 17): M run free from recorded mid-episode states.

`bench/reward_calibration.py` feeds M the recorded frames (teacher-forced). A C trained in the dream meets M running
on its own samples. This bench draws `--states` recorded states, frame t0 of the run's newest `--episodes`
episodes, with M's (c, h) teacher-forced to it: the table `dream.branch_share` starts dreams from
(`wm.dream.branch_states`). From each state M runs free for H steps at `dream.temperature`, with the episode's
recorded actions and the dream's own step function (its dropout masks, one per state). Each H of `--windows` is
reported over the states whose episode has H more recorded steps:
- the real return of those H steps and M's predicted return, mean over states;
- their correlation over states, i.e. whether the dream ranks situations as the game did;
- the mean error per step;
- the same M fed the recorded z's instead of its own (`forced_*`): how much of the gap is the head's, how much the
  free-running dream's drift.

The recorded actions are open-loop: a dream-trained C acts on the dreamed z instead. Still, a window past which
the correlation is gone is one where no C can learn from M's reward (`dream.branch_steps`). Usage:
`python bench/window_calibration.py --run runs/car0d-b --windows 25 50 100 200 400`. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def window_stats(real, pred) -> dict:
    """Per window H: real (N, H) and predicted (N, H) rewards of N states → the figures in the module's docstring."""
    import numpy as np

    R, P = real.sum(1), pred.sum(1)
    ok = len(R) > 1 and R.std() > 0 and P.std() > 0
    return {
        "states": len(R),
        "real_return_mean": float(R.mean()),
        "pred_return_mean": float(P.mean()),
        "return_corr": float(np.corrcoef(R, P)[0, 1]) if ok else None,
        "step_error_mean": float((pred - real).mean()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True, help="a run (or round) directory with series/ and a reward-head M")
    ap.add_argument("--windows", type=int, nargs="+", default=[25, 50, 100, 200, 400])
    ap.add_argument("--states", type=int, default=1024)
    ap.add_argument("--episodes", type=int, default=200, help="the newest N episodes of series/ (0 = all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--temperature", type=float, default=None, help="τ of the free run (default: dream.temperature)")
    a = ap.parse_args()
    if min(a.windows) < 1 or a.states < 2:
        raise SystemExit("error: --windows must be ≥ 1 and --states ≥ 2")

    import numpy as np
    import tensorflow as tf

    from wm import tf_setup
    from wm.data.sequences import load_series
    from wm.dream import DreamEnv, branch_states, dream_options
    from wm.errors import WMError
    from wm.rundir import RunDir
    from wm.world import load_world

    tf_setup.setup()
    run = RunDir(a.run)
    cfg = run.load_config()
    if cfg is None or not run.mdnrnn_weights.exists():
        raise SystemExit(f"error: {a.run} is not a run with a trained M (config.yaml, {run.mdnrnn_weights})")
    world = load_world(cfg, run, need=("mdnrnn", "initial_z"))
    m = world.mdnrnn
    if not m.predict_reward:
        raise SystemExit(f"error: {a.run}'s M has no reward head (mdnrnn.predict_reward)")
    s = load_series(run.series_dir, m.z_dim, m.action_dim, rewards=True, dones=m.predict_done)
    try:
        b = branch_states(m, s, a.states, a.episodes, a.seed)
    except WMError as e:
        raise SystemExit(f"error: {e}") from None
    # the dream's step function (τ, dropout masks per state) with the recorded actions fed in; its done flags are not
    # read (a window runs on the recorded steps), and its starts are the states above, not the run's branch settings
    tau = cfg.dream.temperature if a.temperature is None else a.temperature
    opts = dream_options(cfg) | {"branch_share": 0.0, "branch_steps": 0}
    core = DreamEnv(world.mdnrnn, world.controller, world.initial_mu, world.initial_logvar, tau, cfg.dream.max_steps,
                    **opts).core  # fmt: skip
    n, top = len(b.t0), max(a.windows)
    seeds = tf.constant(np.arange(n, dtype=np.int64) + 1_000_003 * (a.seed + 1))
    masks = core.masks(seeds)
    rng = np.random.default_rng(a.seed)
    z = tf.constant(b.mu + b.sigma * rng.standard_normal(b.mu.shape).astype(np.float32))
    c, h, off = tf.constant(b.c), tf.constant(b.h), tf.constant(b.t0)
    rows = s.starts[b.episode] + b.t0  # the state's frame in the series
    left = s.lengths[b.episode] - b.t0  # recorded steps from t0 on (frame t0's action and reward included)
    step = tf.function(lambda t, z, c, h, act: core.step(None, seeds, t, z, c, h, action=act, masks=masks, off=off))
    pred, forced = np.zeros((n, top), np.float32), np.zeros((n, top), np.float32)
    fc, fh = c, h  # the same M fed the recorded z's (teacher-forced): the head's own error, without the drift
    for t in range(top):
        frame = np.minimum(rows + t, len(s.action) - 1)
        tt, act = tf.constant(t, tf.int64), tf.constant(s.action[frame].astype(np.float32))
        z, c, h, _, _, r, _ = step(tt, z, c, h, act)
        pred[:, t] = r.numpy()
        _, fc, fh, _, _, r, _ = step(tt, tf.constant(s.mu[frame].astype(np.float32)), fc, fh, act)
        forced[:, t] = r.numpy()
    real = s.reward[np.minimum(rows[:, None] + np.arange(top)[None], len(s.reward) - 1)]
    out = {"run": str(a.run), "temperature": float(tau), "dropout": float(m.dropout), "windows": {}}
    for w in sorted(a.windows):
        keep = left >= w
        if keep.sum() < 2:
            out["windows"][str(w)] = {"states": int(keep.sum())}
            continue
        tf_stats = window_stats(real[keep, :w], forced[keep, :w])
        out["windows"][str(w)] = window_stats(real[keep, :w], pred[keep, :w]) | {
            "forced_return_mean": tf_stats["pred_return_mean"],
            "forced_return_corr": tf_stats["return_corr"],
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
