"""`python -m wm export --run R --out DIR`: a trained agent as a small run directory anyone can evaluate or play.

    python -m wm export --run runs/s0 --out agents/doom-small --note "pipeline --configs doom_takecover small ..."

What it writes (the run's result pass: round control's choice, `wm.rounds.record.result_pass`), a run directory in the
suite's own layout, so `evaluate`, `play`, `status` and the TUI open it unchanged:

* `config.yaml` — the pass's config;
* `vae/vae.weights.h5`, `mdnrnn/mdnrnn.weights.h5` + `model.json` — V and M with every float32 array stored as
  float16 (half the bytes; Keras loads them back into float32 variables: the largest change of a V weight is
  ≈ 2e-4), each stage folder with a DONE naming the source;
* `series/initial_z.npz` — the dream's start states (float32, small);
* `controller/best.npz` (or `--params mean`) — C, float32 (it is tiny, and its sign flips decide actions);
* `agent.json` and `AGENT.md` — where it came from (source run and pass, `--note`: the command and commit that made
  it) and its recorded real score: mean ± std, median and episodes of the pass's `eval/real`, the random policy's
  score on the same seeds when the run has it;
* `eval/real`, `eval/random` (and the default evaluation's `eval/summary.json` and DONE when it played the exported
  C) — those evaluations' summaries and episodes, naming the agent's own C, so `status` and `results` read its score.

Written into a temporary folder beside DIR and renamed at the end: a killed export leaves no half agent. DIR must
not exist (`--force` replaces it).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from wm.core.atomic import atomic_write_json, atomic_write_text, plain_mode
from wm.core.bounded import json_line, read_json, read_lines
from wm.core.commands import missing_run
from wm.core.config import Config
from wm.core.config import update as config_update
from wm.core.errors import WMError
from wm.core.format import count
from wm.core.rundir import RunDir

AGENT_FILE = "agent.json"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="the trained run (its result pass is exported)")
    p.add_argument("--out", required=True, help="the agent's folder (must not exist; --force replaces it)")
    p.add_argument("--params", default="best", choices=["best", "mean"], help="which C (default: best)")
    p.add_argument("--note", default="", help="how it was made: the command and commit (goes into AGENT.md)")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")


# HDF5's own lossless filters (built into every h5py): byte shuffle then gzip take float16 weights ≈ 10 % smaller
# (V 8.94 → 8.03 MB), so the shipped agents fit their 20 MB together; h5py (and so Keras) reads them back unchanged
COMPRESS = {"compression": "gzip", "compression_opts": 9, "shuffle": True}
MIN_COMPRESSED = 65536  # elements (128 kB in float16)


def half_h5(src: Path, dst: Path) -> None:
    """Copy a Keras `.weights.h5` with every float32 dataset stored as float16 (groups, attributes, the rest as is),
    arrays compressed without loss (`COMPRESS`); a float16 file is copied bit for bit in its values."""
    import h5py

    from wm.core.bounded import check_h5

    check_h5(src)  # no external storage or links: the agent carries only the run's own weights
    with h5py.File(src, "r") as s, h5py.File(dst, "w") as d:
        d.attrs.update(dict(s.attrs))

        def copy(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Group):
                d.require_group(name).attrs.update(dict(obj.attrs))
                return
            data = obj[()]
            if isinstance(data, np.ndarray) and data.dtype == np.float32:
                data = data.astype(np.float16)
            # small arrays stay contiguous: a chunked dataset's index costs more than gzip saves on them
            packed = COMPRESS if isinstance(data, np.ndarray) and data.size >= MIN_COMPRESSED else {}
            d.create_dataset(name, data=data, **packed).attrs.update(dict(obj.attrs))

        s.visititems(copy)


def suite_commit() -> str | None:
    """The suite's git commit doing the export (None outside a git checkout): the code the agent loads with."""
    import subprocess

    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def score(run: RunDir, tag: str, first: int = 0) -> dict[str, Any] | None:
    """An evaluation's summary (episodes, mean, std, median, min, max, first and last seed) and, with `first`, the
    (seed, return) of its first episodes: what a user (or a test) checks the exported agent against."""
    path = run.eval_summary(tag)
    if not path.exists():
        return None
    s = read_json(path)
    seeds = s.get("seeds") or []
    keep = {k: s[k] for k in ("episodes", "mean", "std", "median", "min", "max") if k in s}
    out = {**keep, "seeds": [int(seeds[0]), int(seeds[-1])] if seeds else None}
    episodes = path.with_name("episodes.jsonl")
    if first and episodes.exists():
        rows = [json_line(line, episodes) for line in read_lines(episodes)[:first] if line.strip()]
        out["first_episodes"] = [[int(r["seed"]), float(r["return"])] for r in rows]
    return out


