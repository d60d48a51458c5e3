"""TF device setup happens once, first: `wm.core.tf_setup` records its decision, a later compatible call
is a no-op, another GPU set after TF started is a clear WMError, and the entry points decide before TF starts.

Each case runs in a fresh Python (a decision is process-wide, and TF cannot be reset within a process). On a CPU-only
machine TF's own rule ("cannot be modified after initialization") still fires for thread counts and the CPU device
list; `tf_setup` refuses a GPU change after the start there too, so this suite catches on CPU an order that would
crash on a GPU box.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from wm.core.rundir import RunDir


def _py(code: str, repo_root, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "PMI_RANK", "PMI_SIZE")}
    full.update({"TF_CPP_MIN_LOG_LEVEL": "2", **env})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo_root, env=full, timeout=300)


def test_tf_refuses_changes_after_start_on_cpu_too(repo_root):
    """The old order: TF started by a model call, then a device/thread setting. TF raises RuntimeError on CPU for
    thread counts and the CPU list (the GPU list is empty there, so hiding it is a no-op); tf_setup turns a GPU
    change after the start into one WMError line, also on CPU."""
    code = """
import tensorflow as tf
from wm.core import tf_setup
from wm.core.errors import WMError
tf.keras.layers.Dense(2)(tf.zeros((1, 3)))   # TF starts here, before any setup
assert tf_setup.initialised()
for name, f in [("threads", lambda: tf.config.threading.set_intra_op_parallelism_threads(1)),
                ("cpu list", lambda: tf.config.set_visible_devices([], "CPU"))]:
    try:
        f(); print(name, "no error")
    except RuntimeError as e:
        print(name, "RuntimeError:", e)
try:
    tf_setup.setup(gpu=False)
    print("setup no error")
except WMError as e:
    print("setup WMError:", e)
"""
    res = _py(code, repo_root)
    assert res.returncode == 0, res.stderr
    assert "threads RuntimeError: Intra op parallelism cannot be modified after initialization" in res.stdout
    assert "cpu list RuntimeError: Visible devices cannot be modified after being initialized" in res.stdout
    assert "setup WMError: TensorFlow already runs in this process with all thread(s), GPU visible" in res.stdout


def test_setup_is_recorded_idempotent_and_refuses_another_gpu_set(repo_root):
    code = """
from wm.core import tf_setup
from wm.core.errors import WMError
from wm.core.tf_setup import Devices
tf = tf_setup.setup(threads=2)                   # the process's decision (GPU: the role's default, visible)
assert tf_setup.decided() == Devices(2, True), tf_setup.decided()
tf_setup.setup(threads=3, gpu=False)             # before the start: still a change TF can make
assert tf_setup.decided() == Devices(3, False)
assert tf.config.threading.get_intra_op_parallelism_threads() == 3
tf.constant(1.0) + 1.0                           # TF starts
tf_setup.setup(); tf_setup.setup(gpu=False); tf_setup.setup(threads=3, gpu=False)   # compatible: no-ops
tf_setup.setup(threads=1)                        # thread pools cannot change now: the running ones stay
assert tf_setup.decided() == Devices(3, False)
try:
    tf_setup.setup(gpu=True)
    print("no error")
except WMError as e:
    print("WMError:", e)
"""
    res = _py(code, repo_root)
    assert res.returncode == 0, res.stderr
    assert "WMError: TensorFlow already runs in this process with 3 thread(s), GPU hidden" in res.stdout
    assert "call wm.core.tf_setup.setup(...) first" in res.stdout


def test_decide_imports_no_tf_and_hides_the_gpu_before_the_import(repo_root):
    code = """
import os, sys
from wm.core import tf_setup
from wm.core.tf_setup import Devices
tf_setup.decide(gpu=False)
assert "tensorflow" not in sys.modules and os.environ["CUDA_VISIBLE_DEVICES"] == "-1"
tf_setup.decide(gpu=True)                        # changed before TF loaded: the GPUs come back
assert "CUDA_VISIBLE_DEVICES" not in os.environ
tf_setup.decide(threads=2, gpu=False)
tf = tf_setup.setup()
assert tf.config.threading.get_inter_op_parallelism_threads() == 2 and not tf.config.get_visible_devices("GPU")
assert tf_setup.decided() == Devices(2, False)
print("ok")
"""
    res = _py(code, repo_root)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr


def test_a_decision_is_applied_quietly_when_a_model_module_first_imports_tf(repo_root):
    """`decide` imports nothing; TF's first import, wherever it happens (here a plain `import tensorflow`, as a
    model module does), applies the decision as `setup` would, with TF's C++ start-up lines muted."""
    code = """
import sys
from wm.core import tf_setup
tf_setup.decide(threads=2, gpu=False)
assert "tensorflow" not in sys.modules
import tensorflow as tf
assert tf.config.threading.get_intra_op_parallelism_threads() == 2
assert tf.config.threading.get_inter_op_parallelism_threads() == 2 and not tf.config.get_visible_devices("GPU")
assert tf.__spec__.loader.__class__.__name__ != "_QuietLoader"  # TF keeps its own loader
print("ok")
"""
    res = _py(code, repo_root)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr
    assert "absl" not in res.stderr and "oneDNN" not in res.stderr, res.stderr


