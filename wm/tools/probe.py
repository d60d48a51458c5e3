"""The doctor's probes: a command run in its own process group, killed with its children at a timeout, and the
environment and answer format of the Python probes it runs."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Ran:
    """A subprocess's exit status (None: killed at the timeout), stdout and stderr."""

    rc: int | None
    out: str
    err: str

    def last_error(self) -> str:
        """The last non-empty line of stderr (a traceback's exception line), else of stdout."""
        lines = [ln.strip() for ln in (self.err or self.out).splitlines() if ln.strip()]
        return lines[-1][:200] if lines else "no output"


def run_probe(argv: Sequence[str], timeout: float, cwd: str | None = None, env: dict[str, str] | None = None) -> Ran:
    """Run `argv` in its own process group; at `timeout` seconds kill the whole group (an mpirun's ranks too)."""
    try:
        p = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    except OSError as e:
        return Ran(127, "", f"cannot start {argv[0]}: {e}")
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        try:
            out, err = p.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # a child that left the group still holds the pipes: leave it the pipes
            out, err = "", ""
        return Ran(None, out, err)
    return Ran(p.returncode, out, err)


def probe_env() -> dict[str, str]:
    """The environment of a probe: this one, with the folder holding `wm` first on PYTHONPATH (a probe may run in
    another working directory) and TensorFlow's C++ start-up lines muted."""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    if not root.name.endswith("-packages"):  # a checkout: its root holds the package (an install is on sys.path)
        env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return env


def marked(out: str, mark: str = "DOCTOR ") -> str | None:
    """The text after the last line of `out` that starts with `mark` (a probe's answer among a library's noise)."""
    found = [ln[len(mark) :] for ln in out.splitlines() if ln.startswith(mark)]
    return found[-1] if found else None
