"""Rollback of a refused command: the run directory left as the command found it (`Snapshot`).

The CLI snapshots the run before a stage runs (`wm.cli`) and restores it when the stage refuses (a `WMError` that is
not a `RunFailed`): what the command wrote about itself (`wm.core.rundir.BOOKKEEPING`: config.yaml, its log, metrics
and TensorBoard files; its LOCK and the empty folders it made) is taken back, unless the stage wrote work of its own.
Kept apart from `RunDir`, whose layout names it reads, because only the CLI's refusal path uses it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from wm.core.atomic import atomic_write_bytes
from wm.core.rundir import BOOKKEEPING


class Snapshot:
    """What a run directory held before a command, so that a refused command can leave it as it found it.

    A stage refuses (a `WMError`) on checks that belong before any write: config values, upstream artifacts, the
    share of bad episode files, weights of another shape. Some of them can only be made once the stage has opened
    its log and metrics, or after the CLI bound the config. `restore()` then puts back `config.yaml`'s bytes, cuts
    appended logs and metrics back to their old length and removes the files and folders the command created —
    only when everything it changed is bookkeeping (`BOOKKEEPING`, the stage's LOCK, empty folders): once the stage
    has written work of its own (an episode, a checkpoint), the failure is left as it is, to resume from. A stage's
    `DONE` that the command removed (`--force` clears it before the stage's own checks) is put back too: a refused
    `--force` leaves a finished stage finished.
    """

    def __init__(self, path: Path, stage_dir: Path):
        """`stage_dir`: the folder of the stage the command runs, the only work a stage writes; the rest of the run
        (a paper run's 10k episodes, say) is not scanned."""
        self.path = path
        self.existed = path.exists()
        self.watched = [path / "config.yaml", *(path / b for b in BOOKKEEPING[1:]), stage_dir]
        self.config = (path / "config.yaml").read_bytes() if (path / "config.yaml").exists() else None
        self.done_path = stage_dir / "DONE"
        try:
            self.done: bytes | None = self.done_path.read_bytes()
        except OSError:
            self.done = None
        self.files: dict[Path, tuple[int, int]] = {}
        self.dirs: set[Path] = {p for p in (path, *self.watched) if p.is_dir()}
        for p in self._scan():
            with contextlib.suppress(OSError):
                st = p.lstat()
                if p.is_dir() and not p.is_symlink():
                    self.dirs.add(p)
                else:
                    self.files[p] = (st.st_size, st.st_mtime_ns)

    def _scan(self) -> Iterator[Path]:
        """Every file and folder of the watched places (those that exist)."""
        for w in self.watched:
            if w.is_file():
                yield w
            elif w.is_dir():
                yield w
                yield from w.rglob("*")

    def _changes(self) -> tuple[list[Path], list[Path], list[Path]]:
        """(files new, files changed, folders new) since the snapshot."""
        new, changed, dirs = [], [], []
        if not self.path.exists():
            return new, changed, dirs
        for p in self._scan():
            try:
                st = p.lstat()
            except OSError:
                continue
            if p.is_dir() and not p.is_symlink():
                if p not in self.dirs:
                    dirs.append(p)
            elif p not in self.files:
                new.append(p)
            elif self.files[p] != (st.st_size, st.st_mtime_ns):
                changed.append(p)
        return new, changed, dirs

    def _bookkeeping(self, p: Path) -> bool:
        rel = p.relative_to(self.path).parts
        return rel[0] in BOOKKEEPING or rel[-1] == "LOCK"

    def restore(self) -> bool:
        """Undo the command's bookkeeping if that is all it wrote; True when the run dir is as it was."""
        new, changed, dirs = self._changes()
        if not all(self._bookkeeping(p) for p in new + changed):
            return False
        for p in new:
            with contextlib.suppress(OSError):
                p.unlink()
        for p in changed:
            if p.name == "config.yaml" and p.parent == self.path and self.config is not None:
                atomic_write_bytes(p, self.config)
            else:  # an appended log or metrics file: its old length back
                with contextlib.suppress(OSError), open(p, "r+b") as f:
                    f.truncate(self.files[p][0])
        for d in sorted(dirs, key=lambda d: len(d.parts), reverse=True):
            with contextlib.suppress(OSError):
                d.rmdir()
        if self.done is not None and not self.done_path.exists():
            atomic_write_bytes(self.done_path, self.done)
        if not self.existed:
            with contextlib.suppress(OSError):
                self.path.rmdir()
        return True
