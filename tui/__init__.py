"""The terminal UI: `python -m tui [RUN_DIR]`.

It reads the run directory (states, key figures, metrics JSONL, logs) and launches stages as subprocesses
(`python -m wm <verb> ...`, under `mpirun -n N` for train-controller). It never imports TensorFlow or any
other heavy dependency: only the light `wm.core.config`, `wm.core.rundir`, `wm.tools.status` and `wm.core.metrics` modules.
"""