def test_a_tensorflow_process_does_not_load_jax_but_may_import_it_later(repo_root):
    """With JAX installed (the `[jax]` extra), TF's and Keras's imports each try `import jax` (TFLite's helpers,
    Keras's Orbax callback): hidden from them, a TF process loads no JAX (≈ 0.5 s of CPU and ≈ 100 MB a process);
    JAX stays importable for code that asks for it."""
    pytest.importorskip("jax")
    code = """
import sys
from wm.core import tf_setup
tf_setup.decide(gpu=False)
import keras
import wm.models.mdnrnn, wm.models.mixture_tf
import tensorflow_probability as tfp
tfp.distributions.Normal(0.0, 1.0).sample()
print("jax" in sys.modules, keras.backend.backend())
import jax
print(jax.numpy.zeros(2).shape)
"""
    res = _py(code, repo_root)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-2:] == ["False tensorflow", "(2,)"], res.stdout


def test_tensorflow_and_cma_processes_skip_their_optional_imports_which_still_load_later(repo_root):
    """A C-training rank's imports (TF, Keras, the dream) and a CMA-ES master's (pycma) load no matplotlib, no
    scipy.stats and no JAX, which those libraries import only for helpers this suite never calls (≈ 0.3–1 s of CPU a
    process, bench/startup.py); the packages stay importable afterwards, and CMA-ES still asks and tells. TF's,
    Keras's and then TFP's objects are frozen out of the garbage collector's walks, which stays on."""
    code = """
import gc, sys
from wm.core import tf_setup
tf_setup.decide(gpu=False)
import keras, wm.rollouts.dream
from wm.es.cmaes import CMAES
es = CMAES(6, popsize=4, seed=3)
print(sorted(m for m in ("jax", "matplotlib", "scipy.sparse", "scipy.stats") if m in sys.modules), keras.backend.backend())
frozen = gc.get_freeze_count()
from wm.models.mixture_tf import _distributions
_distributions()
print(frozen > 300_000, gc.get_freeze_count() > frozen + 50_000, gc.isenabled())
for _ in range(3):
    xs = es.ask()
    es.tell(-(xs ** 2).sum(axis=1))
import matplotlib.pyplot, scipy.stats
print(round(float(scipy.stats.kendalltau([1, 2, 3, 4], [1, 3, 2, 4])[0]), 3), es.ask().shape)
"""
    res = _py(code, repo_root)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-3:] == ["[] tensorflow", "True True True", "0.667 (4, 6)"], res.stdout


def test_long_lived_turns_the_collector_off_for_its_block_then_freezes_what_is_held(repo_root):
    code = """
import gc
from wm.core.imports import long_lived
seen = []
gc.disable()
with long_lived():
    seen.append(gc.isenabled())
print(seen, gc.isenabled(), gc.get_freeze_count() > 0)
gc.unfreeze()
gc.enable()
with long_lived():
    kept = [[] for _ in range(5000)]
    seen.append(gc.isenabled())
print(seen, gc.isenabled(), gc.get_freeze_count() >= 5000)
"""
    res = _py(code, repo_root)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["[False] False True", "[False, False] True True"], res.stdout


def test_the_random_baseline_never_starts_tensorflow(tmp_path, repo_root):
    """A random-policy evaluation (GIF included) through the CLI loads no model, so its process never imports TF
    (≈ 4 s of start-up per process; the verb still mutes TF where a model loads it)."""
    code = f"""
import sys
from wm.cli import main
rc = main(["evaluate", "--configs", "doom_takecover", "tiny", "--run", {str(tmp_path / "r")!r}, "--random",
           "--episodes", "2", "--gifs", "1", "--set", "evaluate.workers=1"])
assert rc == 0, rc
print("tensorflow" in sys.modules, "keras" in sys.modules)
"""
    res = _py(code, repo_root)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "False False", res.stdout
    assert (tmp_path / "r" / "eval" / "random" / "episode_000.gif").exists()


