"""`python -m wm doctor`: check this machine for runs, one line per check with the fix of what would break one.

    wm doctor                                   # versions, gpu, mpi, doom, carracing, atari, disk
    wm doctor --skip envs gpu --runs /scratch/runs
    wm doctor --launcher srun --launcher-args=--mpi=pmix     # the 2-rank hello under the launcher C's job uses
    wm doctor --json                            # one JSON object: {"checks": [...], "ok": bool}

Each check is a function of the options returning a `Result` (name, ok | warn | fail, one-line detail, one-line fix
when not ok). Exit 0 when nothing fails (warns do not), 1 when a check fails, 2 for a usage error.

This process imports no TensorFlow, gymnasium, ViZDoom or mpi4py: versions come from the installed packages'
metadata, the ranges they are held to from pyproject.toml (`wm.tools.pins`: the installed metadata in a wheel), and
every check that loads one of them runs it in a subprocess of this interpreter with a timeout (its process group
killed at the timeout), so a broken CUDA or MPI install can neither hang nor crash the doctor.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from wm.core.launcher import Launcher, add_launcher_args
from wm.core.launcher import from_args as launcher_from_args
from wm.tools.pins import declared
from wm.tools.probe import marked, probe_env, run_probe

OK, WARN, FAIL = "ok", "warn", "fail"
LOW_DISK_GB = 10.0

# The core packages the versions check reads: (distribution, shown as). Their ranges, and every other package's in a
# fix line, are pyproject.toml's, written there only (`declared()`, wm/tools/pins.py).
CORE: tuple[tuple[str, str], ...] = (
    ("tensorflow", "TF"),
    ("keras", "Keras"),
    ("tensorflow-probability", "TFP"),
    ("tf-keras", "tf-keras"),
    ("gymnasium", "gymnasium"),
    ("numpy", "numpy"),
    ("cma", "cma"),
    ("mpi4py", "mpi4py"),
)


@dataclass(frozen=True)
class Result:
    """One check's outcome: `status` ok | warn | fail, a one-line `detail`, and a one-line `fix` when not ok."""

    name: str
    status: str
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Options:
    """What the checks are given: the launcher of the MPI hello (None: `Launcher()`, the venv's mpirun), the runs
    folder, the timeout of each subprocess in seconds."""

    launcher: Launcher | None = None
    runs: Path = Path("runs")
    timeout: float = 120.0


# ---------------------------------------------------------------- helpers (tests replace some of them)


def interpreter() -> str:
    """The python every subprocess check runs: this one."""
    return sys.executable


def installed_version(dist: str) -> str | None:
    """The installed version of distribution `dist`, None when it is not installed (metadata only: no import)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def shown(path: str | os.PathLike[str]) -> str:
    """A path as a fix line shows it: relative to the working directory when it lies under it."""
    p = Path(path)
    with contextlib.suppress(ValueError):
        if p.is_absolute():
            return str(p.relative_to(Path.cwd()))
    return str(p)


def pip(*specs: str) -> str:
    """The pip line that installs `specs` into this interpreter."""
    return f"{shown(interpreter())} -m pip install " + " ".join(shlex.quote(s) for s in specs)


def _version(v: str | None) -> Version | None:
    """`v` as PEP 440 reads it; None when it is missing or no version."""
    try:
        return Version(v) if v else None
    except InvalidVersion:
        return None


# ---------------------------------------------------------------- the checks


def check_versions(opts: Options) -> Result:
    """Python and the core packages, from their metadata: a missing one, or a Keras that is not 3.x, fails; a
    tf-keras of another minor version than TensorFlow's fails (TFP imports it); a version outside the tested range
    warns."""
    py, pins = sys.version_info, declared()
    python = f"{py.major}.{py.minor}.{py.micro}"
    found = {dist: installed_version(dist) for dist, _ in CORE}
    detail = f"Python {python}, " + ", ".join(f"{label} {found[dist] or 'missing'}" for dist, label in CORE)
    if not pins.python.contains(python, prereleases=True):
        return Result("versions", FAIL, detail, f"a venv of Python {pins.python}, then install again")
    missing = [dist for dist, v in found.items() if v is None]
    if missing:
        return Result("versions", FAIL, f"missing {', '.join(missing)}; {detail}", pip(*map(pins.spec, missing)))
    keras = _version(found["keras"])
    if keras is None or keras.major != 3:
        return Result("versions", FAIL, f"Keras {found['keras']} is not Keras 3; {detail}", pip(pins.spec("keras")))
    tf, tfk = _version(found["tensorflow"]), _version(found["tf-keras"])
    if tf is not None and (tfk is None or tf.release[:2] != tfk.release[:2]):
        want = f"tf-keras=={tf.major}.{tf.minor}.*"
        return Result(
            "versions", FAIL, f"tf-keras {found['tf-keras']} does not match TF {found['tensorflow']}; {detail}", pip(want)
        )
    # prereleases=True: a pre-release inside the range is in it, whatever packaging's default
    off = [d for d, v in found.items() if (w := _version(v)) is None or not pins[d].specifier.contains(w, prereleases=True)]
    if off:
        return Result(
            "versions",
            WARN,
            f"outside the tested set: {', '.join(off)}; {detail}",
            pip(*map(pins.spec, off)) + " (in a checkout: -r requirements.txt, the tested set)",
        )
    return Result("versions", OK, detail)


GPU_PROBE = r"""
import json, os
import tensorflow as tf
info = dict(tf.sysconfig.get_build_info())
gpus = tf.config.list_physical_devices("GPU")
names, growth = [], None
for g in gpus:
    try:
        names.append(tf.config.experimental.get_device_details(g).get("device_name") or g.name)
    except Exception:
        names.append(g.name)
