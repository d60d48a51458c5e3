"""What the UI knows about a run, read from the run directory only (no Textual here, no TensorFlow anywhere).

Runs are found by shape, states and key figures come from `wm.tools.status`, metrics are read incrementally from
`metrics/<stage>.jsonl`, and the launch form's config is resolved exactly as the CLI will resolve it.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from wm.tui.process import PIPELINE, TOOLS

from wm.core.bounded import json_line, read_json
from wm.core.errors import WMError
from wm.core.format import figures, number
from wm.core.rundir import STAGES, RunDir, round_dirs, stage

# Per stage short name: (main plot series, throughput series), from the stage registry.
PLOTS: dict[str, tuple[tuple[str, ...], str | None]] = {s.name: (s.watch, s.rate) for s in STAGES}
fmt, figures_text = number, figures  # one home for number formatting (wm.core.format)


def is_run(path: Path) -> bool:
    """A directory is a run if it has a config.yaml or any stage folder, log or metrics folder."""
    if not path.is_dir():
        return False
    names = {"config.yaml", "logs", "metrics", *(s.dir for s in STAGES)}
    return any((path / n).exists() for n in names)


def find_runs(root: Path) -> list[Path]:
    """The runs directly under `root`, sorted by name, each followed by its iterative-training rounds."""
    if not root.is_dir():
        return []
    runs = sorted(p for p in root.iterdir() if not p.name.startswith(".") and is_run(p))
    # rounds of iterative training (`<run>/round<k>`, see wm/rounds/iterate.py) are runs of their own, listed after theirs
    return [q for p in runs for q in (p, *(r for r in round_dirs(p) if is_run(r)))]


def run_labels(root: Path, paths: Sequence[Path]) -> list[str]:
    """The picker's names of `paths` (as `find_runs` orders them): a run by its path under `root`, each of its rounds
    indented under it as a tree branch (`├ round1`, `└ round2`: the last one closes the group)."""
    labels, seen = [], set()
    for i, path in enumerate(paths):
        if path.parent in seen and path.name.startswith("round"):
            last = i + 1 == len(paths) or paths[i + 1].parent != path.parent
            labels.append(f"  {'└' if last else '├'} {path.name}")
        else:
            labels.append(str(path.relative_to(root)))
        seen.add(path)
    return labels


def run_summary(path: Path) -> str:
    """One line for the run picker: env and how many stages are done / running."""
    from wm.tools.status import stage_rows

    run = RunDir(path)
    try:
        cfg = run.load_config()
        env = cfg.env.name if cfg is not None else "no config yet"
        states = [state for _, state, _ in stage_rows(run)]
    except (WMError, AttributeError, OSError) as e:  # a malformed run dir is shown as such, never a crash
        return f"unreadable: {str(e) or type(e).__name__}"
    running = states.count("running")
    return f"{env}, {states.count('done')}/{len(states)} done" + (f", {running} running" if running else "")


class MetricsTail:
    """Reads the records appended to a metrics JSONL since the last call (a torn last line waits)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.offset = 0
        self._buf = b""

    def read(self) -> list[dict[str, Any]]:
        """New complete records; starts over if the file was replaced by a shorter one."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size < self.offset:
            self.offset, self._buf = 0, b""
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        self.offset += len(chunk)
        *lines, self._buf = (self._buf + chunk).split(b"\n")
        out = []
        for line in lines:
            try:
                rec = json_line(line)
            except WMError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out


class Series:
    """The metric history of one stage, as {key: [(step, value), ...]} plus the latest value of each key."""

    def __init__(self, max_points: int = 5000):
        self.max_points = max_points
        self.points: dict[str, list[tuple[float, float]]] = {}
        self.latest: dict[str, Any] = {}
        self.records = 0

    def add(self, records: Sequence[dict[str, Any]]) -> None:
        for rec in records:
            step = rec.get("step", self.records)
            self.records += 1
            for k, v in rec.items():
                if k in ("step", "time"):
                    continue
                self.latest[k] = v
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    pts = self.points.setdefault(k, [])
                    pts.append((float(step), float(v)))
                    if len(pts) > self.max_points:  # bounded memory: keep every other old point
                        pts[:] = pts[: len(pts) // 2 : 2] + pts[len(pts) // 2 :]
            if "step" in rec:
                self.latest["step"] = rec["step"]


def resolve(run: Path, blocks: Sequence[str], sets: Sequence[str]):
    """The config `python -m wm <verb> --run RUN --configs BLOCKS --set SETS` will use (raises WMError).

    Calls the CLI's own `resolve_config`, so the form shows exactly what the stage gets: the blocks over the
    defaults, or the run's stored config.yaml when no block is chosen, then the overrides.
    """
    from wm.core.commands import resolve_config

    return resolve_config(argparse.Namespace(run=str(run), configs=list(blocks), set=list(sets)))


def config_excerpt(cfg: Any, verb: str) -> str:
    """The config blocks `verb` receives (`Stage.blocks`: what its `StageInput` holds, `wm.stages.contract`), as
    YAML; for the pipeline, which runs every stage and the rounds, the whole config (`iterate` first)."""
    d = cfg.to_dict()
    if verb == "pipeline":
        keep = ["iterate", *(k for k in d if k != "iterate")]
    else:
        keep = list(stage(verb).blocks)
    return yaml.safe_dump({k: d[k] for k in keep if k in d}, sort_keys=False).rstrip()


NO_CONFIG = "(no config.yaml yet: the first launched stage writes it)"
LOG_NEWER_S = 10.0  # a stage log this much newer than the stage's console: the stage ran since, not from this UI


def console_path(run: RunDir, verb: str) -> Path:
    """`logs/<stage>.console` (`logs/pipeline.console` for the pipeline, `logs/<tool>.console` for a tool): the output
    of a launch from the UI."""
    name = verb if verb == PIPELINE or verb in TOOLS else stage(verb).name
    return run.path / "logs" / f"{name}.console"


def output_file(console: Path, log: Path, running: bool) -> Path:
    """What a stage's Output pane follows when this UI is not running it: its console (`logs/<stage>.console`,
    written by a UI launch, this session's or an earlier one's) unless the stage has run without one since (from a
    shell or under the pipeline): then its `logs/<stage>.log`, as when it has no console but a log or a held LOCK
    (`running`). Blocking stats: call it from a thread."""

    def mtime(p: Path) -> float | None:
        try:
            return p.stat().st_mtime
        except OSError:
            return None

    c, lg = mtime(console), mtime(log)
    if c is None:
        return log if lg is not None or running else console
    return log if lg is not None and lg > c + LOG_NEWER_S else console


@dataclass
class RoundsTable:
    """The rounds view of a run: one row per pass (first pass, round1, …) and the lines under them.

    `rows` are (pass, dream, real, final, note); with rounds.json (`source` "rounds.json") dream and real are the
    pass's check scores and final its final check, else (`source` "eval") the passes' own evaluations
    (`eval/dream/summary.json`, `eval/summary.json`). `result` names the pass whose C is the run's result.
    """

    source: str
    rows: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    result: str | None = None


def _summary(path: Path) -> str:
    """`mean ± std (n)` of an evaluation's summary.json, "—" without one."""
    try:
        s = read_json(path)
        return f"{number(s['mean'])} ± {number(s['std'])} ({s['episodes']})"
    except (OSError, WMError, KeyError, TypeError, ValueError):
        return "—"


