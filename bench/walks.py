"""How far a reader walks through the code to follow one thing the suite does: one JSON object.

    .venv/bin/python bench/walks.py                      # on runs/demo, the finished tiny run `make demo` writes
    .venv/bin/python bench/walks.py --run <run> --names  # another finished run; each walk's stops listed

Each walk runs in a fresh child process under `sys.setprofile`, and every call of a function of the project
(wm/, tui/, mpi/; module bodies, comprehensions and lambdas left out) is recorded. A walk's figures:

- `stops`: the distinct functions of the project it calls, at any depth (a reader following the walk opens each);
- `files`: the distinct project files they are in;
- `top_files`: the files with the most stops, and how many each;
- `names` (with `--names`): the stops themselves, to compare two commits' walks;
- `hops`: calls from a function of one file into a function of another (each distinct caller → callee pair once):
  how often the reader changes files.

The walks (each on a temporary copy of `--run`, so the run is not touched):

- `command`: `wm evaluate --run <copy> --episodes 1 --tag walk` from the command line's `main` (in one process):
  what one command's path through the CLI, the plan, the config, the stage and an evaluation costs;
- `record`: `wm.rollouts.recording.record_episode` of one real episode of the run's C, what the TUI's play and the
  evaluation's GIFs run;
- `world`: `wm.rollouts.world.load_world` of V, M and C.

The figures count code, not time: they move only when the code does. docs/architecture.md quotes them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wm.core.rundir import RunDir  # noqa: E402  (the checkout's wm, after the path above)

# The child: trace one walk, print its figures as JSON on the last line.
_CHILD = r"""
import json, sys
from collections import Counter
from pathlib import Path

root, walk, run = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
sys.path.insert(0, str(root))
packages = tuple(str(root / p) + "/" for p in ("wm", "tui", "mpi"))
calls, hops = {}, set()

def name(code):
    return f"{Path(code.co_filename).relative_to(root)}:{code.co_qualname}"

def ours(code):
    return code.co_filename.startswith(packages) and not code.co_name.startswith("<")

def profile(frame, event, arg):
    if event != "call" or not ours(frame.f_code):
        return
    calls.setdefault(name(frame.f_code), frame.f_code.co_filename)
    caller = frame.f_back
    while caller is not None and not ours(caller.f_code):
        caller = caller.f_back
    if caller is not None and caller.f_code.co_filename != frame.f_code.co_filename:
        hops.add((name(caller.f_code), name(frame.f_code)))

if walk == "command":
    from wm.cli import main
    args = ["evaluate", "--run", run, "--episodes", "1", "--tag", "walk"]
    import wm.cli, wm.stages.evaluate  # imported before the trace: a walk counts calls, not imports
    sys.setprofile(profile)
    rc = main(args)
    sys.setprofile(None)
    assert rc == 0, rc
else:
    from wm.core.rundir import RunDir
    from wm.envs.setup import setup
    from wm.rollouts import recording, world
    rd = RunDir(run)
    cfg = rd.load_config()
    sys.setprofile(profile)
    if walk == "record":
        import numpy as np
        params = np.load(rd.artifact("params_best"))["params"]
        recording.record_episode(setup(cfg), rd, "real", params, 0)
    else:
        world.load_world(setup(cfg), rd, need=("vae", "mdnrnn", "params"), params=rd.params("best"))
    sys.setprofile(None)
files = Counter(Path(f).relative_to(root).as_posix() for f in calls.values())
out = {"stops": len(calls), "files": len(files), "top_files": dict(files.most_common(5)), "hops": len(hops)}
print(json.dumps({**out, "names": sorted(calls)} if sys.argv[4] == "1" else out))
"""


def walk(name: str, run: Path, names: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="wm-walk-") as tmp:
        copy = Path(tmp) / run.name
        shutil.copytree(run, copy, ignore=shutil.ignore_patterns("LOCK", "logs", "tb"))
        env = {**os.environ, "WM_PROGRESS": "0", "TF_CPP_MIN_LOG_LEVEL": "3"}
        argv = [sys.executable, "-c", _CHILD, str(ROOT), name, str(copy), str(int(names))]
        out = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise SystemExit(f"walk {name} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, default=ROOT / "runs" / "demo", help="a finished tiny run (default runs/demo)")
    ap.add_argument("--walks", nargs="+", default=["command", "record", "world"], choices=["command", "record", "world"])
    ap.add_argument("--names", action="store_true", help="list each walk's stops (file:function) too")
    a = ap.parse_args()
    if not RunDir(a.run).artifact("params_best").is_file():  # `make bench` runs every script without arguments
        print(json.dumps({"skipped": f"{a.run}: not a finished run (no C's parameters); make demo writes one"}))
        return
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    print(json.dumps({"commit": commit.strip(), **{w: walk(w, a.run, a.names) for w in a.walks}}, indent=1))


if __name__ == "__main__":
    main()
