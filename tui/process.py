"""Stage subprocesses, with no Textual in sight: build the command line, start it in its own process group,
follow its output, stop it.

A stage's stdout and stderr go to a file in the run dir (`logs/<stage>.console`), not to a pipe, and the UI
follows that file. A pipe would tie the stage's life to the UI: after "leave running and quit" the stage's
next `print` would hit a closed pipe and kill it. With a file the stage outlives the UI and a later UI session
can still show its output.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wm.core.launcher import Launcher

# The folder holding the `wm` package (the repository in a checkout, site-packages when installed), put on
# PYTHONPATH so `python -m wm` works from any working directory.
ROOT = Path(__import__("wm").__file__).resolve().parent.parent
READ_CHUNK = 1 << 20  # bytes of output read per step, so a burst of output never lands in memory at once


def default_python() -> list[str]:
    """The interpreter prefix of stage commands: this venv's python."""
    return [sys.executable]


def build_command(verb: str, run: str | os.PathLike[str], *args: Any, **kw: Any) -> list[str]:
    """The argv that runs stage `verb` on `run`: `wm.core.commands.stage_command` (same arguments, `launcher=` a
    `wm.core.launcher.Launcher` for ranks > 1) with this UI's interpreter as default."""
    from wm.core.commands import stage_command

    kw["python"] = kw.get("python") or default_python()
    return stage_command(verb, run, *args, **kw)


PIPELINE = "pipeline"  # the verb (and the console's name: logs/pipeline.console) of the whole-run launch
TOOLS = ("report", "results")  # the tools launched from the run screen (T), output in logs/<tool>.console


def tool_command(tool: str, args: Sequence[str], python: Sequence[str] | None = None) -> list[str]:
    """`python -m wm <tool> ARGS...`: a tool's argv (`report --run RUN`, `results --runs ... --out ...`)."""
    if tool not in TOOLS:
        raise ValueError(f"{tool!r} is not a tool of this UI (one of {', '.join(TOOLS)})")
    return [*(python or default_python()), "-m", "wm", tool, *args]


MAX_RANKS = 65  # the paper's 64 playing ranks and the dispatcher: the most --mpi the launch form offers by default


def launcher_flags(launcher: Launcher) -> list[str]:
    """`--launcher X [--launcher-args=ARGS]`: the flags that make `python -m wm pipeline` start its ranks with
    `launcher` (what `wm.core.launcher.from_args` parses back into the same Launcher)."""
    if launcher.kind == "template":
        text = launcher.program
    elif launcher.kind == "srun":
        text = "srun"
    else:
        text = shlex.quote(launcher.program) if launcher.program else "mpirun"
    flags = ["--launcher", text]
    if launcher.extra:
        flags.append(f"--launcher-args={shlex.join(launcher.extra)}")  # `=`: a dash-led value is not read as a flag
    return flags


def pipeline_command(
    run: str | os.PathLike[str],
    configs: Sequence[str] = (),
    sets: Sequence[str] = (),
    mpi: int = 1,
    force: bool = False,
    demo: bool = False,
    python: Sequence[str] | None = None,
    launcher: Launcher | None = None,
) -> list[str]:
    """The argv that runs the whole pipeline on `run` (every stage in order, then its rounds):
    `python -m wm pipeline --run RUN [--configs B ...] [--set k=v ...] [--force] [--mpi N [--launcher ...]] [--demo]`.

    `mpi` > 1 runs collect, train-controller and evaluate on that many ranks, started by `launcher` (its flags are
    passed on; without one the pipeline reads WM_LAUNCHER as in a shell); 1 runs them without MPI.
    """
    if mpi < 1:
        raise ValueError(f"MPI ranks must be >= 1, got {mpi}")
    from wm.core.commands import wm_command

    argv = wm_command(PIPELINE, run, configs, sets, force, python or default_python())
    if mpi > 1:
        argv += ["--mpi", str(mpi)]
        if launcher is not None:
            argv += launcher_flags(launcher)
    if demo:
        argv.append("--demo")
    return argv


# What caps a ranked launch's playing ranks, by verb: the candidates of one ES generation, or the episodes to play
RANK_CAPS = {PIPELINE: "es.popsize", "train-controller": "es.popsize", "collect": "collect.episodes"}


