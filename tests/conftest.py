"""Shared fixtures. Tests never write under runs/; they use tmp_path."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# Under `make test` the xdist workers share the cores: each TensorFlow process (a worker's own, and every stage it
# starts, which inherit the environment) takes its share of threads instead of one per core. Oversubscribed, TF's
# thread pools spin for each other: two copies of one V test took 55.9 s and 97 s of CPU with TF's default threads,
# 44.9 s and 83 s with one each. A user's runs keep TF's default (all cores).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
if _WORKERS > 1:
    from wm.core.procpool import cores  # the cores this process may use (its CPU affinity)

    _share = str(max(1, cores() // _WORKERS))
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", _share)
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", _share)

# The test process's TF devices, decided once before any test loads TF (wm.core.tf_setup; imports no TensorFlow): stages
# and evaluators run in-process here with the engine's CPU settings, so the GPU stays hidden (subprocesses too).
from wm.core import tf_setup  # noqa: E402

tf_setup.decide(gpu=False)


@pytest.fixture
def repo_root() -> Path:
    return ROOT


def pytest_collection_modifyitems(config, items: list[pytest.Item]) -> None:
    """The slow tier first (a stable sort): under xdist's work stealing the longest tests start at once and the short
    ones fill the cores at the end, so no core waits alone on a 4-minute pipeline while the other is idle."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
