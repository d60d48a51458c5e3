"""One world loader (`wm.rollouts.world.load_world`) and one evaluation engine (`wm.rollouts.engine`) behind every
pool.

load_world refuses, in one line naming the file, whatever is missing, misshapen or non-finite; the serial, process
and MPI pools give identical results for the same tasks.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import tiny_cfg
from wm.core import config as C
from wm.core.atomic import atomic_savez
from wm.core.errors import WMError
from wm.core.rundir import RunDir
from wm.envs.setup import setup
from wm.rollouts.engine import EvalSpec, evaluate_task, gather, init_worker, make_tasks
from wm.rollouts.world import load_world


def _n(cfg: C.Config) -> int:
    from wm.envs.setup import setup

    return setup(cfg).n_params


def _one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_load_world_refuses_missing_parts_in_one_line(tmp_path):
    cfg, run = tiny_cfg(), RunDir(tmp_path / "r")
    world = load_world(setup(cfg), run)  # C alone is always built
    assert world.controller.n_params == _n(cfg) and world.vae is world.mdnrnn is world.params is None
    for need, name in (
        ("params", "controller/best.npz"),
        ("initial_z", "series/initial_z.npz"),
        ("vae", "vae/vae.weights.h5"),
        ("mdnrnn", "mdnrnn/mdnrnn.weights.h5"),
    ):
        with pytest.raises(WMError) as e:
            load_world(setup(cfg), run, need=(need,), params=run.params("best"))
        assert name in _one_line(e) and "not found" in str(e.value)
    with pytest.raises(ValueError, match="needs the file"):  # which params file is the evaluation's choice
        load_world(setup(cfg), run, need=("params",))
    with pytest.raises(ValueError, match="unknown parts"):
        load_world(setup(cfg), run, need=("vea",))


def test_load_world_refuses_wrong_sizes_and_non_finite_values(tmp_path):
    cfg, run = tiny_cfg(), RunDir(tmp_path / "r")
    n, z = _n(cfg), int(cfg.vae.z_dim)
    atomic_savez(run.params("best"), params=np.zeros(n + 1))
    with pytest.raises(WMError) as e:
        load_world(setup(cfg), run, need=("params",), params=run.params("best"))
    assert f"holds {n + 1} parameters but C needs {n}" in _one_line(e)
    bad = np.zeros(n)
    bad[3] = np.nan
    atomic_savez(run.params("mean"), params=bad)
    with pytest.raises(WMError) as e:
        load_world(setup(cfg), run, need=("params",), params=run.params("mean"))
    assert "non-finite" in _one_line(e)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(WMError) as e:
        load_world(setup(cfg), run, need=("params",), params=tmp_path / "junk.npz")
    assert "cannot read" in _one_line(e)
    atomic_savez(run.initial_z, mu=np.zeros((3, z + 1), np.float32), logvar=np.zeros((3, z + 1), np.float32))
    with pytest.raises(WMError) as e:
        load_world(setup(cfg), run, need=("initial_z",))
    assert f"expected (N, {z})" in _one_line(e)
    atomic_savez(run.params("best"), params=np.ones(n))
    atomic_savez(run.initial_z, mu=np.zeros((3, z), np.float32), logvar=np.zeros((3, z), np.float32))
    world = load_world(setup(cfg), run, need=("params", "initial_z"), params=run.params("best"))
    assert world.params.dtype == np.float32 and np.all(world.params == 1) and world.initial_mu.shape == (3, z)
    assert world.params_path == run.params("best")


def _toy_tasks(cfg: C.Config) -> list:
    rng = np.random.default_rng(0)
    params, seeds = rng.normal(size=(7, _n(cfg))), rng.integers(0, 1000, (7, 3))
    return make_tasks(params, seeds, 2)


def test_serial_and_process_pools_give_identical_results(tmp_path):
    from wm.mpi.pool import SerialPool

    from wm.core.procpool import ProcessPool

    cfg = tiny_cfg()
    spec = EvalSpec.of("toy", cfg, str(tmp_path))
    tasks = _toy_tasks(cfg)
    with SerialPool(init_worker, (spec,)) as pool:
        serial = gather(pool.map(evaluate_task, tasks), 7, 3)
    with ProcessPool(init_worker, (spec,), workers=2) as pool:
        procs = gather(pool.map(evaluate_task, tasks), 7, 3)
    np.testing.assert_array_equal(serial[0], procs[0])
    np.testing.assert_array_equal(serial[1], procs[1])
    assert serial[2] == procs[2] == 0 and np.isfinite(serial[0]).all()


# The script imports this module by name for `_toy_tasks`, so that rank 0 maps the very tasks the serial pool played.
_MPI_SCRIPT = """
import json, sys
import numpy as np
sys.path.insert(0, {root!r})
from wm.mpi import launched_rank, make_pool
from wm.mpi.pool_mpi import serve
from wm.core import config as C
from wm.rollouts.engine import EvalSpec, evaluate_task, gather, init_worker
from tests.test_world import _toy_tasks
if launched_rank() > 0:
    sys.exit(serve())
