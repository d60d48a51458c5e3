"""C's dream in one process: the batched pool (all TF threads, the whole population × trials as one
task) gives the returns of the serial one-thread pool and the process pool; `es.device` is decided before TF
starts and `gpu` without a GPU is refused in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import WORLD_K, WORLD_P, WORLD_SETS, tiny_world
from wm.core import config as C
from wm.core.rundir import RunDir
from wm.envs.setup import setup
from wm.rollouts.engine import EvalSpec, evaluate_task, gather, init_worker, make_tasks

P, K, SETS = WORLD_P, WORLD_K, WORLD_SETS  # tiny_world's population, trials per member and settings


def population(cfg: C.Config) -> tuple[np.ndarray, np.ndarray]:
    from wm.envs.setup import setup

    n = setup(cfg).n_params
    rng = np.random.default_rng(3)
    return rng.normal(0, 0.5, (P, n)), rng.integers(0, 2**40, (P, K))


def test_batched_pool_matches_the_one_thread_and_process_pools(tmp_path):
    from wm.mpi.pool import SerialPool

    from wm.core.procpool import ProcessPool

    cfg, run = tiny_world(tmp_path / "run")
    params, seeds = population(cfg)
    spec = EvalSpec.of("dream", cfg, str(run.path))
    # the batched pool: this process, all threads, the whole population × trials as one task
    with SerialPool(init_worker, (EvalSpec.of("dream", cfg, str(run.path), threads=None),)) as pool:
        tasks = make_tasks(params, seeds, P)
        assert len(tasks) == 1
        batched = gather(pool.map(evaluate_task, tasks), P, K)
    with ProcessPool(init_worker, (spec,), workers=2) as pool:  # one-thread workers
        one_thread = gather(pool.map(evaluate_task, make_tasks(params, seeds, P)), P, K)  # the old serial path
        procs = gather(pool.map(evaluate_task, make_tasks(params, seeds, 3)), P, K)
    assert batched[2] == one_thread[2] == procs[2] == 0
    for other in (one_thread, procs):
        np.testing.assert_allclose(batched[0], other[0], rtol=0, atol=1e-6)
        np.testing.assert_array_equal(batched[1], other[1])
    assert len(set(batched[1].ravel().tolist())) > 1  # episodes end at different steps: the test means something


@pytest.mark.parametrize(
    "device, under_mpi, fitness, want",
    [
        ("auto", False, "dream", {"threads": None, "gpu": "auto"}),
        ("cpu", False, "dream", {"threads": None, "gpu": False}),
        ("gpu", True, "dream", {"threads": 1, "gpu": False}),
        ("auto", True, "dream", {"threads": 1, "gpu": False}),
        ("auto", False, "real", {"threads": 1, "gpu": False}),
        ("cpu", False, "toy", {"threads": 1, "gpu": False}),
    ],
)
def test_device_decision_by_config_and_launcher(monkeypatch, device, under_mpi, fitness, want):
    from wm.core import tf_setup
    from wm.core.devices import decide_devices

    asked = []
    monkeypatch.setattr(tf_setup, "decide", lambda **kw: asked.append(kw) or kw)
    cfg = C.load(["doom_takecover"], [f"es.device={device}", f"es.fitness={fitness}"])
    decide_devices(cfg, under_mpi)
    assert asked == [want]


def test_unknown_device_is_refused():
    from wm.core.devices import decide_devices
    from wm.core.errors import WMError

    with pytest.raises(WMError, match=r"'es.device' must be auto \| cpu \| gpu, got 'tpu'"):
        decide_devices(C.load(["doom_takecover"], ["es.device=tpu"]), False)


_DECIDE_SCRIPT = """
import json, sys
sys.path.insert(0, {root!r})
from wm.core import config as C, tf_setup
from wm.core.rundir import RunDir
from wm.stages import train_controller as TC
from wm.stages.contract import stage_input
seen, real = [], tf_setup.decide
def spy(*a, **kw):
    seen.append([kw.get("threads", "auto"), str(kw.get("gpu", "auto")), tf_setup.initialised()])
    return real(*a, **kw)
tf_setup.decide = spy
cfg = C.load(["doom_takecover", "tiny"], {sets!r})
try:
    TC.run(stage_input(cfg, "train-controller"), RunDir({run!r}), TC.Options(force=True))
except Exception as e:
    print(json.dumps({{"error": str(e)}}))
    sys.exit(0)
