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
