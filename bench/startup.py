"""What a process pays before its first step, in CPU seconds: one JSON object.

    .venv/bin/python bench/startup.py              # 5 fresh processes per probe, the median
    .venv/bin/python bench/startup.py --repeat 9

Every stage, MPI rank and pool worker is a fresh Python process, and most of them import TensorFlow and Keras
before they play or train anything: the suite starts about a hundred such processes, a `small` run a few dozen per
round. Each probe is `python -c <imports>` in a child, its CPU time (user + sys, from the OS's accounting of the
child) taken as the median of `--repeat` runs:

- `python`: numpy and wm's config, the floor of any `python -m wm` process;
- `tf_keras`: TF and Keras through `wm.core.tf_setup` (muted, the optional imports skipped: `wm.core.imports`), as a
  stage loads them, with V's module;
- `dream`: the dream's modules (C's training ranks, the dream's checks and evaluations, play), which import no TFP
  (tests/test_tf_setup.py asserts it);
- `m_training`: M's loss, TFP's mixture: what `dream` does not pay (`tfp_s`);
- `jax`: Keras on JAX with jax.numpy (V and M's training with `run.backend: jax`), where the extra is installed;
- `cmaes`: pycma's CMA-ES, built: the CMA-ES master of train-controller, which loads no TF;
- `v_step`: `tf_keras`, then V built and train-vae's step (`wm.models.vae_tf.make_train_step`) traced and run 3
  times (batch 8): start-up through the first steps, where a stage's graphs are traced; `v_step_collected` is the
  same with the garbage collector left to walk TF's objects (`wm.core.imports.long_lived` replaced by a no-op), so
  `long_lived_saves_s` is the difference.

`ml_dtypes_version` is printed beside them: that package, imported by TF, Keras and JAX, sets a good part of the
figure (requirements.txt holds it at 0.6; docs/results/timings.md, "The test suite").
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TF = "from wm.core import tf_setup; tf_setup.decide(gpu=False); "
PROBES = {
    "python": "import numpy, wm.core.config",
    "tf_keras": TF + "import keras, wm.models.vae",
    "dream": TF + "import keras, wm.rollouts.dream",
    "m_training": TF + "import keras, wm.rollouts.dream, wm.models.mixture_tf as m; m._distributions()",
    "jax": "import keras, jax.numpy",
    "cmaes": "from wm.es.cmaes import CMAES; CMAES(8, popsize=4)",
}
V_STEP = """
import numpy as np
from wm.models.vae import ConvVAE, make_optimizer
from wm.models.vae_tf import make_train_step
v = ConvVAE(32)
step = make_train_step(v, make_optimizer(), 0.5, seed=0)
x = np.random.default_rng(0).integers(0, 256, (8, 64, 64, 3), dtype=np.uint8)
for i in range(3):
    step(x, i)
"""
PROBES["v_step"] = TF + "import keras, wm.models.vae\n" + V_STEP
# the same, with TF's objects left to the collector's walks: long_lived replaced before tf_setup imports it
PROBES["v_step_collected"] = (
    "import contextlib, wm.core.imports as i; i.long_lived = contextlib.nullcontext\n" + PROBES["v_step"]
)


def cpu_seconds(code: str, env: dict[str, str]) -> float:
    """The CPU time (user + sys) of one child running `code`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5, help="fresh processes per probe (the median is printed)")
    args = ap.parse_args()
    base = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT), "KERAS_BACKEND": "tensorflow"}
    out: dict[str, object] = {"repeat": args.repeat}
    import ml_dtypes

    out["ml_dtypes_version"] = ml_dtypes.__version__
    for name, code in PROBES.items():
        if name == "jax" and importlib.util.find_spec("jax") is None:
            continue
        env = {**base, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"} if name == "jax" else base
        out[f"{name}_cpu_s"] = round(statistics.median(cpu_seconds(code, env) for _ in range(args.repeat)), 3)
    out["tfp_s"] = round(out["m_training_cpu_s"] - out["dream_cpu_s"], 3)
    out["tf_keras_over_python"] = round(out["tf_keras_cpu_s"] / out["python_cpu_s"], 2)
    out["long_lived_saves_s"] = round(out["v_step_collected_cpu_s"] - out["v_step_cpu_s"], 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