def default_ranks(cfg: Any = None, cores: int | None = None, verb: str = PIPELINE) -> int:
    """The launch forms' default ranks (the pipeline's `--mpi N`, a ranked stage's): one playing rank per core this
    process may use (its CPU affinity: what a job's cgroup gives it) plus the dispatching rank 0, no more players
    than there is work for at once (`RANK_CAPS`: the ES's candidates, collect's episodes; evaluate's episodes), at
    most MAX_RANKS; 1 (no MPI) on a single core, where a dispatcher only adds a process."""
    if cores is None:
        from wm.core import procpool  # stdlib only: its CPU-affinity count, as the stages' worker counts use

        cores = procpool.cores()
    if cores < 2:
        return 1
    n = cores + 1
    try:
        section, key = RANK_CAPS.get(verb, "evaluate.episodes").split(".")
        n = min(n, int(cfg[section][key]) + 1)
    except (AttributeError, KeyError, TypeError, ValueError):
        pass  # no config (or not that section): the machine decides
    return max(1, min(n, MAX_RANKS))


def child_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child `python -m wm ...`: `base` (default this process's), the repo on PYTHONPATH and
    unbuffered output (its lines reach the UI as they are printed)."""
    env = dict(os.environ if base is None else base)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


class StageProcess:
    """One launched stage: a process group whose output is appended to `output`."""

    def __init__(self, verb: str, argv: Sequence[str], output: Path, env: dict[str, str] | None = None):
        self.verb = verb
        self.argv = list(argv)
        self.output = Path(output)
        self.env = env
        self.popen: subprocess.Popen[bytes] | None = None
        self.offset = 0  # where this launch's output starts in `output`
        self.started_at = 0.0
        self.stopping = False

    def start(self) -> None:
        """Start the command in a new session (its own process group), output appended to `self.output`."""
        self.output.parent.mkdir(parents=True, exist_ok=True)
        env = child_env(self.env)
        with open(self.output, "ab") as f:
            f.write(f"$ {' '.join(self.argv)}\n".encode())
            f.flush()
            self.offset = f.tell()
            self.popen = subprocess.Popen(
                self.argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
            )
        self.started_at = time.time()

    @property
    def pid(self) -> int:
        assert self.popen is not None, "not started"
        return self.popen.pid

    def poll(self) -> int | None:
        """The exit code, or None while running."""
        return None if self.popen is None else self.popen.poll()

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def ending(self) -> str:
        """How it ended: "stopped" (by the UI), "finished" (exit code 0) or "failed (exit code N)"."""
        code = self.poll()
        return "stopped" if self.stopping else "finished" if code == 0 else f"failed (exit code {code})"

    def signal(self, sig: int = signal.SIGTERM) -> bool:
        """Send `sig` to the whole process group (the launcher and its ranks too); False if it is already gone."""
        if not self.running:
            return False
        self.stopping = True
        return signal_group(self.pid, sig)

    def stop(self) -> bool:
        """SIGTERM the process group: the stage checkpoints and exits; rerunning it resumes."""
        return self.signal(signal.SIGTERM)

    async def wait(self, timeout: float | None = None) -> int | None:
        """Wait (without blocking the event loop) for the exit code; None on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.running:
            if deadline is not None and time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.05)
        return self.poll()

    def lines(self, interval: float = 0.1) -> AsyncIterator[str]:
        """This launch's output lines as they arrive; ends once the process has exited and all output is read."""
        return follow(self.output, self.offset, lambda: not self.running, interval)


def signal_group(pgid: int, sig: int = signal.SIGTERM) -> bool:
    """`killpg(pgid, sig)`, refusing our own group; False if no such group."""
    if pgid <= 1 or pgid == os.getpgrp():
        return False
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def process_group(pid: int) -> int | None:
    """The process group of `pid`, or None if it is gone."""
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def _text(raw: bytes) -> str:
    # A progress bar redraws with \r: keep what the terminal would show last.
    return raw.decode(errors="replace").rstrip("\r").rsplit("\r", 1)[-1]


def read_chunk(path: Path, offset: int, size: int = READ_CHUNK) -> bytes:
    """Up to `size` bytes of `path` from byte `offset` (nothing if it does not exist); blocking."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(size)
    except FileNotFoundError:
        return b""


async def follow(
    path: Path, offset: int = 0, finished: Callable[[], bool] = lambda: False, interval: float = 0.1
) -> AsyncIterator[str]:
    """Yield the lines appended to `path` from byte `offset` on, until `finished()` and the file is drained.

    Each read runs in a thread (one at a time), so the event loop only waits for it, never blocks on it.
    """
    buf = b""
    while True:
        done = finished()  # sampled before reading, so output written just before exit is still read
        chunk = await asyncio.to_thread(read_chunk, path, offset)  # a slow disk must not stall the event loop
        if len(chunk) == READ_CHUNK:
            done = False  # more to read: go round again without sleeping
        offset += len(chunk)
        buf += chunk
        *complete, buf = buf.split(b"\n")
        for raw in complete:
            yield _text(raw)
        if done:
            if buf:
                yield _text(buf)
            return
        await asyncio.sleep(interval if len(chunk) < READ_CHUNK else 0)
