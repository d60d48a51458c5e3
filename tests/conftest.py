"""Shared fixtures. Tests never write under runs/; they use tmp_path."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
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

# JAX's persistent compilation cache, one folder for the whole run (set here in pytest's first process, inherited by
# the xdist workers and every process they start): a program a JAX process compiled (V's and M's steps on JAX, the
# device script's dry run) loads from it in the next process that compiles the same one. bench/backends.py's tiny
# JAX run took 16.9 s of CPU, 3.3 s with the cache filled. Every program is cached, not only those that took
# JAX's default second to compile. Removed when pytest ends (`pytest_unconfigure`).
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _JAX_CACHE = tempfile.mkdtemp(prefix="wm-tests-jax-cache-")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
else:
    _JAX_CACHE = None  # the caller's, or this run's first process's (an xdist worker inherits it)


def pytest_unconfigure(config) -> None:
    if _JAX_CACHE is not None:
        shutil.rmtree(_JAX_CACHE, ignore_errors=True)


# The test process's TF devices, decided once before any test loads TF (wm.core.tf_setup; imports no TensorFlow): stages
# and evaluators run in-process here with the engine's CPU settings, so the GPU stays hidden (subprocesses too).
from wm.core import tf_setup  # noqa: E402

tf_setup.decide(gpu=False)


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture
def tiny_run(tmp_path):
    """A new run dir, `tmp_path / "r"`, holding the tiny Doom config (tests/helpers.py's tiny_cfg()), no stage started.
    The helpers that modules share are in tests/helpers.py."""
    from tests.helpers import tiny_run_at

    return tiny_run_at(tmp_path / "r")


# What each module of the slow tier costs under `make test`: CPU seconds of its tests and every process they start,
# on 2 cores (`-p tests.cpu_profile`, tests/cpu_profile.py); a module not named counts 10. Only the order of the
# tests depends on these figures.
SLOW_SECONDS = {
    "test_pipeline.py": 230,
    "test_kill_campaign.py": 140,
    "test_pipeline_car.py": 115,
    "test_pipeline_atari.py": 100,
    "test_backends.py": 65,
    "test_vae.py": 65,
    "test_export.py": 45,
    "test_faults.py": 15,
    "test_package.py": 10,
}


def pytest_collection_modifyitems(config, items: list[pytest.Item]) -> None:
    """The slow tier first, shared out between the xdist workers before anything else.

    Work stealing (`--dist worksteal`) hands each of W workers an equal count of the tests in their order, the first
    share to the first worker, then moves tests from a busy worker's queue end to an idle one. So the slow modules are
    dealt out, longest first, each whole (a module-scoped fixture is built once) to the share with the least slow time
    so far; each share starts with its slow tests and is filled up to its count with the quick ones, in their order.
    One worker (or none): the slow tier first, in collection order."""
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    quick = [item for item in items if item.get_closest_marker("slow") is None]
    if _WORKERS <= 1:
        items[:] = slow + quick
        return
    modules: dict[str, list[pytest.Item]] = {}
    for item in slow:
        modules.setdefault(item.path.name, []).append(item)
    shares: list[list[pytest.Item]] = [[] for _ in range(_WORKERS)]
    load = [0.0] * _WORKERS
    for name in sorted(modules, key=lambda n: -SLOW_SECONDS.get(n, 10)):
        i = load.index(min(load))
        shares[i] += modules[name]
        load[i] += SLOW_SECONDS.get(name, 10)
    left, ordered = len(items), []
    for i, share in enumerate(shares):
        size = left // (_WORKERS - i)  # what xdist's first schedule sends this worker
        take = max(0, size - len(share))
        share += quick[:take]
        del quick[:take]
        ordered += share
        left -= len(share)
    items[:] = ordered + quick
