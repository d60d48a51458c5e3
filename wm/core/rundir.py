"""The run directory's layout: the one contract every stage shares (docs/architecture.md, docs/guide/run-directory.md).

`runs/<name>/` holds `config.yaml` (the resolved config, written when the run is created), one folder per
stage with a `DONE` sentinel written last, `logs/<stage>.log`, `metrics/<stage>.jsonl` and `tb/`. `RunDir` says
where each file lives (`ARTIFACTS`: no other module spells an artifact's name) and reads the stages' state from them.
How a file is written is `wm.core.atomic`'s (a temporary name, then a rename: a crash never leaves a half file
visible); how a stage's LOCK is taken and judged, `wm.core.runlock`'s; a refused command's rollback, `wm.core.rollback`'s.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from wm.core.atomic import atomic_write_json, atomic_write_text
from wm.core.bounded import read_json_or, read_yaml
from wm.core.config import Config, defaults, flatten, update
from wm.core.errors import WMError
from wm.core.registry import FREE_SECTIONS, GLOBAL_SECTIONS, STAGES, Stage, stage
from wm.core.runlock import LockInfo, StageLock, dead_lock_temp

# The registry owns the stages; these names are re-exported for the run dir's readers.
__all__ = [
    "ARTIFACTS",
    "FREE_SECTIONS",
    "GLOBAL_SECTIONS",
    "PARAMS",
    "STAGES",
    "RunDir",
    "Stage",
    "round_dirs",
    "stage",
]

# Every artifact of a run: key -> (stage verb whose folder holds it, name inside that folder). No other module
# spells an artifact's file name; they ask `RunDir` (tests/test_registry.py greps for stray names).
ARTIFACTS: dict[str, tuple[str, str]] = {
    "episodes": ("collect", ""),
    "vae_weights": ("train-vae", "vae.weights.h5"),
    "reconstructions": ("train-vae", "reconstructions.png"),
    "series": ("encode", ""),
    "initial_z": ("encode", "initial_z.npz"),
    "mdnrnn_weights": ("train-mdnrnn", "mdnrnn.weights.h5"),
    "dream_preview": ("train-mdnrnn", "dream_preview.gif"),
    "es_state": ("train-controller", "es_state.npz"),
    "es_state_legacy": ("train-controller", "es_state.pkl"),  # an older version's pickle: refused, never read
    "params_best": ("train-controller", "best.npz"),
    "params_mean": ("train-controller", "mean.npz"),
    "eval_summary": ("evaluate", "summary.json"),
    "tau_sweep": ("evaluate", "temperature_sweep.json"),
    "tau_sweep_table": ("evaluate", "temperature_sweep.md"),
}
PARAMS = {"best": "params_best", "mean": "params_mean"}  # controller parameter files by name (evaluate.params)
EPISODE_FILE = re.compile(r"^ep_(\d{6,})\.npz$")  # episodes/ and series/ hold one file per episode slot


class RunDir:
    """Paths and state of one run directory."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __truediv__(self, other: str) -> Path:
        return self.path / other

    # -- layout
    @property
    def config_path(self) -> Path:
        return self.path / "config.yaml"

    def stage_dir(self, key: str) -> Path:
        return self.path / stage(key).dir

    def resolve(self, p: str | Path) -> Path:
        """A path from the config: absolute as it is, relative from this run's directory."""
        p = Path(p)
        return p if p.is_absolute() else self.path / p

    def log_path(self, key: str) -> Path:
        return self.path / "logs" / f"{stage(key).name}.log"

    def metrics_path(self, key: str) -> Path:
        return self.path / "metrics" / f"{stage(key).name}.jsonl"

    @property
    def tb_dir(self) -> Path:
        return self.path / "tb"

    # -- run-level files (not a stage's): the report, its plots, the pipeline's timings, iterative training's rounds
    @property
    def report_path(self) -> Path:
        return self.path / "report.md"

    @property
    def plots_dir(self) -> Path:
        return self.path / "plots"

    @property
    def timings_path(self) -> Path:
        """`pipeline_timings.jsonl`: one line per pipeline invocation, seconds per stage."""
        return self.path / "pipeline_timings.jsonl"

    @property
    def rounds_path(self) -> Path:
        """`rounds.json`: iterative training's record: each pass's real check and dream scores, which C is the result."""
        return self.path / "rounds.json"

    @property
    def clock_path(self) -> Path:
        """`clock.json`: the pass being worked on and the run's minutes (the time budget's clock) at its last finished
        stage, check or progress line, so a pass a kill interrupts keeps the time it had taken (`RunClock`)."""
        return self.path / "clock.json"

    # -- artifacts (ARTIFACTS): the only place their file names are spelled
    def artifact(self, key: str) -> Path:
        """The path of artifact `key` of this run (KeyError for an unknown key)."""
        verb, name = ARTIFACTS[key]
        folder = self.stage_dir(verb)
        return folder / name if name else folder

    @property
    def episodes_dir(self) -> Path:
        return self.artifact("episodes")

    @property
    def series_dir(self) -> Path:
        return self.artifact("series")

    @property
    def vae_weights(self) -> Path:
        return self.artifact("vae_weights")

    @property
    def mdnrnn_weights(self) -> Path:
        return self.artifact("mdnrnn_weights")

    @property
    def initial_z(self) -> Path:
        return self.artifact("initial_z")

    @property
    def es_state(self) -> Path:
        return self.artifact("es_state")

    @property
    def es_state_legacy(self) -> Path:
        return self.artifact("es_state_legacy")

    def params(self, which: str) -> Path:
        """Controller parameters `best` or `mean` (`controller/<which>.npz`)."""
        if which not in PARAMS:
            raise WMError(f"controller parameters must be one of {sorted(PARAMS)}, got {which!r}")
        return self.artifact(PARAMS[which])

    @property
    def checks_dir(self) -> Path:
        """`controller/checks/`: C's CMA mean at each of its checks (`check_params`)."""
        return self.params("mean").parent / "checks"

    def check_params(self, generation: int) -> Path:
        """`controller/checks/gen_NNNN.npz`: C's CMA mean at one of its checks (`es.eval_every`), with the check's
        score, its draw (`es.draws`) and, once `es.pick_real` played it, its real score: the points of a real-game
        learning curve."""
        return self.checks_dir / f"gen_{generation:04d}.npz"

    def check_files(self) -> list[Path]:
        """Every kept check's file (`check_params`) in generation order, unread."""
        return sorted(self.checks_dir.glob("gen_*.npz")) if self.checks_dir.exists() else []

    def checks(self) -> list[tuple[Path, dict[str, np.ndarray]]]:
        """Every kept check in generation order: its file and its arrays (read once, the file closed)."""
        out = []
        for f in self.check_files():
            with np.load(f, allow_pickle=False) as z:
                out.append((f, {k: z[k] for k in z.files}))
        return out

    def eval_dir(self, tag: str) -> Path:
        """`eval/<tag>/`: episodes.jsonl, summary.json and GIFs of one evaluation."""
        return self.stage_dir("evaluate") / tag

    def eval_summary(self, tag: str | None = None) -> Path:
        """The default evaluation's `eval/summary.json`, or `eval/<tag>/summary.json`."""
        path = self.artifact("eval_summary")
        return path if tag is None else self.eval_dir(tag) / path.name

    def count_episodes(self, folder: Path) -> int:
        """How many episode files (`ep_NNNNNN.npz`) `folder` holds; temporaries and other files are not counted."""
        return sum(1 for p in folder.iterdir() if EPISODE_FILE.match(p.name)) if folder.is_dir() else 0

    def eval_summaries(self) -> list[Path]:
        """Every `eval/<tag>/summary.json` of the run, sorted by tag."""
        return sorted(self.stage_dir("evaluate").glob(f"*/{self.artifact('eval_summary').name}"))

    def evaluations(self) -> list[dict[str, Any]]:
        """Every evaluation's `summary.json` (with its `tag` and `_dir`), the default real evaluation first, then the
        dream, the random policy's and the others by tag; an unreadable summary is skipped."""
        out = []
        for p in self.eval_summaries():
            s = read_json_or(p)
            if isinstance(s, dict):
                out.append({**s, "tag": s.get("tag", p.parent.name), "_dir": p.parent})
        order = {"real": 0, "dream": 1, "random": 2, "random-dream": 3}
        return sorted(out, key=lambda s: (order.get(s["tag"], 9), s["tag"]))

    def eval_episodes(self, tag: str) -> Path:
        return self.eval_dir(tag) / "episodes.jsonl"

    # -- sentinels and state
    def is_done(self, key: str) -> bool:
        return (self.stage_dir(key) / "DONE").exists()

    def mark_done(self, key: str, info: dict[str, Any] | None = None) -> None:
        """Write `<stage>/DONE` last, after every artifact of the stage is on disk."""
        atomic_write_json(self.stage_dir(key) / "DONE", info or {})

    def done_info(self, key: str) -> dict[str, Any]:
        """The figures a stage wrote into its DONE ({} when missing or unreadable)."""
        info = read_json_or(self.stage_dir(key) / "DONE", {})
        return info if isinstance(info, dict) else {}

    def clear_done(self, key: str) -> None:
        (self.stage_dir(key) / "DONE").unlink(missing_ok=True)

    def started(self, key: str) -> bool:
        d = self.stage_dir(key)
        return (d.exists() and any(d.iterdir())) or self.metrics_path(key).exists()

    # -- the stage's LOCK (wm.core.runlock)
    def stage_lock(self, key: str) -> StageLock:
        """The stage's `<stage>/LOCK`: who holds it, and holding it while the stage runs."""
        return StageLock(self.stage_dir(key) / "LOCK", stage(key).verb)

    def lock_info(self, key: str, now: float | None = None) -> LockInfo | None:
        """Who holds the stage's LOCK (`StageLock.info`: `held` False for a stale one), None without a readable LOCK."""
        return self.stage_lock(key).info(now)

    def lock_owner(self, key: str) -> int | None:
        """PID of the process holding the stage's LOCK (on `lock_info(key).host`), else None (a stale LOCK is ignored)."""
        return self.stage_lock(key).owner()

    def state(self, key: str) -> str:
        """One of: 'not started', 'running', 'resumable', 'done'."""
        if self.is_done(key):
            return "done"
        if self.lock_owner(key) is not None:
            return "running"
        return "resumable" if self.started(key) else "not started"

    def lock(self, key: str, break_lock: bool = False) -> contextlib.AbstractContextManager[None]:
        """Hold `<stage>/LOCK` while a stage runs, so a second copy is refused and the TUI can say 'running'
        (`StageLock.hold`: taken before anything else is written, refreshed while held, a stale one taken over)."""
        return self.stage_lock(key).hold(break_lock)

    def remove_temporaries(self, key: str, recursive: bool = True) -> list[Path]:
        """Delete the `.tmp-*` files (torn atomic writes of a killed run) under the stage's folder, and return them.

        Call it only while holding the stage's LOCK, when they can only be leftovers. `recursive=False` keeps to the
        folder itself (a stage whose side runs write into subfolders without the LOCK, e.g. `evaluate --dream`).
        """
        folder = self.stage_dir(key)
        if not folder.is_dir():
            return []
        found = folder.rglob(".tmp-*") if recursive else folder.glob(".tmp-*")
        removed = []
        for p in found:
            with contextlib.suppress(FileNotFoundError):
                # a `.tmp-LOCK-*` of a live process is another command's attempt at the LOCK (about to be refused)
                if p.name.startswith(".tmp-LOCK-") and not dead_lock_temp(p):
                    continue
                if p.is_file() or p.is_symlink():
                    p.unlink()
                    removed.append(p)
        return removed

    # -- config
    def load_config(self) -> Config | None:
        """The stored config over `configs/base.yaml`'s defaults: a run made before a key existed gets its default
        (an old run resumed or evaluated by newer code); a stored key base.yaml no longer has is an error naming it."""
        if not self.config_path.exists():
            return None
        stored = read_yaml(self.config_path) or {}
        if not isinstance(stored, dict):
            raise WMError(f"{self.config_path} is not a mapping of config sections")
        return update(defaults(), stored, source=str(self.config_path))

    def config_changes(self, cfg: Config) -> list[str]:
        """`key: old -> new` for every stored setting that `cfg` changes (keys new to base.yaml are no change)."""
        stored = self.load_config()
        if stored is None:
            return []
        old, new = flatten(stored.to_dict()), flatten(cfg.to_dict())
        return [f"{k}: {old[k]!r} -> {new[k]!r}" for k in sorted(old) if k in new and old[k] != new[k]]

    def bind_config(self, cfg: Config, key: str | None = None, write: bool = True) -> Config:
        """Create the run with `cfg`, or check `cfg` against the stored config for stage `key`.

        A stage may change its own sections (and those of stages that have not started); a change to a
        global section or to a started upstream stage's section is refused with the differing keys.
        Returns the config to use (stored + allowed changes), which is written back unless `write` is False
        (the CLI checks a finished stage's command without applying its changes). Run it under the stage's
        LOCK (wm.cli does): a command refused for a running stage must not have rewritten its config.
        """
        stored = self.load_config()
        if stored is None:
            if not write:
                return cfg
            self.path.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.config_path, cfg.to_yaml())
            return cfg
        old, new = flatten(stored.to_dict()), flatten(cfg.to_dict())
        diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if not diff:
            return stored
        own = set(stage(key).sections) if key else set()
        refused = []
        for k in diff:
            if k not in old:  # a key added to base.yaml after the run was created: it takes its value, no conflict
                continue
            section = k.split(".")[0]
            if section in own or section in FREE_SECTIONS:
                continue
            owner = next((s for s in STAGES if section in s.sections), None)
            if owner is not None and not self.started(owner.verb):
                continue
            refused.append(k)
        if refused:
            lines = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in refused[:6])
            more = f" (+{len(refused) - 6} more)" if len(refused) > 6 else ""
            raise WMError(
                f"config differs from {self.config_path} in settings of stages that already ran: {lines}{more}; "
                "use a new --run directory (or the same --configs/--set as before)"
            )
        if write:
            atomic_write_text(self.config_path, cfg.to_yaml())
        return cfg


def round_dirs(path: Path) -> list[Path]:
    """The iterative-training rounds of the run at `path` (`round1`, `round2`, … in number order; wm.rounds.iterate)."""
    return sorted((p for p in Path(path).glob("round*") if p.name[5:].isdigit() and p.is_dir()), key=lambda p: int(p.name[5:]))


# Files a command writes about itself rather than a stage's work: a refused command takes these back (`wm.core.rollback`).
BOOKKEEPING = ("config.yaml", "logs", "metrics", "tb", "mlruns")