# Keys that point at other runs (what a round's data and M came from): the agent holds none of them, so it carries
# none of those paths; its AGENT.md says where it came from.
PROVENANCE_KEYS = {"collect.agent_run": "", "mdnrnn.init_from": ""}


def self_contained(where: RunDir) -> Config:
    """The pass's config with the keys that name other runs cleared (`PROVENANCE_KEYS`)."""
    cfg = where.load_config()
    if cfg is None:
        raise WMError(f"{where.path} has no config.yaml")
    return config_update(cfg, PROVENANCE_KEYS, source="export")


def refuse_overlap(run: Path, out: Path) -> None:
    """`--out` may be neither the run, nor inside it, nor a folder above it: `--force` replaces `--out` whole, and
    would delete the run (and every run beside it) with it."""
    src, dst = run.resolve(), out.resolve()
    if dst == src or src in dst.parents or dst in src.parents:
        where = "is" if dst == src else "is inside" if src in dst.parents else "holds"
        raise WMError(f"--out {out} {where} the run {run}: choose a folder outside it (e.g. agents/<name>)")


def _copy(src: Path, dst: Path) -> None:
    """A file's bytes, with the mode this process's umask gives a new file (not the source's)."""
    shutil.copyfile(src, dst)
    plain_mode(dst)


def export(src_run: RunDir, out: Path, params: str = "best", note: str = "", force: bool = False) -> dict[str, Any]:
    """Write the agent of `src_run` into `out` (see the module docstring); returns agent.json's content."""
    from wm.rounds.record import result_pass

    refuse_overlap(src_run.path, out)
    name, where, how = result_pass(src_run)
    need = {
        "V": where.vae_weights,
        "M": where.mdnrnn_weights,
        "dream starts": where.initial_z,
        "C": where.params(params),
    }
    missing = [f"{k} ({p})" for k, p in need.items() if not p.exists()]
    if missing:
        raise WMError(f"{where.path} has no trained agent to export: missing {', '.join(missing)}")
    if out.exists() and not force:
        raise WMError(f"{out} exists; choose another --out or pass --force to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{out.name}-", dir=out.parent))
    plain_mode(tmp, folder=True)
    source = src_run.path.name if where.path == src_run.path else f"{src_run.path.name}/{where.path.name}"
    try:
        agent = RunDir(tmp)
        atomic_write_text(agent.config_path, self_contained(where).to_yaml())
        for folder in ("train-vae", "train-mdnrnn", "encode", "train-controller"):
            agent.stage_dir(folder).mkdir(parents=True, exist_ok=True)
        half_h5(where.vae_weights, agent.vae_weights)
        half_h5(where.mdnrnn_weights, agent.mdnrnn_weights)
        _copy(where.mdnrnn_weights.with_name("model.json"), agent.mdnrnn_weights.with_name("model.json"))
        _copy(where.initial_z, agent.initial_z)
        _copy(where.params(params), agent.params("best"))
        # eval/real scored evaluate.params' C: recorded only when that is the C exported
        scored = where if params == where.load_config().evaluate.params else None
        baseline = next((r for r in (src_run, where) if r.eval_summary("random").exists()), None)
        info = {
            "source": source,  # the run's own name, never a path of the machine that trained it
            "pass": name,
            "chosen_by": how,
            "params": params,
            "note": note,
            "real": score(scored, "real", first=10) if scored else None,
            "random": score(baseline, "random") if baseline else None,
            "weights_dtype": "float16 (V, M); float32 (C, initial z)",
            "exported_at_commit": suite_commit(),
        }
        for verb in ("train-vae", "train-mdnrnn", "encode", "train-controller"):
            agent.mark_done(verb, {"exported_from": source, "pass": name})
        carry_evaluations(agent, scored, baseline)
        atomic_write_json(tmp / AGENT_FILE, info)
        (tmp / "AGENT.md").write_text(agent_md(info))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return info


