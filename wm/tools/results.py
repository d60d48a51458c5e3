"""`python -m wm results --runs runs/s0 runs/s1 runs/s2`: several runs (seeds) gathered into one table.

    python -m wm results --runs runs/s0 runs/s1 runs/s2                       # → results/results.{md,json}
    python -m wm results --runs runs/s0 runs/s1 --frozen runs/s3 --out paper/  # rows of a frozen recipe too
    python -m wm results --runs runs/s0 runs/s1 runs/s2 --plot                # + results/results.png
    python -m wm results --paired runs/s6 runs/s6-v3 --paired runs/s6/round4 runs/s6-v3  # B − A, paired by seed

One row per run, then an "all runs" row; the Markdown table is printed and written with a JSON of every figure.
`--plot` also writes `results.png` (`wm.tools.plots.results_figure`): each run's mean with its bootstrap 95 % CI as
error bars, the random policy's mean beside it where recorded, and the pooled mean over the runs as a line.

A run's row is its result C's evaluation `eval/<tag>/` (`--tag`, default `real`). Which C is the result: with
iterative training under round control, the pass named by round control's record (`wm.rounds.record.round_checks`);
rounds without that record: the last round with an `eval/<tag>` summary; no rounds: the run itself. Per row: the
episodes, mean ± std (`np.std`, ddof 0, the paper's ± of §9, as `wm.rollouts.evaluation.summarize`), median, a percentile
bootstrap 95 % CI of the mean, and the random policy's mean ± std from the base run's `eval/random/` (written by
`evaluate --random`, or the pipeline's `--demo`) with the ratio mean / random mean (only where the random mean is
positive: none for CarRacing). A random baseline played on other seeds than C's evaluation is still shown, but the
row's note says so.

The aggregate rows: the mean over runs of the per-run means, their std over runs (`np.std`, ddof 0, like every ±
of the suite), the smallest per-run mean, and a hierarchical bootstrap 95 % CI (`hierarchical_ci`): each resample
draws the runs with replacement, then, within every drawn run, its episodes with replacement, and takes the mean
over the drawn runs of their resampled episode means (for runs of equal episode counts, the protocol's case, this is
the mean over all resampled episodes pooled). It covers both sources of spread: seed to seed, and episode to episode.
The JSON also holds the aggregate over the non-frozen runs and over the `--frozen` (frozen recipe) runs on their own.

`--paired A B` (repeatable) compares two controllers played on the same evaluation seeds, one row per pair
(`paired.md`, `paired.json`): each side is resolved to its result C as above (a round's own directory names that
round), episodes are matched by seed, and the row gives both means over the matched episodes, the mean difference
B − A with its paired standard error (std of the differences, ddof 1, over √n: the "paired SE" of the results pages'
tables), a percentile bootstrap 95 % CI of the mean difference, and the correlation of the two sides' returns. On the
same seeds the game's own episode-to-episode spread cancels in part, so a paired SE is smaller than the unpaired one.

Pure NumPy and JSON, no TensorFlow. The bootstrap is a plain percentile bootstrap with `np.random.default_rng(seed)`:
SciPy's `stats.bootstrap` would do the same and is not installed (40 MB for two percentiles is not worth it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from wm.core.atomic import atomic_write_json, atomic_write_text
from wm.core.bounded import read_json_or, read_jsonl
from wm.core.errors import WMError
from wm.core.rundir import RunDir

RESULTS_MD = "results.md"
RESULTS_JSON = "results.json"
RESULTS_PNG = "results.png"  # --plot: each run's mean and CI, the random policy's, the pooled mean (wm.tools.plots)
PAIRED_MD = "paired.md"
PAIRED_JSON = "paired.json"
RANDOM_TAG = "random"  # `evaluate --random`'s default tag
CI = 0.95
FEW_EPISODES = 20  # a row on fewer episodes says its CI is rough
SAME_SETTING = ("env.name", "env.max_steps")  # every run of one table shares these
_CHUNK = 4_000_000  # indices drawn at once by the bootstrap (32 MB of int64), so 10k episodes × 10k resamples fit


# ---------------------------------------------------------------- statistics


def _boot_means(rng: np.random.Generator, x: np.ndarray, k: int) -> np.ndarray:
    """`k` bootstrap means of `x`: each the mean of len(x) draws from x with replacement."""
    n = x.size
    out = np.empty(k)
    step = max(1, _CHUNK // n)
    for i in range(0, k, step):
        m = min(step, k - i)
        out[i : i + m] = x[rng.integers(0, n, size=(m, n))].mean(axis=1)
    return out


def _percentiles(stats: np.ndarray, level: float = CI) -> tuple[float, float]:
    a = (1 - level) / 2 * 100
    lo, hi = np.percentile(stats, [a, 100 - a])
    return float(lo), float(hi)


def bootstrap_ci(x: np.ndarray, resamples: int = 10000, seed: int = 0, level: float = CI) -> tuple[float, float]:
    """Percentile bootstrap CI (default 95 %) of the mean of `x`: `resamples` resamples of len(x) with replacement."""
    x = np.asarray(x, float)
    if x.size == 0:
        raise WMError("no episodes to bootstrap")
    return _percentiles(_boot_means(np.random.default_rng(seed), x, resamples), level)


def hierarchical_ci(runs: list[np.ndarray], resamples: int = 10000, seed: int = 0, level: float = CI) -> tuple[float, float]:
    """Hierarchical percentile bootstrap CI (default 95 %) of the mean over runs of the per-run mean returns.

    Each of the `resamples` resamples draws R of the R runs with replacement (a run may come twice, another not at
    all), then for every drawn run len(run) of its episodes with replacement (independently for a run drawn twice),
    and its statistic is the mean over the R drawn runs of their resampled episode means. With one run it is the
    plain bootstrap of that run's mean (R = 1 draws the same run every time).
    """
    xs = [np.asarray(x, float) for x in runs]
    if not xs or any(x.size == 0 for x in xs):
        raise WMError("no episodes to bootstrap")
    rng = np.random.default_rng(seed)
    r = len(xs)
    pick = rng.integers(0, r, size=(resamples, r))  # the runs of each resample
    means = np.empty((resamples, r))
    for i, x in enumerate(xs):  # every slot holding run i gets its own episode resample of run i
        slots = pick == i
        means[slots] = _boot_means(rng, x, int(slots.sum()))
    return _percentiles(means.mean(axis=1), level)


# ---------------------------------------------------------------- reading runs


def _load_json(path: Path) -> dict[str, Any] | None:
    doc = read_json_or(path)
    return doc if isinstance(doc, dict) else None


def _episode_returns(where: RunDir, tag: str, label: str) -> tuple[dict[str, Any], np.ndarray, list[int]]:
    """(summary, returns, seeds) of `eval/<tag>` of `where`; WMError naming `label` when missing or inconsistent."""
    path = where.eval_summary(tag)
    summary = _load_json(path)
    if summary is None:
        raise WMError(f"{label}: no eval/{tag} summary at {path} (run `python -m wm evaluate --run {where.path}` first)")
    lines = [e for e in read_jsonl(where.eval_episodes(tag)) if isinstance(e, dict) and "return" in e]
    if not lines:
        raise WMError(f"{label}: no episodes in {where.eval_episodes(tag)}")
    if int(summary.get("episodes", len(lines))) != len(lines):
        raise WMError(
            f"{label}: {where.eval_episodes(tag)} holds {len(lines)} episodes, its summary {summary.get('episodes')}; "
            "rerun the evaluation"
        )
    returns = np.array([float(e["return"]) for e in lines])
    seeds = [int(e["seed"]) for e in lines if "seed" in e]
    return summary, returns, seeds


def _result_episodes(
    path: str, tag: str
) -> tuple[RunDir, Any, tuple[str, RunDir, str], dict[str, Any], np.ndarray, list[int]]:
    """(run dir, config, (name, where, chosen), summary, returns, seeds) of the result C of the run at `path`."""
    base = RunDir(path)
    if not base.path.is_dir():
        raise WMError(f"{path}: not a run directory (no such folder)")
    cfg = base.load_config()
    if cfg is None:
        raise WMError(f"{path}: not a run directory (no {base.config_path.name})")
    from wm.rounds.record import result_pass

    picked = result_pass(base, tag)
    summary, returns, seeds = _episode_returns(picked[1], tag, f"{path} ({picked[0]})")
    return base, cfg, picked, summary, returns, seeds


def run_row(path: str, tag: str, random_tag: str, frozen: bool, resamples: int, seed: int) -> dict[str, Any]:
    """Every figure of one run's row; `returns` (the result C's episode returns) is dropped before the JSON."""
    base, cfg, (name, where, chosen), summary, returns, seeds = _result_episodes(path, tag)
    lo, hi = bootstrap_ci(returns, resamples, seed)
    notes = []
    random = None
    rsum = _load_json(base.eval_summary(random_tag))
    if rsum is None:
        notes.append(f"no random baseline (eval/{random_tag}: `evaluate --random`)")
    else:
        random = {k: float(rsum[k]) for k in ("mean", "std")} | {"episodes": int(rsum.get("episodes", 0))}
        rseeds = [int(s) for s in rsum.get("seeds", [])]
        cseeds = seeds or [int(s) for s in summary.get("seeds", [])]
        random["same_seeds"] = rseeds == cseeds
        if not random["same_seeds"]:
            notes.append(f"random baseline on other seeds ({_seed_span(rseeds)}) than C ({_seed_span(cseeds)})")
    if returns.size < FEW_EPISODES:
        notes.append(f"only {returns.size} episodes: the CI is rough (the protocol plays 100)")
    ratio = times(float(returns.mean()), None if random is None else random["mean"])
    return {
        "run": path,
        "seed": cfg.run.seed,
        "setting": {k: cfg[k] for k in SAME_SETTING},
        "frozen": frozen,
        "result": {"name": name, "path": str(where.path), "chosen_by": chosen},
        "episodes": int(returns.size),
        "mean": float(returns.mean()),
        "std": float(returns.std()),
        "median": float(np.median(returns)),
        "ci95": [lo, hi],
        "random": random,
        "ratio": ratio,
        # how CarRacing's episodes were driven (wm.rollouts.evaluation.drive_summary), None for other envs
        "drive": summary.get("drive") if isinstance(summary.get("drive"), dict) else None,
        "note": "; ".join(notes),
        "returns": returns,
    }


def times(mean: float, random_mean: float | None) -> float | None:
    """C's mean as a multiple of the random policy's: only where the random mean is positive (Doom's steps survived);
    a ratio to a negative mean (CarRacing's random policy scores about −27) reads backwards, so none is given."""
    return mean / random_mean if random_mean is not None and random_mean > 0 else None


def _seed_span(seeds: list[int]) -> str:
    if not seeds:
        return "no seeds"
    return f"{len(seeds)} seeds {seeds[0]}…{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"


def aggregate(rows: list[dict[str, Any]], resamples: int, seed: int) -> dict[str, Any] | None:
    """The aggregate of `rows` (module docstring); None for fewer than two rows (a spread over one run is no spread)."""
    if len(rows) < 2:
        return None
    means = np.array([r["mean"] for r in rows])
    lo, hi = hierarchical_ci([r["returns"] for r in rows], resamples, seed)
    randoms = [r["random"]["mean"] for r in rows if r["random"] is not None]
    random_mean = float(np.mean(randoms)) if len(randoms) == len(rows) else None
    return {
        "runs": len(rows),
        "episodes": int(sum(r["episodes"] for r in rows)),
        "mean": float(means.mean()),
        "std": float(means.std()),
        "min": float(means.min()),
        "max": float(means.max()),
        "ci95": [lo, hi],
        "ci95_method": "hierarchical percentile bootstrap: runs, then episodes within each run, with replacement",
        "random_mean": random_mean,
        "ratio": times(float(means.mean()), random_mean),
    }


def gather(
    runs: list[str], frozen: list[str], tag: str = "real", random_tag: str = RANDOM_TAG, resamples: int = 10000, seed: int = 0
) -> dict[str, Any]:
    """Read every run and compute every figure; nothing is written (a WMError names the first bad run)."""
    if not runs and not frozen:
        raise WMError("no runs given: pass run directories with --runs (and/or --frozen)")
    if resamples < 100:
        raise WMError(f"--resamples must be >= 100, got {resamples}")
    seen: dict[Path, str] = {}
    for p in [*runs, *frozen]:
        key = Path(p).resolve()
        if key in seen:
            raise WMError(f"{p}: given twice (also as {seen[key]}); each run may count once in the aggregate")
        seen[key] = p
    rows = [run_row(p, tag, random_tag, False, resamples, seed) for p in runs]
    rows += [run_row(p, tag, random_tag, True, resamples, seed) for p in frozen]
    for key in SAME_SETTING:  # one table compares one game under one cap: a mixed one would average apples and pears
        values = {str(r["setting"][key]) for r in rows}
        if len(values) > 1:
            where = ", ".join(f"{r['setting'][key]} in {r['run']}" for r in rows)
            raise WMError(f"the runs differ in {key} ({where}): gather runs of one setting per table")
    doc = {
        "tag": tag,
        "random_tag": random_tag,
        "resamples": resamples,
        "bootstrap_seed": seed,
        "ci_level": CI,
        "std": "np.std (ddof 0): over episodes per run, over the per-run means in the aggregates",
        "aggregate": {
            "all": aggregate(rows, resamples, seed),
            "non_frozen": aggregate([r for r in rows if not r["frozen"]], resamples, seed),
            "frozen": aggregate([r for r in rows if r["frozen"]], resamples, seed),
        },
        "runs": [{k: v for k, v in r.items() if k != "returns"} for r in rows],
    }
    return doc


def paired_row(a: str, b: str, tag: str = "real", resamples: int = 10000, seed: int = 0) -> dict[str, Any]:
    """B − A over the episode seeds both result C's played (module docstring); WMError when they share < 2 seeds."""
    sides = []
    for path in (a, b):
        _, _, (name, where, _), _, returns, seeds = _result_episodes(path, tag)
        if len(seeds) != returns.size or len(set(seeds)) != len(seeds):
            raise WMError(f"{path} ({name}): eval/{tag} episodes lack distinct seeds; rerun the evaluation to pair them")
        sides.append((name, where, dict(zip(seeds, returns.tolist(), strict=True))))
    (na, wa, ra), (nb, wb, rb) = sides
    common = sorted(set(ra) & set(rb))
    if len(common) < 2:
        raise WMError(
            f"{a} and {b} share {len(common)} evaluation seeds ({_seed_span(sorted(ra))} vs {_seed_span(sorted(rb))}); "
            "a paired comparison needs both played on the same seeds"
        )
    x = np.array([ra[k] for k in common])
    y = np.array([rb[k] for k in common])
    d = y - x
    lo, hi = bootstrap_ci(d, resamples, seed)
    corr = float(np.corrcoef(x, y)[0, 1]) if x.std() > 0 and y.std() > 0 else None
    return {
        "a": {"run": a, "result": na, "path": str(wa.path), "episodes": len(ra), "mean": float(x.mean())},
        "b": {"run": b, "result": nb, "path": str(wb.path), "episodes": len(rb), "mean": float(y.mean())},
        "matched": len(common),
        "seeds": _seed_span(common),
        "diff": float(d.mean()),
        "paired_se": float(d.std(ddof=1) / np.sqrt(d.size)),
        "ci95": [lo, hi],
        "corr": corr,
    }


def gather_paired(pairs: list[list[str]], tag: str = "real", resamples: int = 10000, seed: int = 0) -> dict[str, Any]:
    """One row per (A, B) pair; nothing is written (a WMError names the first bad pair)."""
    if resamples < 100:
        raise WMError(f"--resamples must be >= 100, got {resamples}")
    rows = [paired_row(a, b, tag, resamples, seed) for a, b in pairs]
    return {"tag": tag, "resamples": resamples, "bootstrap_seed": seed, "ci_level": CI, "pairs": rows}


# ---------------------------------------------------------------- the table


def _f(v: float | None) -> str:
    return "—" if v is None else f"{v:.1f}"


def _ci(c: list[float]) -> str:
    return f"[{c[0]:.1f}, {c[1]:.1f}]"


def format_table(doc: dict[str, Any]) -> str:
    """The Markdown table: one row per run, then the all-runs row (and the two groups' rows when both exist)."""
    out = [
        "| run | seed | C | recipe | episodes | mean ± std | median | 95 % CI of the mean | random mean ± std | "
        "mean / random | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["runs"]:
        rnd = r["random"]
        random = "—" if rnd is None else f"{rnd['mean']:.1f} ± {rnd['std']:.1f}"
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}×"
        out.append(
            f"| {r['run']} | {r['seed']} | {r['result']['name']} | {'frozen recipe' if r['frozen'] else ''} | "
            f"{r['episodes']} | {r['mean']:.1f} ± {r['std']:.1f} | {r['median']:.1f} | {_ci(r['ci95'])} | {random} | "
            f"{ratio} | {r['note']} |"
        )
    agg = doc["aggregate"]
    groups = [("all runs", agg["all"], "")] if agg["all"] else []
    if agg["non_frozen"] and agg["frozen"]:
        groups += [("non-frozen runs", agg["non_frozen"], ""), ("frozen recipe runs", agg["frozen"], "frozen recipe")]
    for label, a, recipe in groups:
        ratio = "—" if a["ratio"] is None else f"{a['ratio']:.2f}×"
        out.append(
            f"| **{label} ({a['runs']})** | | | {recipe} | {a['episodes']} | **{a['mean']:.1f} ± {a['std']:.1f}** | | "
            f"{_ci(a['ci95'])} | {_f(a['random_mean'])} | {ratio} | min run mean {a['min']:.1f} |"
        )
    driven = [r for r in doc["runs"] if r.get("drive")]
    if driven:  # CarRacing: a slow car and a crashing one can score alike
        out += [
            "",
            "| run | laps finished | median steps of a lap | tiles visited | off track an episode | speed | gas | brake |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in driven:
            d = r["drive"]
            steps = f"{d['lap_steps']:.0f}" if d.get("laps") else "—"
            out.append(
                f"| {r['run']} | {d.get('laps', 0)} of {r['episodes']} | {steps} | {100 * d.get('tiles', 0):.1f} % | "
                f"{d.get('off_track', 0):.2f} | {d.get('speed', 0):.1f} | {d.get('gas', 0):.2f} | {d.get('brake', 0):.2f} |"
            )
    out += [
        "",
        f"C's evaluation `eval/{doc['tag']}`; ± is `np.std` over episodes in a run's row and over the per-run means in "
        f"the aggregate rows. 95 % CIs: percentile bootstrap of the mean ({doc['resamples']} resamples, seed "
        f"{doc['bootstrap_seed']}); for the aggregates hierarchical (runs, then episodes within each run, resampled). "
        f"Random: the random policy on the run's evaluation seeds (`eval/{doc['random_tag']}`).",
    ]
    return "\n".join(out) + "\n"


def format_paired(doc: dict[str, Any]) -> str:
    """The Markdown table of `--paired`: one row per pair."""
    out = [
        "| A | B | episodes paired | A mean | B mean | B − A (paired SE) | 95 % CI of B − A | correlation |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["pairs"]:
        a, b = r["a"], r["b"]
        corr = "—" if r["corr"] is None else f"{r['corr']:.2f}"
        out.append(
            f"| {a['run']} ({a['result']}) | {b['run']} ({b['result']}) | {r['matched']} ({r['seeds']}) | "
            f"{a['mean']:.1f} | {b['mean']:.1f} | **{r['diff']:+.1f}** (± {r['paired_se']:.1f}) | {_ci(r['ci95'])} | "
            f"{corr} |"
        )
    out += [
        "",
        f"C's evaluation `eval/{doc['tag']}` of each side's result C, episodes matched by seed; the means are over the "
        "matched episodes. Paired SE: std of the per-seed differences (ddof 1) / √n. 95 % CI: percentile bootstrap of "
        f"the mean difference ({doc['resamples']} resamples, seed {doc['bootstrap_seed']}).",
    ]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- CLI


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", nargs="+", default=[], metavar="RUN", help="run directories, one row each (e.g. one per seed)")
    p.add_argument("--frozen", nargs="+", default=[], metavar="RUN", help="runs of a frozen recipe: rows marked so")
    p.add_argument(
        "--paired",
        nargs=2,
        action="append",
        default=[],
        metavar=("A", "B"),
        help="compare two runs' result C's on their shared evaluation seeds: B − A with its paired SE (repeatable)",
    )
    p.add_argument(
        "--out",
        default="results",
        help=f"folder for {RESULTS_MD} and {RESULTS_JSON} ({PAIRED_MD}, {PAIRED_JSON} with --paired; default: ./results)",
    )
    p.add_argument("--tag", default="real", help="C's evaluation to gather, eval/<tag> (default: real)")
    p.add_argument("--random-tag", default=RANDOM_TAG, help=f"the random baseline's eval/<tag> (default: {RANDOM_TAG})")
    p.add_argument("--resamples", type=int, default=10000, help="bootstrap resamples (default: 10000)")
    p.add_argument("--bootstrap-seed", type=int, default=0, help="seed of the bootstrap's generator (default: 0)")
    p.add_argument(
        "--plot",
        action="store_true",
        help=f"also write <out>/{RESULTS_PNG}: each run's mean with its 95 %% CI, the random policy's, the pooled mean",
    )


def main(args: argparse.Namespace) -> int:
    if args.paired:
        if args.runs or args.frozen:
            raise WMError("--paired makes its own table: give it without --runs/--frozen")
        if args.plot:
            raise WMError("--plot draws the --runs table: give it without --paired")
        doc = gather_paired(args.paired, args.tag, args.resamples, args.bootstrap_seed)
        table, names = format_paired(doc), (PAIRED_MD, PAIRED_JSON)
    else:
        doc = gather(args.runs, args.frozen, args.tag, args.random_tag, args.resamples, args.bootstrap_seed)
        table, names = format_table(doc), (RESULTS_MD, RESULTS_JSON)
    few = [r["run"] for r in doc.get("runs", []) if r["episodes"] < FEW_EPISODES]
    if few:
        print(f"warning: fewer than {FEW_EPISODES} episodes in {', '.join(few)}: their CIs are rough", file=sys.stderr)
    out = Path(args.out)
    atomic_write_json(out / names[1], doc)
    atomic_write_text(out / names[0], table)
    written = [out / names[0], out / names[1]]
    if args.plot:
        from wm.tools.plots import results_plot

        written.append(results_plot(out / RESULTS_PNG, doc))
    sys.stdout.write(table)
    print(f"\nwritten: {', '.join(str(p) for p in written)}")
    return 0
