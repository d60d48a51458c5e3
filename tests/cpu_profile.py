"""A pytest plugin that writes what each test cost the cores: its wall time and its CPU seconds, its own process's
and those of every process it started and waited for (the stages, ranks and workers a test launches), one line a
test in `WM_CPU_PROFILE` (default `test_cpu.tsv`, git-ignored): test id, own CPU, children's CPU, wall seconds, the
xdist worker and the time it ended (what says how evenly the workers were loaded and when each ran dry). Under xdist
every worker appends to the same file.

    PYTHONPATH=. .venv/bin/python -m pytest -q -n auto --dist worksteal -p tests.cpu_profile
    sort -t$'\\t' -k3 -rn test_cpu.tsv | head       # the costliest tests by their children's CPU

`make test` is bound by CPU on 2 cores (docs/results/timings.md, "The test suite"): this is what says which tests
to make cheaper, and what `SLOW_SECONDS` in tests/conftest.py is read from.
"""

from __future__ import annotations

import os
import resource
import time

import pytest


def _cpu() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    (me0, kids0), t0 = _cpu(), time.time()
    yield
    me1, kids1 = _cpu()
    with open(os.environ.get("WM_CPU_PROFILE", "test_cpu.tsv"), "a") as f:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "-")
        f.write(f"{item.nodeid}\t{me1 - me0:.2f}\t{kids1 - kids0:.2f}\t{time.time() - t0:.2f}\t{worker}\t{time.time():.1f}\n")