def read_rounds(run: RunDir) -> RoundsTable | None:
    """What round control recorded (`rounds.json`: `wm.rounds.record.round_checks`), or without it the round dirs'
    own evaluations; for a run with neither, its single pass and why it has no rounds. Blocking reads: call it from
    a thread."""
    from wm.rounds.record import final_more_episodes, round_checks

    rounds = round_dirs(run.path)
    checks = round_checks(run)
    if checks is None and not rounds:
        table = RoundsTable("eval", result="single pass")
        dream, real = _summary(run.eval_summary("dream")), _summary(run.eval_summary())
        table.rows.append(("single pass", dream, real, "", "the result"))
        table.notes = [
            "this run has no rounds: a single pass (iterate.rounds is 0, or no round has started yet). Iterative "
            "training, the paper's section 5, adds rounds of episodes played by the last C (the Doom small preset "
            "runs up to 9 under round control): docs/guide/rounds.md",
            f"dream = eval/dream, real = {run.eval_summary().relative_to(run.path)}",
        ]
        return table
    if checks is None:
        from wm.rounds.record import result_pass

        result, _, how = result_pass(run)
        table = RoundsTable("eval", result=result)
        for name, where in (("first pass", run), *((r.name, RunDir(r)) for r in rounds)):
            note = "the result" if name == result else ""
            table.rows.append((name, _summary(where.eval_summary("dream")), _summary(where.eval_summary()), "", note))
        table.notes = [
            f"no {run.rounds_path.name} (round control off, or no pass checked yet): each pass's own evaluation, "
            f"mean ± std (episodes); dream = eval/dream, real = {run.eval_summary().relative_to(run.path)}",
            f"the result: {result} ({how})",
        ]
        return table
    result = str(checks["result"].get("name", ""))
    table = RoundsTable("rounds.json", result=result)
    seen = set()
    for p in checks["passes"]:
        name = str(p.get("name", "?"))
        seen.add(name)
        final = "" if p.get("final") is None else number(p["final"])
        more = final_more_episodes(p, checks)
        if final and more:
            final += f" ({more} ep)"
        note = ", ".join(
            w for w, on in (("the result", name == result), ("exploits the dream", bool(p.get("exploits")))) if on
        )
        table.rows.append((name, number(p.get("dream")), number(p.get("real")), final, note))
    for r in rounds:
        if r.name not in seen:  # prepared (or running) but not checked yet
            table.rows.append((r.name, "", "", "", "not checked yet"))
    n = len(checks.get("check_seeds") or ())
    table.notes.append(
        f"random policy's check {number(checks.get('random_check'))}"
        + (f"   checks of {n} episodes" if n else "")
        + (f", final check {checks['final_check']}" if checks.get("final_check") else "")
        + (f"   {number(checks['minutes'])} min" if checks.get("minutes") else "")
    )
    stopped = checks.get("stopped")
    table.notes.append(f"stopped: {stopped}" if stopped else "rounds still going (no stop recorded yet)")
    return table


