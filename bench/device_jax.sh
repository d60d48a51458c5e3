#!/usr/bin/env bash
# V and M on JAX on a lent GPU machine, next to the same machine's CPU for the same steps (docs/guide/backends.md).
#
# The machine has JAX with CUDA but no TensorFlow and no network. Keras and its two pure-Python needs that image lacks
# travel as wheels, fetched here first (the folder .whl is ignored by git):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl keras==3.15.1 namex==0.1.0 optree==0.20.0
# then, there:  bash bench/device_jax.sh        (OUT=<folder> for the JSON files; STEPS=<n>, default 50)
# A dry run anywhere (small models, JAX on the CPU, no wheels needed):  DRY=1 PY=.venv/bin/python bash bench/device_jax.sh
#
# Writes $OUT/jax_gpu.json and $OUT/jax_cpu.json (bench/backends.py's object each: V frames/s, M sequences/s, seconds
# per step and per epoch, both loss curves) and $OUT/gpu.txt (nvidia-smi's name and memory line, when there is one).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
OUT=${OUT:-runs/device}
mkdir -p "$OUT"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  SITE=$(mktemp -d)  # the carried wheels, installed for this run only
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl
  export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
fi
if [ "${DRY:-0}" = 1 ]; then
  export JAX_PLATFORMS=cpu
  ARGS=(--tiny --steps 2 --warm 1)
else
  ARGS=(--steps "${STEPS:-50}")
fi
export PYTHONUNBUFFERED=1
"$PY" bench/backends.py --backends jax "${ARGS[@]}" > "$OUT/jax_gpu.json"
JAX_PLATFORMS=cpu "$PY" bench/backends.py --backends jax "${ARGS[@]}" > "$OUT/jax_cpu.json"
(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || echo "no GPU") > "$OUT/gpu.txt" 2>/dev/null
echo "wrote $OUT/jax_gpu.json $OUT/jax_cpu.json $OUT/gpu.txt"