d = tf_setup.decided()
print(json.dumps({{"seen": seen, "decided": [d.threads, d.gpu]}}))
"""


def _decide(tmp_path, repo_root, sets: list[str], env: dict | None = None) -> dict:
    script = tmp_path / "decide.py"
    script.write_text(_DECIDE_SCRIPT.format(root=str(repo_root), sets=[*SETS, *sets], run=str(tmp_path / "run")))
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=repo_root, timeout=300, env=env or os.environ
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(300)
def test_stage_decides_devices_before_tf_starts(tmp_path, repo_root):
    tiny_world(tmp_path / "run")
    got = _decide(tmp_path, repo_root, [])
    # the first decision is the stage's, before TF started: all threads, the GPU left to the role (visible alone)
    assert "error" not in got, got["error"] if "error" in got else ""
    assert got["seen"][0] == [None, "auto", False], got
    assert got["decided"] == [None, True]
    log = RunDir(tmp_path / "run").log_path("train-controller").read_text()
    assert "batched dream pool" in log and "1 member(s)" not in log
    assert RunDir(tmp_path / "run").is_done("train-controller")


@pytest.mark.timeout(300)
def test_gpu_device_without_a_gpu_is_refused(tmp_path, repo_root):
    tiny_world(tmp_path / "run")
    got = _decide(tmp_path, repo_root, ["es.device=gpu"], env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1"})
    assert "error" in got and "\n" not in got["error"]
    assert got["error"].startswith("es.device: gpu") and "no GPU" in got["error"]


def _has_gpu() -> bool:
    return os.path.exists("/dev/nvidia0") or shutil.which("nvidia-smi") is not None


_GPU_SCRIPT = """
import json, sys
import numpy as np
sys.path.insert(0, {root!r})
from wm.core import tf_setup
tf = tf_setup.setup(threads=None, gpu=True)
assert tf.config.list_physical_devices("GPU"), "no GPU visible"
tf.config.experimental.enable_tensor_float_32_execution(False)
from wm.mpi.pool import SerialPool
from wm.core import config as C
from wm.rollouts.engine import EvalSpec, evaluate_task, gather, init_worker, make_tasks
cfg = C.load(["doom_takecover", "tiny"], {sets!r})
params, seeds = np.array({params!r}), np.array({seeds!r}, np.int64)
with SerialPool(init_worker, (EvalSpec.of("dream", cfg, {run!r}, threads=None, gpu=True),)) as pool:
    r, ln, lost = gather(pool.map(evaluate_task, make_tasks(params, seeds, len(params))), len(params), seeds.shape[1])
print(json.dumps([r.tolist(), lost]))
"""


@pytest.mark.gpu
@pytest.mark.timeout(300)
@pytest.mark.skipif(not _has_gpu(), reason="needs a GPU")
def test_gpu_batched_pool_matches_cpu(tmp_path, repo_root):
    from wm.mpi.pool import SerialPool

    cfg, run = tiny_world(tmp_path / "run")
    params, seeds = population(cfg)
    with SerialPool(init_worker, (EvalSpec.of("dream", cfg, str(run.path), threads=None),)) as pool:
        cpu = gather(pool.map(evaluate_task, make_tasks(params, seeds, P)), P, K)[0]
    script = tmp_path / "gpu.py"
    script.write_text(
        _GPU_SCRIPT.format(root=str(repo_root), sets=SETS, params=params.tolist(), seeds=seeds.tolist(), run=str(run.path))
    )
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=repo_root, timeout=240, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    gpu, lost = json.loads(out.stdout.strip().splitlines()[-1])
    gpu = np.array(gpu)
    assert lost == 0
    # float32 on another device: a done logit within round-off of 0 may end an episode a step apart
    assert np.mean(gpu == cpu) >= 0.9 and abs(gpu.mean() - cpu.mean()) <= 0.05 * cpu.mean()


def test_the_configs_death_settings_reach_every_dream(tmp_path):
    """`dream.done_sampling` and the done head's training (`mdnrnn.done_weight`, `mdnrnn.done_horizon`) reach the
    batched evaluator and DreamEnv alike (`wm.envs.setup.DreamSettings.done_options`): a horizon the trainer used but
    the dream ignored would draw deaths k times too often."""
    from wm.rollouts.dream import dream_env, load_dream

    cfg, run = tiny_world(tmp_path / "a")
    cfg = C.update(cfg, {"dream": {"done_sampling": "bernoulli"}, "mdnrnn": {"done_weight": 4.0, "done_horizon": 8}})
    for core in (load_dream(setup(cfg), run).core, dream_env(setup(cfg), run).core):
        assert (core.done_sampling, core.done_horizon) == ("bernoulli", 8)
        assert core.done_shift == pytest.approx(np.log(4.0))


def test_the_dream_dreams_with_the_dropout_m_trained_with(tmp_path):
    """M's dropout in the dream is `mdnrnn.dropout` (what M trained with; Dropout's Dream Land): the batched evaluator
    and DreamEnv alike draw its masks, and they change the dreams."""
    from wm.rollouts.dream import dream_env, load_dream

    cfg, run = tiny_world(tmp_path / "a")
    params, seeds = population(cfg)
    plain = load_dream(setup(cfg), run).evaluate(params, seeds)
    for sets, p in (({}, 0.0), ({"mdnrnn": {"dropout": 0.1}}, 0.1)):
        c = C.update(cfg, sets)
        for core in (load_dream(setup(c), run).core, dream_env(setup(c), run).core):
            assert core.m.dropout == p
    dropped = load_dream(setup(C.update(cfg, {"mdnrnn": {"dropout": 0.5}})), run).evaluate(params, seeds)
    assert (dropped[1] != plain[1]).any()  # the masks change the dreams