@dataclass
class RunSnapshot:
    """One read of a run directory: what the run screen shows, read off the UI thread by its poll worker.

    `rows` is None when the stage states could not be read (then `error` says why); `records` are the metrics
    records appended since `tail` last read, and with `config_text` they belong to stage `verb`. `rounds`: the rounds
    view (None for a run without rounds).
    """

    verb: str
    tail: MetricsTail | None = None
    env: str = ""
    rows: list[tuple[str, str, dict[str, Any]]] | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    config_text: str = NO_CONFIG
    error: str | None = None
    rounds: RoundsTable | None = None
    standing: str = ""  # where the run stands against its preset's recorded runs (`wm reference`), "" without one
    outputs: dict[str, Path] = field(default_factory=dict)  # per stage: what its Output pane follows (`output_file`)


def read_snapshot(run: RunDir, verb: str, tail: MetricsTail | None) -> RunSnapshot:
    """Read states, key figures, the config and `tail`'s new metrics records; never raises (errors go in `error`).

    Blocking file reads: call it from a thread. Only one caller at a time may read a given `tail`.
    """
    from wm.tools.status import stage_rows

    snap = RunSnapshot(verb, tail, env="  (new run: no config.yaml yet)")
    errors = []
    if run.config_path.exists():
        try:
            cfg = run.load_config()
            if cfg is not None:
                if "env" in cfg:
                    snap.env = f"  env {cfg.env.name}"
                snap.config_text = config_excerpt(cfg, verb)
        except Exception as e:  # a config.yaml being rewritten: the title says new run, the pane says why; next tick
            snap.config_text = f"cannot read {run.config_path}: {e}"
    try:
        snap.rows = stage_rows(run)
    except Exception as e:  # a file caught mid-rewrite must not take the UI down; the next tick retries
        errors.append(str(e) or type(e).__name__)
    try:
        running = {v for v, state, _ in snap.rows or () if state == "running"}
        snap.outputs = {
            s.verb: output_file(console_path(run, s.verb), run.log_path(s.verb), s.verb in running) for s in STAGES
        }
        snap.rounds = read_rounds(run)
        from wm.tools.reference import describe, standing

        ref, lines = standing(run)
        snap.standing = f"against {describe(ref)}: " + "; ".join(lines) if ref is not None and lines else ""
    except Exception as e:
        errors.append(str(e) or type(e).__name__)
    if tail is not None:
        try:
            snap.records = tail.read()
        except Exception as e:
            errors.append(str(e) or type(e).__name__)
    snap.error = "; ".join(errors) or None
    return snap
