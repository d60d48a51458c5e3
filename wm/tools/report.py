"""`python -m wm report --run runs/doom`: one Markdown page per run, `report.md`, plus PNG curves in `plots/`.

Reads the run directory only (config.yaml, DONE files, metrics/*.jsonl, eval/*/summary.json, the images the stages
wrote); never imports TensorFlow. Sections: config summary, each stage's state, key figures and time, the
evaluation table against the paper's numbers (docs/paper-settings.md §9), the τ sweep when there is one, training
curves (V loss, M NLL, CMA-ES mean/best/eval per generation) and links to the images. Every link is relative and
points to a file that exists when the report is written. The figures (`wm.tools.plots`, matplotlib): the training
curves, `plots/rounds.png` (each pass's dream score and real check, under round control) and
`plots/temperature_sweep.png` (dream and real score against τ, the paper's points beside).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from wm.core.atomic import atomic_write_text
from wm.core.bounded import read_json_or, read_jsonl
from wm.core.commands import missing_run
from wm.core.errors import WMError
from wm.core.format import duration, figures, number
from wm.core.registry import STAGES, plots
from wm.core.rundir import RunDir, round_dirs
from wm.envs.setup import family_of
from wm.rollouts.evaluation import format_drive, pm
from wm.rounds.iterate import evaluates_result_only
from wm.tools.paper import PAPER_DOOM, paper_row
from wm.tools.results import FEW_EPISODES

CONFIG_KEYS = (
    "env.name",
    "env.preprocess",
    "env.max_steps",
    "collect.episodes",
    "vae.z_dim",
    "vae.epochs",
    "mdnrnn.hidden",
    "mdnrnn.num_mixtures",
    "mdnrnn.epochs",
    "controller.mode",
    "dream.temperature",
    "es.fitness",
    "es.popsize",
    "es.trials",
    "es.generations",
    "evaluate.episodes",
    "run.seed",
)
IMAGES = (
    ("V reconstructions (originals over reconstructions)", "reconstructions"),
    ("Dream rollouts of M with random actions, decoded by V", "dream_preview"),
)  # (title, artifact key)
ROUNDS_PNG = "rounds.png"  # plots/: each pass's checks (iterative training)
SWEEP_PNG = "temperature_sweep.png"  # plots/: the τ sweep


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="run directory")


def series_of(records: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of one metric key, sorted by step; a step logged twice (a resumed run) keeps the last value."""
    by_step: dict[float, float] = {}
    for r in records:
        if key in r and "step" in r:
            try:
                by_step[float(r["step"])] = float(r[key])
            except (TypeError, ValueError):
                continue
    xs = sorted(by_step)
    return xs, [by_step[x] for x in xs]


def make_plots(run: RunDir) -> list[tuple[str, Path]]:
    """Write the training-curve PNGs that have data; returns [(title, path)]. A curve its preset's recorded runs
    have (`wm reference`) is drawn over their span, shaded."""
    from wm.tools.plots import line_plot
    from wm.tools.reference import band, match

    cfg = run.load_config()
    ref = match(cfg) if cfg is not None else None
    out = []
    for st, plot in plots():
        records = read_jsonl(run.metrics_path(st.verb))
        series = {name: series_of(records, key) for name, key in plot.series}
        series = {k: v for k, v in series.items() if v[0]}
        if not series:
            continue
        spans = {f"{name}: recorded runs": band(ref, key) for name, key in plot.series if ref and name in series}
        path = run.plots_dir / plot.file
        line_plot(path, series, title=plot.title, xlabel=plot.xlabel, bands={k: v for k, v in spans.items() if v})
        out.append((plot.title, path))
    return out


def pipeline_timings(run: RunDir) -> dict[str, Any]:
    """Stage times of every pipeline command on this run, merged in order: a resumed run's later command records
    only what it ran (its rounds), so the earlier commands' times still count; a stage run again takes its latest
    time. `total_s` is the sum over the commands."""
    merged: dict[str, Any] = {}
    total = 0.0
    for rec in read_jsonl(run.timings_path):
        total += float(rec.get("total_s", 0.0))
        merged.update(rec)
    if merged:
        merged["total_s"] = total
    return merged


def stage_time(run: RunDir, verb: str, pipeline: dict[str, Any]) -> float | None:
    """Wall time of a stage: the pipeline's timing (`pipeline_timings`), else the span of its metrics records up to its DONE
    (side runs after it, such as later evaluations, are not the stage's time)."""
    if verb in pipeline:
        return float(pipeline[verb])
    done = run.stage_dir(verb) / "DONE"
    end = done.stat().st_mtime if done.exists() else float("inf")
    recs = [r for r in read_jsonl(run.metrics_path(verb)) if "time" in r and r["time"] <= end]
    return recs[-1]["time"] - recs[0]["time"] if len(recs) >= 2 else None


