"""train-controller's checkpoint in a run dir, `controller/es_state.npz` (its format: `wm.es.state`): found, read,
checked against the config and written; the metrics history cut back to it on a resume.

An older version of this code pickled the checkpoint (`controller/es_state.pkl`). This version reads no pickle:
such a file (and no `es_state.npz`) is refused in one line before anything is written; commit `LAST_PICKLE_READER`
is the last that converts one (`--trust-pickle`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wm.core.errors import WMError
from wm.core.rundir import RunDir
from wm.es import state as es_state

STATE_VERSION = 2  # 1: the pickled es_state.pkl of older code, no longer read
LAST_PICKLE_READER = "f7e15b4"  # the last commit that reads (and converts) an older pickled es_state.pkl


def state_path(run: RunDir) -> Path:
    """The checkpoint: `controller/es_state.npz`."""
    return run.es_state


def read_state(path: Path) -> dict[str, Any]:
    """The checkpoint `path` (`es_state.npz`): plain values and arrays, read with `np.load(allow_pickle=False)`."""
    try:
        return es_state.load(path)
    except Exception as e:  # noqa: BLE001 — any failure to read it back means the same thing to the user
        raise es_state.read_error(path, e) from None


def _pickle_refusal(path: Path) -> WMError:
    return WMError(
        f"{path} is a checkpoint in the pickle format of an older version of this code, which this version does not "
        f"read: --force trains afresh, or check out commit {LAST_PICKLE_READER} (the last that reads it) and rerun "
        "there with --trust-pickle to convert it to es_state.npz"
    )


def stored_state(run: RunDir) -> dict[str, Any] | None:
    """The checkpoint to resume from, None when there is none. An older version's `es_state.pkl` (and no
    `es_state.npz`): refused in one line, nothing read or written."""
    path, pickled = state_path(run), run.es_state_legacy
    if path.exists():
        return read_state(path)
    if pickled.exists():
        raise _pickle_refusal(pickled)
    return None


def write_state(path: Path, state: dict[str, Any]) -> None:
    try:
        es_state.save(path, state)
    except es_state.StateError as e:  # a bug: something in the state is no plain value
        raise WMError(f"{path}: the checkpoint cannot be written as plain values ({e})") from None


def check_state(state: dict[str, Any], path: Path, n: int, popsize: int, algorithm: str = "cma") -> dict[str, Any]:
    if state.get("version") != STATE_VERSION or state.get("n_params") != n or state.get("popsize") != popsize:
        raise WMError(
            f"{path} was written for {state.get('n_params')} params × pop {state.get('popsize')}, "
            f"the config asks {n} × {popsize}; rerun with --force to start afresh"
        )
    held = state["es"].get("algorithm", "cma")
    if held != algorithm:
        raise WMError(f"{path} holds a {held} state but es.algorithm is {algorithm}; rerun with --force to start afresh")
    return state


def truncate(path: Any, size: int) -> None:
    """`path` cut back to `size` bytes (the metrics history written after the checkpoint, redone on a resume)."""
    if path.exists() and path.stat().st_size > size:
        with open(path, "r+b") as f:
            f.truncate(size)
