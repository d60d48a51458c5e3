"""The installable package: the wheel builds, installs into a fresh venv and runs `wm` from another directory.

The fresh venv sees this venv's third-party packages (a .pth file) so that the test installs only the wheel itself
(`--no-deps`): what is checked is the wheel's own content — its packages (wm.core, wm.mpi, wm.tui, ...), the configs
and the shipped agent as package data, the console script — not TensorFlow's install.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    # without a PYTHONPATH naming the checkout (tests/cpu_profile.py's command sets one), which would show pip this
    # checkout's own metadata as the package already installed, and `wm` this checkout rather than the wheel
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, **kw)


def test_the_wheel_installs_and_runs_from_another_directory(tmp_path, repo_root):
    wheels = tmp_path / "wheels"
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(repo_root)], cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = wheels.glob("world_models_suite-*.whl")
    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    py = venv / "bin" / "python"
    purelib = _run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    ours = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    Path(purelib, "deps-of-the-test.pth").write_text("\n".join(dict.fromkeys(ours)) + "\n")
    inst = _run([str(py), "-m", "pip", "install", "--no-deps", "-q", str(wheel)])
    assert inst.returncode == 0, inst.stderr[-3000:]

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    wm = venv / "bin" / "wm"
    help_ = _run([str(wm), "--help"], cwd=elsewhere)
    assert help_.returncode == 0 and "train-controller" in help_.stdout, help_.stderr
    where = _run(
        [str(py), "-c", "import wm, wm.mpi, wm.tui, wm.core.config as C; print(wm.__file__, C.CONFIG_DIR)"], cwd=elsewhere
    )
    assert where.returncode == 0 and str(repo_root) not in where.stdout and "site-packages" in where.stdout, where
    agent = Path(where.stdout.split()[0]).parent / "agents" / "doom_small_s2"
    status = _run([str(wm), "status", "--run", str(agent)], cwd=elsewhere)
    assert status.returncode == 0, status.stderr
    assert "evaluate          done         episodes 100  mean 830.4" in status.stdout
    page = _run([str(wm), "docs", "--path", "docs/guide/gpu.md"], cwd=elsewhere)  # the pages the hints name, installed
    assert page.returncode == 0 and "site-packages" in page.stdout and Path(page.stdout.strip()).is_file(), page
    blocks = _run([str(py), "-c", "from wm.core import config as C; print(C.load(['doom_takecover', 'tiny']).es.popsize)"])
    assert blocks.stdout.strip() == "8", blocks.stderr
    # nothing installs a generic top-level name
    top = _run(
        [str(py), "-c", "import importlib.util as u; print([m for m in ('mpi', 'tui') if u.find_spec(m)])"], cwd=elsewhere
    )
    assert top.stdout.strip() == "[]", top
