"""A stage's LOCK: one command at a time per stage, on one host or across the hosts of a shared file system.

`<stage>/LOCK` (JSON: the owner's pid, host and start time) is taken with a hard link, which fails while another
process holds it (`link` is atomic on NFS too), and rewritten every `LOCK_REFRESH_S` while its stage runs. On this
host a LOCK holds while its process lives; another host's holds until it has gone `LOCK_STALE_S` without a refresh
(its job died with its node), then a stage takes it over in one line. docs/guide/run-directory.md says it for users.

`RunDir` names the file and asks here (`RunDir.lock`, `lock_info`, `lock_owner`, `stage_lock`); nothing here knows
the rest of the run directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wm.core.bounded import read_json
from wm.core.errors import WMError, WriteError, describe_os_error

# A LOCK is rewritten this often while its stage runs; one from another host unrefreshed for LOCK_STALE_S is a dead
# job's (its node crashed). Whether to take one over does not trust the hosts' clocks to agree: the LOCK's mtime is set
# by the file server, and a stage about to take it over compares it with the mtime of the file it has just written
# beside it (the server's "now"). Readers (status, the TUI), which write nothing, compare it with this host's clock.
LOCK_REFRESH_S = 30.0
LOCK_STALE_S = 600.0


@dataclasses.dataclass(frozen=True)
class LockInfo:
    """A stage's LOCK as read: its owner, when it started, seconds since it was last written, whether it holds."""

    pid: int
    host: str
    started: float
    age: float
    held: bool

    def describe(self) -> str:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started)) if self.started else "?"
        return f"pid {self.pid} on {self.host or '?'}, since {since}, refreshed {self.age:.0f} s ago"

    def busy(self, verb: str) -> WMError:
        """The one line that refuses a second copy of the stage."""
        if self.host == socket.gethostname():
            hint = "stop it first, or wait for it to finish"
        else:
            stale = f"its LOCK is stale after {LOCK_STALE_S:.0f} s without a refresh"
            hint = f"if that job is gone, {stale}, or rerun with --break-lock"
        return WMError(f"stage {verb} is already running in this run dir ({self.describe()}); {hint}")


def _lock_record(started: float | None = None) -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": started or time.time()}