try:
    for g in gpus:
        tf.config.experimental.set_memory_growth(g, True)
except Exception as e:
    growth = f"{type(e).__name__}: {e}".splitlines()[0]
print("DOCTOR " + json.dumps({"tf": tf.__version__, "cuda": info.get("cuda_version"), "cudnn": info.get("cudnn_version"),
    "cuda_build": bool(info.get("is_cuda_build")), "gpus": names, "growth_error": growth}))
"""

GPU_FIX = "for V and M on a GPU: {pip}, check nvidia-smi, unset CUDA_VISIBLE_DEVICES (docs/guide/gpu.md)"


# what TensorFlow's start-up lines on stderr say about a machine where it sees no GPU
NO_GPU_WHY = (
    ("Could not find cuda drivers", "no NVIDIA driver found"),
    ("Cannot dlopen some GPU libraries", "TF's CUDA libraries are missing"),
)


def check_gpu(opts: Options) -> Result:
    """The GPUs TensorFlow sees, its CUDA/cuDNN build, and whether memory growth can be set (every GPU process of
    the suite sets it), probed in a subprocess. No GPU is a warn: V and M then train on the CPU."""
    ran = run_probe([interpreter(), "-c", GPU_PROBE], opts.timeout, env=probe_env())
    fix = GPU_FIX.format(pip=pip(declared().spec("tensorflow", "and-cuda")))
    if ran.rc is None:
        return Result(
            "gpu",
            FAIL,
            f"TensorFlow's GPU probe did not finish in {opts.timeout:g} s (a hanging CUDA driver or library)",
            f"check nvidia-smi and the driver; {fix}; CUDA_VISIBLE_DEVICES=-1 keeps a command off the GPU",
        )
    answer = marked(ran.out)
    if ran.rc != 0 or answer is None:
        return Result("gpu", FAIL, f"TensorFlow's GPU probe failed (exit {ran.rc}): {ran.last_error()}", fix)
    info = json.loads(answer)
    build = (
        f"TF {info['tf']}, CUDA {info['cuda'] or '-'}, cuDNN {info['cudnn'] or '-'}"
        if info["cuda_build"]
        else f"TF {info['tf']}, a build without CUDA"
    )
    if not info["gpus"]:
        why = next((w for text, w in NO_GPU_WHY if text in ran.err), "none visible")
        if os.environ.get("CUDA_VISIBLE_DEVICES") == "-1":
            why = "CUDA_VISIBLE_DEVICES=-1 hides them"
        return Result("gpu", WARN, f"TensorFlow sees no GPU ({why}; {build}): V and M will train on the CPU", fix)
    gpus = ", ".join(info["gpus"])
    if info["growth_error"]:
        return Result(
            "gpu",
            FAIL,
            f"{len(info['gpus'])} GPU(s): {gpus} ({build}); memory growth cannot be set: {info['growth_error']}",
            fix,
        )
    return Result("gpu", OK, f"{len(info['gpus'])} GPU(s): {gpus} ({build}); memory growth can be set")


MPI_LIBRARY = "from mpi4py import MPI; print('DOCTOR ' + MPI.Get_library_version().splitlines()[0])"
# one write(2) per rank: Hydra forwards the ranks' output in whatever pieces it reads, so two prints interleave
MPI_HELLO = 'import os; from mpi4py import MPI; c = MPI.COMM_WORLD; os.write(1, f"{c.rank} {c.size}\\n".encode())'


def _library_name(line: str) -> str:
    """`MPICH Version:      5.0.2` -> `MPICH 5.0.2`; `Open MPI v4.1.5, package: …` -> `Open MPI v4.1.5`."""
    line = re.sub(r"\s*Version:\s*", " ", line.split(",")[0]).strip()
    return re.sub(r"\s+", " ", line)[:60]


# What a launcher's `--version` names first: (pattern, the MPI it is; group 1 the version)
LAUNCHER_VERSIONS = (
    (r"Intel\(R\) MPI Library.*?Version\s+(\S+)", "Intel MPI"),
    (r"\(Open MPI\)\s+(\S+)", "Open MPI"),
    (r"HYDRA build details:\s*Version:\s+(\S+)", "MPICH"),  # MPICH's own launcher (Hydra)
    (r"^slurm\s+(\S+)", "Slurm"),  # srun: the ranks reach MPI through its PMI
)


def launcher_library(program: str, timeout: float) -> str | None:
    """The MPI a launcher belongs to, from `PROGRAM --version` (`Open MPI 4.1.5`, `MPICH 5.0.2`, `Slurm 23.02`), or
    None when it does not say (a template's command, an unknown launcher)."""
    ran = run_probe([program, "--version"], min(timeout, 10.0))
    text = f"{ran.out}\n{ran.err}"
    for pattern, name in LAUNCHER_VERSIONS:
        if m := re.search(pattern, text, re.M | re.S):
            return f"{name} {m.group(1).rstrip(',')}"
    return None


def hello_argv(launcher: Launcher, python: str) -> list[str]:
    """`<launcher's prefix for 2 ranks> <python> -c <hello>`: `mpirun -n 2 …`, `srun ARGS -n 2 …`, a template's words."""
    return [*launcher.prefix(2), python, "-c", MPI_HELLO]


def check_mpi(opts: Options) -> Result:
    """mpi4py's MPI library, and a 2-rank hello under the launcher `pipeline --mpi` would use (`--launcher`,
    `--launcher-args`, `WM_LAUNCHER`: `wm.core.launcher`): both ranks must print world size 2. World size 1 means
    mpi4py was built against another MPI than the launcher's."""
    py = interpreter()
    lib = run_probe([py, "-c", MPI_LIBRARY], opts.timeout, env=probe_env())
    if lib.rc != 0 or marked(lib.out) is None:
        why = "did not answer in time" if lib.rc is None else f"does not load: {lib.last_error()}"
        return Result("mpi", FAIL, f"mpi4py's MPI {why}", pip(declared().spec("mpi4py"), declared().spec("mpich")))
    library = _library_name(marked(lib.out) or "")
    launcher = opts.launcher or Launcher()
    argv = hello_argv(launcher, py)
    words = argv[: len(argv) - 3]  # the launcher's part
    if words[-2:] == ["-n", "2"]:
        words = words[:-2]
    if shutil.which(words[0]) is None and not Path(words[0]).is_file():
        return Result(
            "mpi",
            FAIL,
            f"no launcher {words[0]!r} (mpi4py's MPI: {library})",
            f"{pip(declared().spec('mpich'))} (its mpirun goes beside python), or --launcher with your MPI's "
            "(docs/guide/mpi-and-clusters.md#launchers)",
        )
    where = " ".join([shown(words[0]), *words[1:]])
    own = launcher_library(words[0], opts.timeout) if launcher.kind != "template" else None
    ran = run_probe(argv, opts.timeout, env=probe_env())
    if ran.rc is None:
        return Result(
            "mpi",
            FAIL,
            f"2-rank hello under {where} did not finish in {opts.timeout:g} s",
            "a launcher that waits for an allocation or a PMI: under Slurm run inside one (salloc) or name the PMI "
            "(--launcher srun --launcher-args=--mpi=pmix); docs/guide/mpi-and-clusters.md",
        )
    ranks = [(int(r), int(n)) for r, n in re.findall(r"^\s*(\d+) (\d+)\s*$", ran.out, re.M)]
    if ran.rc != 0 or not ranks:
        return Result(
            "mpi",
            FAIL,
            f"2-rank hello under {where} failed (exit {ran.rc}): {ran.last_error()}",
            f"check that the launcher starts anything ({shlex.join([*argv[:-3], 'hostname'])}), then that mpi4py was "
            "built with its MPI (docs/guide/mpi-and-clusters.md#a-clusters-own-mpi)",
        )
    if sorted(ranks) == [(0, 2), (1, 2)]:
        return Result("mpi", OK, f"2-rank hello under {where}: world size 2 ({library})")
    rebuild = (
        f"rebuild mpi4py with the launcher's MPI: {shown(py)} -m pip uninstall -y mpi4py mpich && "
        f"MPICC=$(which mpicc) {shown(py)} -m pip install --no-binary=mpi4py --no-cache-dir mpi4py "
        "(docs/guide/mpi-and-clusters.md#a-clusters-own-mpi)"
    )
    if {n for _, n in ranks} == {1}:
        mpis = f"the launcher's: {own}; mpi4py's: {library}" if own else f"mpi4py's: {library}"
        return Result(
            "mpi",
            FAIL,
            f"2-rank hello under {where}: world size 1 on every rank, the launcher is not mpi4py's MPI ({mpis})",
            rebuild,
        )
    told = ", ".join(f"{r} {n}" for r, n in ranks)
    return Result("mpi", FAIL, f"2-rank hello under {where}: rank and size {told}, not 0 2 and 1 2", rebuild)


ENV_PROBE = r"""
import sys
import numpy as np
from wm.core import config as C
from wm.envs import make_env
env = make_env(C.load(sys.argv[1:]), seed=0)
obs, _ = env.reset(seed=0)
zero = np.zeros(env.action_space.shape, env.action_space.dtype)
for _ in range(10):
    obs, _, terminated, truncated, _ = env.step(zero)
    if terminated or truncated:
        obs, _ = env.reset()
env.close()
print("DOCTOR", "x".join(map(str, obs.shape)), obs.dtype)
"""


def _step_env(name: str, blocks: Sequence[str], what: str, fix: str, opts: Options, failing: str = FAIL) -> Result:
    """Build the env of config `blocks` headless in a subprocess (in a scratch folder: ViZDoom writes into its
    working directory), reset it and take 10 steps of a zero action."""
    with tempfile.TemporaryDirectory(prefix="wm-doctor-") as scratch:
        ran = run_probe([interpreter(), "-c", ENV_PROBE, *blocks], opts.timeout, cwd=scratch, env=probe_env())
    answer = marked(ran.out)
    if ran.rc is None:
        return Result(name, failing, f"{what} did not step 10 times in {opts.timeout:g} s", fix)
    if ran.rc != 0 or answer is None:
        return Result(name, failing, f"{what} fails: {ran.last_error()}", fix)
    return Result(name, OK, f"{what}: reset and 10 steps headless ({answer} frames, --configs {' '.join(blocks)})")


HEADLESS = "on a machine without a display: export SDL_VIDEODRIVER=dummy"


def check_doom(opts: Options) -> Result:
    fix = f"{pip(declared().spec('vizdoom'))}; {HEADLESS}"
    return _step_env("doom", ("doom_takecover", "tiny"), "ViZDoom TakeCover", fix, opts)


def check_carracing(opts: Options) -> Result:
    fix = f"{pip(declared().spec('gymnasium'))} (a Box2D build that fails: pip install swig first); {HEADLESS}"
    return _step_env("carracing", ("carracing", "tiny"), "CarRacing (Box2D)", fix, opts)


def check_atari(opts: Options) -> Result:
    """Optional: only a warn, also when ale-py is installed and Boxing does not step."""
    fix = f'{pip(declared().spec("ale-py"))} (or pip install ".[atari]")'
    if installed_version("ale-py") is None:
        return Result(
            "atari", WARN, "ale-py is not installed: the Atari presets (atari_boxing, atari_freeway) cannot run", fix
        )
    return _step_env("atari", ("atari_boxing", "tiny"), "Atari Boxing (ale-py)", fix, opts, failing=WARN)


def free_bytes(folder: Path) -> int:
    return shutil.disk_usage(folder).free


def write_error(folder: Path) -> str | None:
    """Why a file cannot be created in `folder` (None: it can): a real write, removed at once, so ACLs, read-only
    mounts and root squash answer as they will for a run (os.access answers for the mode bits only)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".wm-doctor-", dir=folder)
    except OSError as e:
        return f"[Errno {e.errno}] {e.strerror}"
    os.close(fd)
    os.unlink(name)
    return None


def check_disk(opts: Options) -> Result:
    """Free space and write permission where runs go (`--runs`); a folder that does not exist yet is not created:
    its nearest existing parent is checked."""
    runs = Path(opts.runs)
    probe = runs
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return Result("disk", FAIL, f"{probe} is not a folder", f"--runs a folder (runs go to {runs}/<name>)")
    where = str(runs) if probe == runs else f"{runs} (not there yet: checked {probe})"
    err = write_error(probe)
    if err is not None:
        return Result(
            "disk",
            FAIL,
            f"{where}: cannot create a file: {err}",
            f"make it writable (chmod u+w {probe}, or ask its owner), or put runs elsewhere: --run DIR / --runs DIR",
        )
    gb = free_bytes(probe) / 1e9
    detail = f"{where}: writable, {gb:.1f} GB free"
    if gb < LOW_DISK_GB:
        return Result(
            "disk",
            WARN,
            f"{detail}, under {LOW_DISK_GB:g} GB: a doom_takecover small run with round control takes 3.3–5.5 GB",
            "free space or put runs on a larger disk; a finished run's episodes/ can go (docs/guide/run-directory.md#disk)",
        )
    return Result("disk", OK, detail)


# (name, group --skip also accepts, check); looked up at call time, so tests may replace a check function
def checks() -> tuple[tuple[str, str, Callable[[Options], Result]], ...]:
    return (
        ("versions", "versions", check_versions),
        ("gpu", "gpu", check_gpu),
        ("mpi", "mpi", check_mpi),
        ("doom", "envs", check_doom),
        ("carracing", "envs", check_carracing),
        ("atari", "envs", check_atari),
        ("disk", "disk", check_disk),
    )


SKIPPABLE = ("versions", "gpu", "mpi", "envs", "doom", "carracing", "atari", "disk")


def line(r: Result) -> str:
    """A result as doctor prints it: status, name, detail; a `fix:` line under it when not ok."""
    text = f"{r.status:<5} {r.name:<9} {r.detail}"
    return text + (f"\n{'':6}fix: {r.fix}" if r.fix and r.status != OK else "")


def run_checks(opts: Options, skip: Sequence[str] = (), echo: Callable[[Result], None] | None = None) -> list[Result]:
    """Every check not in `skip` (by name or group), in order; `echo` is called with each result as it comes."""
    out = []
    for name, group, fn in checks():
        if name in skip or group in skip:
            continue
        try:
            r = fn(opts)
        except Exception as e:  # a bug in a check must not hide the others
            r = Result(name, FAIL, f"the check itself failed: {type(e).__name__}: {e}", "report this as a bug")
        out.append(r)
        if echo is not None:
            echo(r)
    return out


def add_args(p: argparse.ArgumentParser) -> None:
    add_launcher_args(p)  # the same flags as `pipeline --mpi N`: the hello runs under the launcher it would use
    p.add_argument("--runs", default="runs", metavar="DIR", help="the folder runs go to: free space and write permission")
    p.add_argument(
        "--skip", nargs="+", default=[], choices=SKIPPABLE, metavar="NAME", help=f"skip checks: {', '.join(SKIPPABLE)}"
    )
    p.add_argument("--timeout", type=float, default=120.0, metavar="S", help="seconds each subprocess check may take")
    p.add_argument("--json", action="store_true", help='print one JSON object: {"checks": [...], "ok": bool}')


def main(args: argparse.Namespace) -> int:
    from wm.core.errors import WMError

    if args.timeout <= 0:
        raise WMError(f"--timeout must be > 0, got {args.timeout:g}")
    launcher = launcher_from_args(args)  # a bad --launcher or WM_LAUNCHER: one line, exit 2, before any check
    opts = Options(launcher=launcher, runs=Path(args.runs), timeout=float(args.timeout))

    def echo(r: Result) -> None:
        print(line(r), flush=True)

    results = run_checks(opts, args.skip, None if args.json else echo)
    failed = any(r.status == FAIL for r in results)
    if args.json:
        print(json.dumps({"checks": [asdict(r) for r in results], "ok": not failed}, indent=2, ensure_ascii=False))
    else:
        counts = {s: sum(r.status == s for r in results) for s in (OK, WARN, FAIL)}
        skipped = f" (skipped: {', '.join(args.skip)})" if args.skip else ""
        print(f"doctor: {counts[OK]} ok, {counts[WARN]} warn, {counts[FAIL]} fail{skipped}")
    return 1 if failed else 0