def carry_evaluations(agent: RunDir, scored: RunDir | None, baseline: RunDir | None) -> None:
    """The recorded evaluations, so that `status`, `results` and the TUI read the agent's score as a run's: `eval/real`
    (and the default evaluation's `eval/summary.json` and DONE, when it played the same C) from `scored`, the run whose
    C is the one exported, and `eval/random` from `baseline`. Each summary's `params_file` names the agent's own C; the
    GIFs stay behind (megabytes)."""
    own = agent.params("best").relative_to(agent.path).as_posix()  # relative: the agent is moved and copied

    def carry(src: RunDir, tag: str) -> dict[str, Any]:
        """Copies `eval/<tag>` into the agent; returns its summary as the source wrote it."""
        summary = read_json(src.eval_summary(tag))
        agent.eval_dir(tag).mkdir(parents=True, exist_ok=True)
        episodes = src.eval_summary(tag).with_name("episodes.jsonl")
        if episodes.exists():
            _copy(episodes, agent.eval_summary(tag).with_name("episodes.jsonl"))
        atomic_write_json(agent.eval_summary(tag), {**summary, "params_file": own if summary.get("params_file") else None})
        return summary

    if baseline is not None:
        carry(baseline, "random")
    if scored is None or not scored.eval_summary("real").exists():
        return
    real = carry(scored, "real")
    done = scored.done_info("evaluate")
    default = read_json(scored.eval_summary()) if done and scored.eval_summary().exists() else {}
    played = default.get("params_file")
    if done and played and played == real.get("params_file"):  # the default evaluation played the exported C
        atomic_write_json(agent.eval_summary(), {**real, "params_file": own})
        agent.mark_done("evaluate", {**done, "params_file": own})


def agent_md(info: dict[str, Any]) -> str:
    def row(label: str, s: dict[str, Any] | None) -> str:
        if not s:
            return f"| {label} | not recorded | | |"
        seeds = f"{s['seeds'][0]}–{s['seeds'][1]}" if s.get("seeds") else "?"
        median = s.get("median", float("nan"))
        return f"| {label} | {s['mean']:.1f} ± {s['std']:.1f} | {median:.1f} | {s['episodes']} ({seeds}) |"

    return "\n".join(
        [
            "# A trained World Models agent",
            "",
            f"Exported by `python -m wm export` from `{info['source']}` ({info['pass']}, chosen by {info['chosen_by']}),",
            f"C = `{info['params']}`. V and M stored as float16.",
            "",
            f"How it was made: {info['note'] or '(not given)'}",
            "",
            "| policy | real score, mean ± std | median | episodes (seeds) |",
            "|---|---|---|---|",
            row("this agent (float32 weights, when trained)", info["real"]),
            row("random policy, same seeds", info["random"]),
            "",
            "Evaluate or play it like any run, on a copy (evaluation writes into its run; `--tag` keeps this folder's",
            "evaluation as it is):",
            "",
            "    cp -r THIS_FOLDER runs/agent && wm evaluate --run runs/agent --episodes 10 --tag mine",
            "",
        ]
    )


def main(args: argparse.Namespace) -> int:
    src = RunDir(args.run)
    if not src.path.is_dir():
        raise missing_run(src.path)
    info = export(src, Path(args.out), args.params, args.note, args.force)
    sizes = sum(p.stat().st_size for p in Path(args.out).rglob("*") if p.is_file())
    real = info["real"]
    got = "no real score recorded"
    if real:
        got = f"{real['mean']:.1f} ± {real['std']:.1f} over {count(real['episodes'], 'episode')}"
    print(f"exported {info['pass']} of {src.path} to {args.out} ({sizes / 1e6:.1f} MB; {got})")
    return 0