class _Refresh:
    """Rewrites a held LOCK every `LOCK_REFRESH_S` from a daemon thread (atomically: a reader never sees it torn),
    so another host can tell a running stage from a dead one's leftover."""

    def __init__(self, lock: Path, folder: Path) -> None:
        self.lock, self.folder = lock, folder
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="lock-refresh", daemon=True)

    def __enter__(self) -> _Refresh:
        try:
            self.started = float(json.loads(self.lock.read_text()).get("started", time.time()))
        except (OSError, ValueError, AttributeError):
            self.started = time.time()
        self.thread.start()
        return self

    def _loop(self) -> None:
        while not self.stop.wait(LOCK_REFRESH_S):
            with contextlib.suppress(OSError):  # a full disk: the next refresh tries again
                fd, tmp = tempfile.mkstemp(prefix=".tmp-LOCK-", dir=self.folder)
                with os.fdopen(fd, "w") as f:
                    json.dump(_lock_record(self.started), f)
                if self.stop.is_set():  # released meanwhile: do not bring a removed LOCK back
                    os.unlink(tmp)
                    return
                os.replace(tmp, self.lock)

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def dead_lock_temp(p: Path) -> bool:
    """Whether a `.tmp-LOCK-*` file is a dead writer's leftover: its record names a process of this host that is gone
    (or this one), or, unreadable or another host's, it is over a minute old."""
    try:
        rec = json.loads(p.read_text() or "{}")
        pid, host = int(rec.get("pid", 0) or 0), str(rec.get("host", ""))
    except (OSError, ValueError, AttributeError, TypeError):
        pid, host = 0, ""
    if pid and host == socket.gethostname():
        return pid == os.getpid() or not _pid_alive(pid)
    try:
        return time.time() - p.stat().st_mtime >= 60
    except OSError:
        return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed process not yet reaped by its parent is a zombie: dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class StageLock:
    """The LOCK of one stage's folder: who holds it (`info`, `owner`), and holding it while the stage runs (`hold`)."""

    def __init__(self, path: Path, verb: str) -> None:
        """`path`: the stage's `<stage>/LOCK` (`RunDir.stage_lock` names it); `verb`: the stage, for the lines."""
        self.path, self.verb = path, verb

    def info(self, now: float | None = None) -> LockInfo | None:
        """Who holds the LOCK (`LockInfo`, `held` False for a stale one), None without a readable LOCK.

        `now`: the time its age is measured to (default this host's clock; a stage taking the LOCK passes the
        file server's, the mtime of a file it has just written in the same folder)."""
        lock = self.path
        try:
            info = read_json(lock, limit=4096)
            age = (time.time() if now is None else now) - lock.stat().st_mtime
            pid, host = int(info.get("pid", 0) or 0), str(info.get("host", ""))
            started = float(info.get("started", 0.0) or 0.0)
        except (OSError, WMError, AttributeError, TypeError, ValueError):
            return None
        # on this host the process says whether it runs; another host's job says it by refreshing the LOCK
        held = _pid_alive(pid) if host == socket.gethostname() else age < LOCK_STALE_S
        return LockInfo(pid, host, started, age, bool(pid) and held)

    def owner(self) -> int | None:
        """PID of the process holding the LOCK (on `info().host`), else None (a stale LOCK is ignored)."""
        info = self.info()
        return info.pid if info is not None and info.held else None

    @contextlib.contextmanager
    def hold(self, break_lock: bool = False) -> Iterator[None]:
        """Hold the LOCK while the stage runs, so a second copy is refused and the TUI can say 'running'.

        Taken before anything else is written (the CLI binds the config inside it): a command refused because the
        stage is running has created nothing, not even the stage's folder. The LOCK is created with a hard link,
        which fails when another process holds it, so two commands started together cannot both get it (`link` is
        atomic on NFS too). When the guarded block raises, the folders this call created are removed again if they
        are empty, so a command refused inside it (a config conflict) leaves no trace either.

        The LOCK records host, pid and start time, and is rewritten every `LOCK_REFRESH_S` while held: on a shared
        file system a LOCK from another host counts as held until it has gone `LOCK_STALE_S` without a refresh (its
        job died with its node), then it is taken over with one line naming the old owner; `break_lock` (the CLI's
        `--break-lock`) takes it over at once.
        """
        verb = self.verb
        info = self.info()
        here = info is not None and info.host == socket.gethostname()
        # refused before anything is written; another host's LOCK is judged in _take, on the server's clock
        if here and info.held and info.pid != os.getpid() and not break_lock:
            raise info.busy(verb)
        folder = self.path.parent
        created, p = [], folder
        while not p.exists():
            created.append(p)
            p = p.parent
        lock = self.path
        ok = False
        try:
            try:
                self._take(break_lock)
            except OSError as e:
                raise WriteError(describe_os_error(e, lock)) from e
            with _Refresh(lock, folder):
                yield
            ok = True
        finally:
            if self.owner() == os.getpid():
                lock.unlink(missing_ok=True)
                # a LOCK refresh or take-over torn by a kill -9 of an earlier run of this stage (a rerun soon after
                # the kill kept it while it could have been a live command's)
                for p in folder.glob(".tmp-LOCK-*"):
                    if dead_lock_temp(p):
                        with contextlib.suppress(OSError):
                            p.unlink()
            if not ok:
                for d in created:  # deepest first; only empty ones go
                    with contextlib.suppress(OSError):
                        d.rmdir()

    def _take(self, break_lock: bool = False) -> None:
        folder, lock, verb = self.path.parent, self.path, self.verb
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-LOCK-", dir=folder)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(_lock_record(), f)
            try:
                os.link(tmp, lock)
            except FileExistsError:  # a stale LOCK (dead owner), or a racing command that got it first
                old = self.info(now=os.stat(tmp).st_mtime)  # both mtimes on the file server's clock
                if old is not None and old.held and old.pid != os.getpid() and not break_lock:
                    raise old.busy(verb) from None
                # a dead process of this host (a killed run being resumed) is reclaimed silently: its death is
                # certain; another host's LOCK, judged by its age, or one broken while held is said in one line
                if old is not None and old.pid != os.getpid() and (old.held or old.host != socket.gethostname()):
                    why = "broken by --break-lock" if old.held else "stale"
                    print(f"{verb}: took over the LOCK of {old.describe()}: {why}", file=sys.stderr, flush=True)
                os.replace(tmp, lock)
            except OSError as e:  # a file system without hard links
                if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK):
                    raise
                os.replace(tmp, lock)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
