"""What several test modules share: the tiny config and run dirs built on it. A test module imports them from here
(`from tests.helpers import tiny_cfg`); the pytest fixtures are in tests/conftest.py."""

from __future__ import annotations

from pathlib import Path

from wm.core.config import Config, load
from wm.core.rundir import RunDir

# ---------------------------------------------------------------- the tiny config and a run dir bound to it


def tiny_cfg(*sets: str, env: str = "doom_takecover") -> Config:
    """The tiny recipe on `env` (`--configs <env> tiny`) with `sets` ("key=value" strings, as `--set` takes them)."""
    return load([env, "tiny"], list(sets))


def tiny_run_at(path: Path, *sets: str) -> RunDir:
    """A new run dir at `path` holding tiny_cfg(*sets) as its config.yaml, no stage started."""
    run = RunDir(path)
    run.bind_config(tiny_cfg(*sets))
    return run