def test_a_real_evaluation_over_worker_processes_draws_its_gif_in_a_worker(tmp_path, repo_root):
    """With worker processes (or ranks) the workers that played the episodes record the GIF too, in the same map (one
    start of the worker processes), so the evaluating process, which only dispatches, never imports TF (≈ 3 s of
    CPU); the GIF shows the episode the evaluation scored, frame for frame."""
    from PIL import Image

    from tests.helpers import evaluate_run

    _, run = evaluate_run(tmp_path)
    code = f"""
import sys
import wm.core.procpool as pp
from wm.cli import main
starts, spawn = [], pp.spawn_map
pp.spawn_map = lambda *a, **k: starts.append(a[2]) or spawn(*a, **k)  # each start of the worker processes
rc = main(["evaluate", "--run", {str(run.path)!r}, "--episodes", "3", "--gifs", "1", "--set", "evaluate.workers=2"])
assert rc == 0, rc
print("tensorflow" in sys.modules, "keras" in sys.modules, starts)
"""
    res = _py(code, repo_root)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "False False [2]", res.stdout
    first = json.loads((run.path / "eval/real/episodes.jsonl").read_text().splitlines()[0])
    assert f"episode_000.gif ({first['length']} steps)" in res.stdout, res.stdout
    with Image.open(run.path / "eval/real/episode_000.gif") as im:
        assert im.n_frames == -(-first["length"] // 2)  # evaluate.gif_stride=2


def test_mpi_worker_rank_decides_one_thread_no_gpu_before_tf_loads(repo_root):
    """cli.main's first step on a worker rank: one thread, no GPU, decided before TF is imported (no CUDA probe)."""
    code = """
import os, sys
from wm.cli import tf_first
from wm.core import tf_setup
from wm.core.tf_setup import Devices
tf_first(False)
assert "tensorflow" not in sys.modules, "TF imported"
assert os.environ["CUDA_VISIBLE_DEVICES"] == "-1" and tf_setup.decided() == Devices(1, False)
tf = tf_setup.setup()                            # the worker's later setup (AUTO): the rank's decision
assert tf.config.threading.get_intra_op_parallelism_threads() == 1
tf_setup.setup(threads=1, gpu=False)             # what wm.rollouts.engine.WorkerContext asks: compatible
print("ok")
"""
    res = _py(code, repo_root, PMI_RANK="1", PMI_SIZE="2")
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr


def test_dream_evaluation_then_gif_in_one_process(tmp_path, repo_root):
    """The sequence that crashed on a GPU box: `evaluate --dream` (the engine's in-process pool
    sets TF up and starts it), then the GIF writer (a later setup in the same process), through the CLI. The dream
    samples M's mixture with plain TF ops, so its process never imports TFP (≈ 1.2 s of CPU a process). A real
    evaluation follows, and none of their graphs was traced through AutoGraph (≈ 0.8 s of CPU per evaluator built)."""
    from tests.helpers import evaluate_run

    _, run = evaluate_run(tmp_path)
    code = f"""
import sys
from wm.cli import main
from wm.core import tf_setup
tf_setup.setup(gpu=False)
from tensorflow.python.autograph.impl import api
converted, convert = [], api.converted_call
api.converted_call = lambda f, *a, **k: converted.append(getattr(f, "__name__", "?")) or convert(f, *a, **k)
rc = main(["evaluate", "--run", {str(run.path)!r}, "--dream", "--episodes", "2", "--gifs", "1"])
assert rc == 0, rc
print("tensorflow" in sys.modules, "tensorflow_probability" in sys.modules)
rc = main(["evaluate", "--run", {str(run.path)!r}, "--episodes", "2", "--gifs", "1", "--set", "evaluate.workers=1"])
assert rc == 0, rc
print(converted)
"""
    res = _py(code, repo_root)
    assert res.returncode == 0, res.stderr
    assert "error" not in res.stderr.lower(), res.stderr
    lines = res.stdout.splitlines()
    assert "True False" in lines and lines[-1] == "[]", res.stdout  # no TFP in the dream; no AutoGraph at all
    assert (RunDir(run.path).eval_dir("dream") / "episode_000.gif").exists()
    assert json.loads((run.path / "eval/dream/summary.json").read_text())["episodes"] == 2


def test_every_graph_wm_traces_skips_autograph(repo_root):
    """Every `tf.function` under wm/ is built with `autograph=False`: the graphs write their loops as
    `tf.while_loop` and `tf.cond`, and AutoGraph's conversion of the Keras calls they trace costs each evaluating or
    training process about a second of CPU (the test above counts the conversions of a real run)."""
    import ast

    def named(f: ast.expr) -> bool:  # `tf.function`
        return isinstance(f, ast.Attribute) and f.attr == "function" and getattr(f.value, "id", "") == "tf"

    sites, bare = [], []
    for path in sorted((repo_root / "wm").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and named(node.func):
                off = any(k.arg == "autograph" and getattr(k.value, "value", None) is False for k in node.keywords)
                sites.append((f"{path.relative_to(repo_root)}:{node.lineno}", off))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                bare += [f"{path.relative_to(repo_root)}:{d.lineno}" for d in node.decorator_list if named(d)]
    assert len(sites) >= 16, sites
    assert bare == [] and [where for where, off in sites if not off] == []