cfg = C.load(["doom_takecover", "tiny"], [])
with make_pool(init_worker, (EvalSpec.of("toy", cfg, "."),)) as pool:
    r, ln, lost = gather(pool.map(evaluate_task, _toy_tasks(cfg)), 7, 3)
print(json.dumps([r.tolist(), ln.tolist(), lost]))
"""


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_mpi_pool_gives_the_serial_results(tmp_path, repo_root):
    from wm.mpi.pool import SerialPool

    cfg = tiny_cfg()
    with SerialPool(init_worker, (EvalSpec.of("toy", cfg, "."),)) as pool:
        r, ln, _ = gather(pool.map(evaluate_task, _toy_tasks(cfg)), 7, 3)
    script = tmp_path / "mpi_pool.py"
    script.write_text(_MPI_SCRIPT.format(root=str(repo_root)))
    mpirun = str(__import__("pathlib").Path(sys.executable).with_name("mpirun"))
    out = subprocess.run(
        [mpirun, "-n", "3", sys.executable, str(script)], capture_output=True, text=True, cwd=repo_root, timeout=240
    )
    assert out.returncode == 0, out.stderr
    mr, mln, lost = json.loads(out.stdout.strip().splitlines()[-1])
    np.testing.assert_array_equal(np.array(mr), r)
    np.testing.assert_array_equal(np.array(mln), ln)
    assert lost == 0


_MPI_TWICE = """
import json, sys
sys.path.insert(0, {root!r})
from wm.mpi import launched_rank
from wm.mpi.pool_mpi import serve
from wm.core import config as C
from wm.rollouts.engine import EvalSpec, evaluate_seeds
if launched_rank() > 0:
    sys.exit(serve())
cfg = C.load(["doom_takecover", "tiny"], [])
from wm.envs.setup import setup
n = setup(cfg).n_params
spec = EvalSpec.of("toy", cfg, ".")
runs = [evaluate_seeds(spec, None, list(range(10)), n)[0].tolist() for _ in range(2)]
print(json.dumps(runs))
"""


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_two_evaluations_of_one_mpi_job_both_play(tmp_path, repo_root):
    """The first evaluation of a command under mpirun plays on the ranks and closes their pool; a second one (the τ
    sweep's next τ) plays on local processes with the same results (before: it waited for ranks that had exited)."""
    script = tmp_path / "twice.py"
    script.write_text(_MPI_TWICE.format(root=str(repo_root)))
    mpirun = str(__import__("pathlib").Path(sys.executable).with_name("mpirun"))
    p = subprocess.run([mpirun, "-n", "3", sys.executable, str(script)], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    first, second = json.loads(p.stdout.strip().splitlines()[-1])
    assert first == second and len(first) == 10