def pass_stage_time(where: RunDir, verb: str, pipeline: dict[str, Any], prefix: str = "") -> float | None:
    """`stage_time` of one stage of a pass: the pipeline's timing under `prefix` ("round k/"; "" for the first pass),
    else the stage's metrics span."""
    own = {k.removeprefix(prefix): v for k, v in pipeline.items() if k.startswith(prefix)} if prefix else pipeline
    return stage_time(where, verb, own)


def pass_time(where: RunDir, pipeline: dict[str, Any], prefix: str = "") -> float | None:
    """Wall time of one pass, the sum of its stages' (`stage_time`): the pipeline's timing under `prefix` ("round k/")
    where a command recorded it, else the stage's metrics span. A run killed and resumed records only the later
    command's stages, so without the fallback a round run before the kill read "—" and one cut by it only its last
    stage (seed 1's round 2: 39 s of ≈ 8 min)."""
    secs = [t for st in STAGES if (t := pass_stage_time(where, st.verb, pipeline, prefix)) is not None]
    return sum(secs) if secs else None


def rounds_section(run: RunDir, pipeline: dict[str, Any]) -> list[str]:
    """Every pass of iterative training side by side: the 100-episode real and dream scores, round control's checks,
    the pass's time, and which C is the run's result."""
    from wm.rounds.record import final_more_episodes, pass_name, result_pass, round_checks

    rounds = [RunDir(p) for p in round_dirs(run.path)]
    if not rounds:
        return []
    checks = round_checks(run)
    by_name = {c["name"]: c for c in (checks or {}).get("passes", [])}

    def more(c: dict[str, Any]) -> str:  # " (300)" after a final check `iterate.final_more` lengthened
        n = final_more_episodes(c, checks or {})
        return f" ({n})" if n else ""

    result = result_pass(run)[1].path
    lines = [
        "",
        "## Iterative training",
        "",
        "| pass | real (eval) | dream (eval) | real check | dream check | final check | time | |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for k, where in enumerate([run, *rounds]):
        evals = {e["tag"]: e for e in where.evaluations()}
        c = by_name.get(pass_name(run, where))
        spent = pass_time(where, pipeline, f"round {k}/" if k else "")
        cells = [
            pm(evals.get("real")),
            pm(evals.get("dream")),
            "—" if c is None else f"{c['real']:.0f}",
            "—" if c is None else f"{c['dream']:.0f}",
            "—" if c is None or c.get("final") is None else f"{c['final']:.0f}" + more(c),
            duration(spent),
        ]
        name = "first pass" if not k else f"[round{k}]({_rel(run, where.path)}/report.md)"
        mark = "**the run's result**" if where.path == result else ""
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {mark} |")
    cfg = run.load_config()
    if cfg is not None and evaluates_result_only(cfg):
        lines += [
            "",
            "Under `iterate.evaluate_passes: result` only the run's result plays the evaluation episodes; the checks "
            "score every pass.",
        ]
    if checks and checks.get("stopped"):
        lines += ["", f"Round control stopped: {checks['stopped']}."]
    if checks and any(p.get("final") is not None for p in checks["passes"]):
        two = [p for p in checks["passes"] if final_more_episodes(p, checks)]
        lines[-1] += f" The best learned passes then played {checks['final_check']} real check episodes each (final check)" + (
            f"; the best two, {' and '.join(p['name'] for p in two)}, played {two[0]['final_episodes']} in all "
            "(`iterate.final_more`), and the better mean over those is the run's result."
            if two
            else "; the best of them is the run's result."
        )
    if checks and checks["passes"]:
        from wm.tools.plots import rounds_plot

        path = rounds_plot(run.plots_dir / ROUNDS_PNG, checks)
        lines += ["", f"![Each pass's dream score and real check]({_rel(run, path)})"]
    return lines


def checks_section(run: RunDir, cfg: Any) -> list[str]:
    """C's kept checks (`controller/checks/`): each check's score in C's own fitness (the dream or the game) beside
    its real score once `es.pick_real` played it, the draw it belongs to, and the check `best.npz` holds: the
    dream-trained C's real learning curve."""
    import numpy as np

    checks = [c for _, c in run.checks()]
    if not checks:
        return []
    best = None
    if run.params("best").exists():
        with np.load(run.params("best"), allow_pickle=False) as b:
            best = b["params"]
    rows, picked = [], 0
    for z in checks:
        real = f"{float(z['real']):.1f} ± {float(z['real_std']):.1f}" if "real" in z else "—"
        mark = " ← best.npz" if best is not None and np.array_equal(z["params"], best) else ""
        rows.append(f"| {int(z['generation'])} | {int(z.get('draw', 0))} | {float(z['score']):.1f} | {real}{mark} |")
        picked = picked or (int(z["real_episodes"]) if "real" in z else 0)
    head = f"check ({cfg.es.fitness}, {cfg.es.eval_episodes} episodes)"
    real = f"real (the pick, {picked} training-side episodes)" if picked else "real"
    return ["", "## C's checks", "", f"| generation | draw | {head} | {real} |", "|---|---|---|---|", *rows]


def paper_figure(env: str, s: dict[str, Any]) -> str:
    """The paper's score beside an evaluation of the same kind; none beside one of fewer than 20 episodes, whose mean
    is too rough to set against it."""
    if int(s.get("episodes", 0)) < FEW_EPISODES:
        return f"— (fewer than {FEW_EPISODES} episodes)"
    mode = s.get("mode", "")
    kind = "random" if mode == "real-random" else "dream" if mode == "dream" else "real" if mode == "real" else ""
    fam = family_of(env)
    if kind == "dream" and fam.tau_table and s.get("temperature") is not None:
        row = paper_row(float(s["temperature"]))  # the paper's dream score at the same τ, when it has that row
        if row is not None:
            return f"{row[0][0]:.0f} ± {row[0][1]:.0f} (τ {s['temperature']:g})"
    return fam.paper.get(kind, "—")


def _rel(run: RunDir, p: Path) -> str:
    return p.relative_to(run.path).as_posix()


def render(run: RunDir) -> str:
    """The report's Markdown (also writes the plots it links)."""
    cfg = run.load_config()
    if cfg is None:
        raise WMError(f"{run.config_path} not found: not a run directory")
    env = cfg.env.name
    lines = _config_lines(run, cfg)
    pipeline = pipeline_timings(run)
    lines += _stage_lines(run, pipeline)
    lines += rounds_section(run, pipeline)
    lines += checks_section(run, cfg)
    lines += _evaluation_lines(run, cfg, env)
    lines += _standing_lines(run, cfg)
    lines += _sweep_lines(run, env)
    plots = make_plots(run)
    lines += ["", "## Training curves", ""]
    lines += [f"![{title}]({_rel(run, p)})" for title, p in plots] or ["No training metrics yet."]
    lines += _image_lines(run)
    return "\n".join(lines).rstrip() + "\n"


def _config_lines(run: RunDir, cfg: Any) -> list[str]:
    """The report's title and its configuration table."""
    lines = [
        f"# World Models run report: `{run.path.name}`",
        "",
        f"Env **{cfg.env.name}** · config hash `{cfg.hash()}` · written {time.strftime('%Y-%m-%d %H:%M')}. "
        "Paper numbers: `docs/paper-settings.md` §9 (`wm docs paper-settings`).",
        "",
        "## Configuration",
        "",
        "| key | value |",
        "|---|---|",
    ]
    lines += [f"| `{k}` | {number(cfg[k])} |" for k in CONFIG_KEYS if _has(cfg, k)]
    return lines + ["", "Full config: [config.yaml](config.yaml)"]


def _stage_lines(run: RunDir, pipeline: Any) -> list[str]:
    """The stages table: each stage's state, key figures (its DONE's too) and time."""
    from wm.tools.status import stage_rows

    lines = ["", "## Stages", "", "| stage | state | key figures | time |", "|---|---|---|---|"]
    for verb, state, key in stage_rows(run):
        figs = dict(key)
        done = run.stage_dir(verb) / "DONE"
        if done.exists():
            info = run.done_info(verb)
            figs.update({k: v for k, v in info.items() if "/" in k and isinstance(v, (int, float))})
        fig = figures(figs, ", ") or "—"
        lines.append(f"| {verb} | {state} | {fig} | {duration(stage_time(run, verb, pipeline))} |")
    return lines


def _standing_lines(run: RunDir, cfg: Any) -> list[str]:
    """Where the run stands against its preset's recorded runs (`wm reference`), when there are some."""
    from wm.tools.reference import describe, standing

    ref, found = standing(run, cfg)
    if ref is None or not found:
        return []
    return ["", "## Against the recorded runs", "", f"Its preset's {describe(ref)} (`wm reference`):", ""] + [
        f"- {line}" for line in found
    ]


def _evaluation_lines(run: RunDir, cfg: Any, env: str) -> list[str]:
    """The evaluation table, each beside the paper's score, with links to its episodes and GIFs."""
    lines = ["", "## Evaluation", ""]
    evals = run.evaluations()
    if not evals:
        return lines + ["No evaluation yet: `python -m wm evaluate --run " + str(run.path) + "`."]
    lines += [
        "| evaluation | mode | episodes | score (mean ± std) | min / median / max | paper | files |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in evals:
        mode = s.get("mode", "?") + (f" τ {s['temperature']:g}" if s.get("temperature") is not None else "")
        episodes = run.eval_episodes(s["_dir"].name)
        files = [f"[episodes]({_rel(run, episodes)})"] if episodes.exists() else []
        files += [f"[{g.stem}]({_rel(run, g)})" for g in sorted(s["_dir"].glob("episode_*.gif"))]
        score = f"{s['mean']:.1f} ± {s['std']:.1f}"
        score = f"**{score}**" if int(s["episodes"]) >= FEW_EPISODES else score  # a rough mean is not set off
        lines.append(
            f"| {s['tag']} | {mode} | {s['episodes']} | {score} | "
            f"{s['min']:.0f} / {s['median']:.1f} / {s['max']:.0f} | {paper_figure(env, s)} | {', '.join(files) or '—'} |"
        )
    driven = [s for s in evals if isinstance(s.get("drive"), dict) and s["drive"]]
    if driven:  # CarRacing: how the score was driven (wm.rollouts.evaluation.drive_summary)
        lines += [""] + [f"- {s['tag']}: {format_drive(s['drive'])}" for s in driven]
    note = family_of(env).score_note
    if note:
        lines += ["", note.format(max_steps=cfg.env.max_steps)]
    return lines


def _sweep_lines(run: RunDir, env: str) -> list[str]:
    """The τ sweep's table, its figure (dream and real score against τ, the paper's points beside where the game has
    a τ table) and a link to its data, when the run has one."""
    sweep, data = run.artifact("tau_sweep_table"), run.artifact("tau_sweep")
    if not sweep.exists():
        return []
    body = "\n".join(ln for ln in sweep.read_text().splitlines() if not ln.startswith("# ")).strip()
    lines = ["", "## Temperature sweep", "", body]
    rows = sweep_rows(run)
    if rows:
        from wm.tools.plots import sweep_plot

        path = sweep_plot(run.plots_dir / SWEEP_PNG, rows, PAPER_DOOM if family_of(env).tau_table else None)
        lines += ["", f"![Dream and real score against τ]({_rel(run, path)})"]
    if data.exists():
        lines += ["", f"Data: [{data.name}]({_rel(run, data)})"]
    return lines


def sweep_rows(run: RunDir) -> list[dict[str, Any]]:
    """The rows of `eval/temperature_sweep.json` ([] when it is missing or unreadable)."""
    doc = read_json_or(run.artifact("tau_sweep"))
    rows = doc.get("rows") if isinstance(doc, dict) else None
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def _image_lines(run: RunDir) -> list[str]:
    """The stages' images and every evaluation GIF, when there are any."""
    images = [(t, run.artifact(key)) for t, key in IMAGES if run.artifact(key).exists()]
    gifs = sorted(run.stage_dir("evaluate").glob("*/episode_*.gif")) if run.stage_dir("evaluate").exists() else []
    if not (images or gifs):
        return []
    lines = ["", "## Images", ""]
    for title, p in images:
        lines += [f"**{title}**", "", f"![{title}]({_rel(run, p)})", ""]
    for g in gifs:
        panels = "decoded dream" if "dream" in g.parent.name else "real screen | 64×64 input | V reconstruction"
        lines += [
            f"**Evaluation `{g.parent.name}`, {g.stem}** ({panels})",
            "",
            f"![{g.parent.name} {g.stem}]({_rel(run, g)})",
            "",
        ]
    return lines


def _has(cfg: Any, key: str) -> bool:
    try:
        cfg[key]
    except KeyError:
        return False
    return True


def write_report(run: RunDir) -> Path:
    """Render and write `report.md` atomically; returns its path."""
    path = run.report_path
    atomic_write_text(path, render(run))
    return path


def main(args: argparse.Namespace) -> int:
    run = RunDir(args.run)
    if not run.path.exists():
        raise missing_run(run.path)
    path = write_report(run)
    print(f"report: {path}")
    return 0
