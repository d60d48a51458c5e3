"""How well M's reward and done heads know the real game (issue 17): teacher-forced M over a run's recorded episodes.

For every episode of `<run>/series` (as M's trainer sees it: cut at its first termination when M has a done head),
M is run over the recorded z = μ and actions, and its reward head's prediction of each step is summed into a
predicted return beside the episode's real return. Episodes are grouped by who played them: the first
`collect.episodes` of the run the data started in are the random data policy's, the rest a trained C's (iterative
rounds). Per group: mean real and predicted return, their correlation over episodes, the mean error per step, and
for a done head how many real terminations it flags (logit > 0) and how many steps it flags that were not one.

A dream-trained C chases what the head over-pays: a predicted return far from the real one for the episodes C
plays, or a weak correlation, is the exploit to look for. Usage: `python bench/reward_calibration.py --run
runs/car-dream/round1`. Prints one JSON object. The heads are read from the run's M (`mdnrnn/model.json`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def predicted(m, mu, action, batch: int = 16):
    """Per-step (reward, done logit) lists of M teacher-forced over episodes (lists of (T, z), (T, A) arrays)."""
    import numpy as np
    import tensorflow as tf

    rewards, dones = [], []
    for i in range(0, len(mu), batch):
        group = list(range(i, min(i + batch, len(mu))))
        T = max(len(mu[j]) for j in group)
        z = np.zeros((len(group), T, mu[0].shape[1]), np.float32)
        a = np.zeros((len(group), T, action[0].shape[1]), np.float32)
        restart = np.zeros((len(group), T), np.float32)
        restart[:, 0] = 1.0
        for r, j in enumerate(group):
            z[r, : len(mu[j])], a[r, : len(mu[j])] = mu[j], action[j]
        out, _ = m(tf.constant(z), tf.constant(a), tf.constant(restart) if m.predict_done else None)
        rew = out.reward.numpy() if out.reward is not None else None
        logit = out.done_logit.numpy() if out.done_logit is not None else None
        for r, j in enumerate(group):
            n = len(mu[j])
            rewards.append(rew[r, :n] if rew is not None else None)
            dones.append(logit[r, :n] if logit is not None else None)
    return rewards, dones


def group_stats(real: list, pred: list, terminal: list, done_logit: list) -> dict:
    """`terminal[i]`: episode i ends by the env's termination (its last step the one real done)."""
    import numpy as np

    R = np.array([r.sum() for r in real])
    out = {"episodes": len(real), "real_return_mean": float(R.mean()), "real_return_std": float(R.std())}
    if pred[0] is not None:
        P = np.array([p.sum() for p in pred])
        err = np.concatenate([p - r for p, r in zip(pred, real, strict=True)])
        out |= {
            "pred_return_mean": float(P.mean()),
            "pred_return_std": float(P.std()),
            "return_corr": float(np.corrcoef(R, P)[0, 1]) if len(R) > 1 and R.std() > 0 and P.std() > 0 else None,
            "step_error_mean": float(err.mean()),
            "step_abs_error_mean": float(np.abs(err).mean()),
        }
    if done_logit[0] is not None:
        flagged = [d > 0 for d in done_logit]
        ends = sum(bool(t) for t in terminal)
        hit = sum(bool(f[-1]) and bool(t) for f, t in zip(flagged, terminal, strict=True))
        false = sum(int(f[:-1].sum()) + int(bool(f[-1]) and not t) for f, t in zip(flagged, terminal, strict=True))
        out |= {"terminations": ends, "terminations_flagged": hit, "false_done_steps": false}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True, help="a run (or round) directory with series/ and mdnrnn/")
    ap.add_argument("--max-episodes", type=int, default=0, help="per group, 0 = all")
    ap.add_argument(
        "--first", type=int, default=0, help="episodes of the data policy (default: the base run's collect.episodes)"
    )
    a = ap.parse_args()

    import numpy as np

    from wm import tf_setup
    from wm.data.sequences import load_series
    from wm.models.mdnrnn import load_mdnrnn
    from wm.rundir import RunDir

    tf_setup.setup()
    run = RunDir(a.run)
    cfg = run.load_config()
    if cfg is None or not run.mdnrnn_weights.exists():
        raise SystemExit(f"error: {a.run} is not a run with a trained M (config.yaml, {run.mdnrnn_weights})")
    m = load_mdnrnn(run.mdnrnn_weights)
    base = run.path.parent if run.path.name.startswith("round") else run.path
    first = a.first or int((RunDir(base).load_config() or cfg).collect.episodes)  # the data policy's come first
    # the episodes as M's trainer sees them (cut at the first termination with a done head; bad files skipped)
    s = load_series(run.series_dir, m.z_dim, m.action_dim, rewards=True, dones=m.predict_done)
    groups: dict[str, dict[str, list]] = {}
    for e, (start, n) in enumerate(zip(s.starts, s.lengths, strict=True)):
        g = groups.setdefault("random" if e < first else "agent", {"mu": [], "action": [], "reward": [], "end": []})
        if a.max_episodes and len(g["mu"]) >= a.max_episodes:
            continue
        sl = slice(start, start + n)
        g["mu"].append(s.mu[sl].astype(np.float32))
        g["action"].append(s.action[sl])
        g["reward"].append(s.reward[sl])
        g["end"].append(bool(s.terminal[e]) if s.terminal is not None else False)
    result = {"run": str(a.run), "heads": {"reward": m.predict_reward, "done": m.predict_done}, "bad_files": s.bad_files}
    for name, g in groups.items():
        pred, logits = predicted(m, g["mu"], g["action"])
        result[name] = group_stats(g["reward"], pred, g["end"], logits)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
