"""`wm doctor`: each check turns a broken machine into one line with its fix and exit 1; warns do not fail; `--json`;
the real check of this machine's MPI and disk. The fakes are scripts under tmp_path standing in for the interpreter
the probes run (`doctor.interpreter`) or for the MPI launcher (`--launcher`)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wm.core.errors import WMError
from wm.tools import doctor, pins

SKIP_ALL_BUT = {
    "versions": ["gpu", "mpi", "envs", "disk"],
    "gpu": ["versions", "mpi", "envs", "disk"],
    "mpi": ["versions", "gpu", "envs", "disk"],
    "envs": ["versions", "gpu", "mpi", "disk"],
    "disk": ["versions", "gpu", "mpi", "envs"],
}
GOOD_VERSIONS = {
    "tensorflow": "2.21.0",
    "keras": "3.15.1",
    "tensorflow-probability": "0.25.0",
    "tf-keras": "2.21.0",
    "gymnasium": "1.4.0",
    "numpy": "2.4.6",
    "cma": "4.5.0",
    "mpi4py": "4.1.2",
    "ale-py": "0.12.1",
}


def _doctor(capsys, *argv: str) -> tuple[int, str]:
    """Run `wm doctor ARGV` through its own parser; (exit status, stdout)."""
    p = argparse.ArgumentParser()
    doctor.add_args(p)
    rc = doctor.main(p.parse_args(list(argv)))
    return rc, capsys.readouterr().out


def _only(check: str, *more: str) -> list[str]:
    return ["--skip", *SKIP_ALL_BUT[check], *more]


def _script(path: Path, body: str) -> Path:
    """An executable Python script (this interpreter) at `path`."""
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return path


def _sh(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def _fix_of(out: str, name: str) -> str:
    lines = out.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.split()[1:2] == [name])
    assert lines[i + 1].startswith("      fix: "), out
    return lines[i + 1]


@pytest.fixture
def versions(monkeypatch):
    """The installed versions the versions check reads (a dict the test edits; missing key: not installed)."""
    found = dict(GOOD_VERSIONS)
    monkeypatch.setattr(doctor, "installed_version", lambda dist: found.get(dist))
    return found


# ---------------------------------------------------------------- versions


@pytest.mark.parametrize(
    "change, says, fix",
    [
        ({"cma": None}, "missing cma", "-m pip install 'cma>=4.5,<5'"),
        ({"keras": "2.15.0"}, "Keras 2.15.0 is not Keras 3", "-m pip install 'keras>=3.15,<4'"),
        ({"tf-keras": "2.20.0"}, "tf-keras 2.20.0 does not match TF 2.21.0", "-m pip install 'tf-keras==2.21.*'"),
    ],
)
def test_a_missing_or_wrong_package_fails_with_its_pip_line(capsys, versions, change, says, fix):
    versions.update(change)
    rc, out = _doctor(capsys, *_only("versions"))
    assert rc == 1 and out.startswith("fail  versions ") and says in out, out
    assert fix in _fix_of(out, "versions")
    assert out.splitlines()[-1].startswith("doctor: 0 ok, 0 warn, 1 fail")


def test_a_version_outside_the_tested_set_only_warns(capsys, versions):
    versions["numpy"] = "1.26.4"
    rc, out = _doctor(capsys, *_only("versions"))
    assert rc == 0 and out.startswith("warn  versions ") and "outside the tested set: numpy" in out, out
    assert "'numpy>=2.4,<3'" in _fix_of(out, "versions")


def test_every_package_doctor_names_has_a_range_in_pyproject():
    pins = doctor.declared()
    for dist in [d for d, _ in doctor.CORE] + ["vizdoom", "ale-py", "mpich"]:
        assert pins[dist].specifier, dist


def test_the_ranges_are_pyprojects(capsys, versions, monkeypatch, tmp_path):
    """doctor holds the versions to the ranges pyproject.toml gives and prints them in its fix lines: another range
    written there reaches both."""
    project = pins._checkout_project()
    assert project is not None
    moved = {"numpy>=2.4,<3": "numpy>=2.5,<3", "vizdoom>=1.3.2,<1.4": "vizdoom>=1.3.3,<1.4"}
    assert set(moved) <= set(project["dependencies"])
    project = {**project, "dependencies": [moved.get(s, s) for s in project["dependencies"]]}
    monkeypatch.setattr(doctor, "declared", lambda: pins.from_pyproject(project))
    rc, out = _doctor(capsys, *_only("versions"))
    assert rc == 0 and "outside the tested set: numpy;" in out and "'numpy>=2.5,<3'" in _fix_of(out, "versions"), out
    monkeypatch.setattr(doctor, "interpreter", lambda: str(_sh(tmp_path / "python", "exit 1")))
    assert "'vizdoom>=1.3.3,<1.4'" in doctor.check_doom(doctor.Options(timeout=10)).fix


# ---------------------------------------------------------------- gpu (a fake interpreter runs the probe)


def test_a_gpu_probe_that_hangs_is_killed_at_the_timeout_and_fails(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(doctor, "interpreter", lambda: str(_sh(tmp_path / "python", "exec sleep 60")))
    t0 = time.monotonic()
    rc, out = _doctor(capsys, *_only("gpu"), "--timeout", "1")
    assert time.monotonic() - t0 < 20
    assert rc == 1 and out.startswith("fail  gpu ") and "did not finish in 1 s" in out, out
    fix = _fix_of(out, "gpu")
    assert "nvidia-smi" in fix and "docs/guide/gpu.md" in fix and "CUDA_VISIBLE_DEVICES=-1" in fix


def test_a_gpu_probe_that_crashes_fails_with_its_error(capsys, monkeypatch, tmp_path):
    err = "ImportError: libcudnn.so.9: cannot open shared object file: No such file or directory"
    monkeypatch.setattr(doctor, "interpreter", lambda: str(_sh(tmp_path / "python", f"echo '{err}' >&2; exit 1")))
    rc, out = _doctor(capsys, *_only("gpu"))
    assert rc == 1 and "GPU probe failed (exit 1)" in out and err in out, out
    assert "'tensorflow[and-cuda]>=2.21,<2.22'" in _fix_of(out, "gpu")


def _gpu_answer(tmp_path: Path, gpus: list[str], growth_error: str | None = None, stderr: str = "") -> str:
    answer = {"tf": "2.21.0", "cuda": "12.5.1", "cudnn": "9", "cuda_build": True, "gpus": gpus, "growth_error": growth_error}
    body = (
        f"import sys\nprint('noise from a library')\nprint('DOCTOR ' + {json.dumps(answer)!r})\nsys.stderr.write({stderr!r})"
    )
    return str(_script(tmp_path / "python", body))


def test_no_gpu_is_a_warn_that_names_the_cpu_and_the_gpu_guide(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # the test process hides the GPU (conftest)
    tf_says = "W0000 cuda_dnn.cc] Cannot dlopen some GPU libraries. Please make sure the missing libraries ...\n"
    monkeypatch.setattr(doctor, "interpreter", lambda: _gpu_answer(tmp_path, [], stderr=tf_says))
    rc, out = _doctor(capsys, *_only("gpu"))
    assert rc == 0 and out.startswith("warn  gpu ") and "V and M will train on the CPU" in out, out
    assert "TF's CUDA libraries are missing" in out and "CUDA 12.5.1, cuDNN 9" in out
    assert "docs/guide/gpu.md" in _fix_of(out, "gpu")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    rc, out = _doctor(capsys, *_only("gpu"))
    assert rc == 0 and "CUDA_VISIBLE_DEVICES=-1 hides them" in out, out


def test_a_gpu_and_its_memory_growth(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(doctor, "interpreter", lambda: _gpu_answer(tmp_path, ["NVIDIA H200"]))
    rc, out = _doctor(capsys, *_only("gpu"))
    assert rc == 0 and out.startswith("ok    gpu       1 GPU(s): NVIDIA H200") and "memory growth can be set" in out
    monkeypatch.setattr(doctor, "interpreter", lambda: _gpu_answer(tmp_path, ["NVIDIA H200"], "RuntimeError: no"))
    rc, out = _doctor(capsys, *_only("gpu"))
    assert rc == 1 and "memory growth cannot be set: RuntimeError: no" in out, out


# ---------------------------------------------------------------- mpi (a fake launcher)


def _launcher(tmp_path: Path, ranks: str, name: str = "fake_mpirun") -> tuple[str, Path]:
    """A fake launcher that records its argv and prints `ranks` (what its ranks would): (its path, the argv log)."""
    log = tmp_path / f"{name}.argv"
    script = _script(
        tmp_path / name,
        f"import json, sys\nopen({str(log)!r}, 'w').write(json.dumps(sys.argv[1:]))\nsys.stdout.write({ranks!r})\n",
    )
    return str(script), log


@pytest.fixture(autouse=True)
def _no_launcher_from_the_environment(monkeypatch):
    monkeypatch.delenv("WM_LAUNCHER", raising=False)
    monkeypatch.delenv("WM_LAUNCHER_ARGS", raising=False)


def test_ranks_of_world_size_one_fail_with_the_rebuild_fix(capsys, tmp_path):
    cmd, log = _launcher(tmp_path, "0 1\n0 1\n")
    rc, out = _doctor(capsys, *_only("mpi"), "--launcher", cmd)
    assert rc == 1 and out.startswith(f"fail  mpi       2-rank hello under {cmd}: world size 1 on every rank"), out
    assert "mpi4py's: MPICH" in out  # mpi4py's own MPI library, asked in a subprocess
    fix = _fix_of(out, "mpi")
    assert "MPICC=$(which mpicc)" in fix and "--no-binary=mpi4py" in fix and "mpi-and-clusters.md" in fix
    argv = json.loads(log.read_text())
    assert argv[:3] == ["-n", "2", sys.executable] and argv[3] == "-c" and "COMM_WORLD" in argv[4]


def test_world_size_one_names_the_launchers_mpi_beside_mpi4pys(capsys, tmp_path):
    """An Open MPI mpirun in front of an mpi4py built with MPICH: the failure names both (the launcher's from its
    --version)."""
    log = tmp_path / "argv"
    script = _script(
        tmp_path / "mpirun",
        "import json, sys\n"
        "if sys.argv[1:] == ['--version']:\n    print('mpirun (Open MPI) 4.1.5\\n\\nReport bugs to ...'); sys.exit(0)\n"
        f"open({str(log)!r}, 'w').write(json.dumps(sys.argv[1:]))\nsys.stdout.write('0 1\\n0 1\\n')\n",
    )
    rc, out = _doctor(capsys, *_only("mpi"), "--launcher", str(script))
    assert rc == 1 and "world size 1 on every rank" in out, out
    assert "(the launcher's: Open MPI 4.1.5; mpi4py's: MPICH" in out, out
    assert doctor.launcher_library(str(script), 5) == "Open MPI 4.1.5"
    assert doctor.launcher_library(str(Path(sys.executable).with_name("mpirun")), 5).startswith("MPICH ")  # Hydra's


def test_the_hello_runs_under_the_launcher_pipeline_would_use(capsys, monkeypatch, tmp_path):
    """`--launcher` and `--launcher-args` as `pipeline --mpi N` takes them, `WM_LAUNCHER` without them, a template's
    {n} replaced by 2 (wm.core.launcher)."""
    cmd, log = _launcher(tmp_path, "1 2\n0 2\n")
    rc, out = _doctor(capsys, *_only("mpi"), "--launcher", cmd, "--launcher-args", "-f hosts")
    assert rc == 0 and out.startswith(f"ok    mpi       2-rank hello under {cmd} -f hosts: world size 2 (MPICH"), out
    assert json.loads(log.read_text())[:4] == ["-f", "hosts", "-n", "2"]
    rc, out = _doctor(capsys, *_only("mpi"), "--launcher", f"{cmd} --np={{n}} --bind-to core")
    assert rc == 0 and json.loads(log.read_text())[:3] == ["--np=2", "--bind-to", "core"], out
    monkeypatch.setenv("WM_LAUNCHER", cmd)
    monkeypatch.setenv("WM_LAUNCHER_ARGS", "--mpi=pmi2")
    rc, out = _doctor(capsys, *_only("mpi"))
    assert rc == 0 and json.loads(log.read_text())[:3] == ["--mpi=pmi2", "-n", "2"], out


def test_a_launcher_pipeline_would_refuse_is_a_usage_error(capsys):
    with pytest.raises(WMError, match="has arguments but no"):
        _doctor(capsys, *_only("mpi"), "--launcher", "mpiexec -f hosts")


@pytest.mark.parametrize(
    "body, says",
    [
        (None, "no launcher"),
        ("echo cannot connect to the PMI >&2; exit 7", "failed (exit 7): cannot connect to the PMI"),
        ("exec sleep 60", "did not finish in 1 s"),
    ],
)
def test_a_missing_broken_or_hanging_launcher_fails(capsys, monkeypatch, tmp_path, body, says):
    cmd = str(_sh(tmp_path / "mpirun", body) if body else tmp_path / "no-such-mpirun")
    # the library probe answers at once: with the hanging launcher's 1 s timeout, a loaded machine's mpi4py import
    # could take longer and fail the check before the launcher is tried
    monkeypatch.setattr(doctor, "MPI_LIBRARY", "print('DOCTOR MPICH Version: 5.0.2')")
    rc, out = _doctor(capsys, *_only("mpi"), "--launcher", cmd, "--timeout", "1" if "sleep" in (body or "") else "60")
    assert rc == 1 and out.startswith("fail  mpi ") and says in out, out
    assert _fix_of(out, "mpi")


# ---------------------------------------------------------------- envs (a fake interpreter runs the probes)


def test_envs_that_do_not_step_fail_with_the_install_and_headless_fix(capsys, monkeypatch, tmp_path, versions):
    err = "ModuleNotFoundError: No module named 'vizdoom'"
    monkeypatch.setattr(doctor, "interpreter", lambda: str(_sh(tmp_path / "python", f'echo "{err}" >&2; exit 1')))
    versions.pop("ale-py")
    rc, out = _doctor(capsys, *_only("envs"))
    assert rc == 1 and out.startswith(f"fail  doom      ViZDoom TakeCover fails: {err}"), out
    assert "'vizdoom>=1.3.2,<1.4'" in _fix_of(out, "doom") and "SDL_VIDEODRIVER=dummy" in _fix_of(out, "doom")
    assert "'gymnasium[box2d]>=1.4,<1.5'" in _fix_of(out, "carracing") and "swig" in _fix_of(out, "carracing")
    assert "warn  atari     ale-py is not installed" in out and "ale-py>=0.12,<0.13" in _fix_of(out, "atari")
    assert out.splitlines()[-1].startswith("doctor: 0 ok, 1 warn, 2 fail")


def test_an_installed_atari_that_does_not_step_only_warns(capsys, monkeypatch, tmp_path, versions):
    monkeypatch.setattr(doctor, "interpreter", lambda: str(_sh(tmp_path / "python", "echo 'ale_py: no ROM' >&2; exit 1")))
    rc, out = _doctor(capsys, "--skip", "versions", "gpu", "mpi", "disk", "doom", "carracing")
    assert rc == 0 and out.startswith("warn  atari     Atari Boxing (ale-py) fails: ale_py: no ROM"), out


@pytest.mark.env
def test_the_real_doom_env_steps_headless_and_leaves_no_vizdoom_folder_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = doctor.check_doom(doctor.Options(timeout=120))
    assert r.status == "ok" and "64x64x3 uint8" in r.detail, r
    assert list(tmp_path.iterdir()) == []  # ViZDoom's _vizdoom/ went into the probe's scratch folder


# ---------------------------------------------------------------- disk


def test_a_folder_where_a_write_fails_fails(capsys, monkeypatch, tmp_path):
    """Tests run as root, for whom chmod 0o555 does not stop a write: the probe of a real write is replaced."""
    monkeypatch.setattr(doctor, "write_error", lambda folder: "[Errno 13] Permission denied")
    rc, out = _doctor(capsys, *_only("disk"), "--runs", str(tmp_path))
    assert rc == 1 and out.startswith(f"fail  disk      {tmp_path}: cannot create a file: [Errno 13]"), out
    assert f"chmod u+w {tmp_path}" in _fix_of(out, "disk")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a 0o555 folder")
def test_a_read_only_folder_fails_for_real(capsys, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    try:
        rc, out = _doctor(capsys, *_only("disk"), "--runs", str(ro / "runs"))
    finally:
        ro.chmod(0o755)
    assert rc == 1 and "cannot create a file" in out and "Permission denied" in out, out


def test_runs_not_there_yet_checks_its_parent_and_creates_nothing(capsys, tmp_path):
    rc, out = _doctor(capsys, *_only("disk"), "--runs", str(tmp_path / "a" / "b"))
    assert rc == 0 and out.startswith(f"ok    disk      {tmp_path / 'a' / 'b'} (not there yet: checked {tmp_path})"), out
    assert "GB free" in out and list(tmp_path.iterdir()) == []  # no folder made, the probe file removed


def test_little_free_space_warns_with_a_runs_size(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(doctor, "free_bytes", lambda folder: 4_200_000_000)
    rc, out = _doctor(capsys, *_only("disk"), "--runs", str(tmp_path))
    assert rc == 0 and out.startswith("warn  disk ") and "4.2 GB free, under 10 GB" in out and "3.3–5.5 GB" in out
    assert "run-directory.md#disk" in _fix_of(out, "disk")
    (tmp_path / "file").write_text("x")
    rc, out = _doctor(capsys, *_only("disk"), "--runs", str(tmp_path / "file"))
    assert rc == 1 and "is not a folder" in out


# ---------------------------------------------------------------- everything passing, --json


@pytest.fixture
def all_good(monkeypatch, tmp_path, versions):
    """A fake interpreter that answers every probe as a healthy GPU machine would, and a launcher of two ranks."""
    answers = {
        "tensorflow": "DOCTOR "
        + json.dumps(
            {"tf": "2.21.0", "cuda": "12.5.1", "cudnn": "9", "cuda_build": True, "gpus": ["GPU 0"], "growth_error": None}
        ),
        "Get_library_version": "DOCTOR MPICH Version:      5.0.2",
        "make_env": "DOCTOR 64x64x3 uint8",
    }
    fake = _script(
        tmp_path / "python",
        f"import sys\nanswers = {answers!r}\nprint(next(v for k, v in answers.items() if k in sys.argv[2]))\n",
    )
    monkeypatch.setattr(doctor, "interpreter", lambda: str(fake))
    return _launcher(tmp_path, "0 2\n1 2\n")[0]


def test_exit_0_when_every_check_passes(capsys, tmp_path, all_good):
    rc, out = _doctor(capsys, "--launcher", all_good, "--runs", str(tmp_path))
    lines = out.splitlines()
    assert rc == 0 and lines[-1] == "doctor: 7 ok, 0 warn, 0 fail", out
    assert [ln.split()[:2] for ln in lines[:-1]] == [
        ["ok", n] for n in ("versions", "gpu", "mpi", "doom", "carracing", "atari", "disk")
    ]
    assert "MPICH 5.0.2" in out and "64x64x3 uint8 frames, --configs doom_takecover tiny" in out


def test_json_has_every_check(capsys, tmp_path, all_good):
    rc, out = _doctor(capsys, "--launcher", all_good, "--runs", str(tmp_path), "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["ok"] is True
    assert [c["name"] for c in doc["checks"]] == ["versions", "gpu", "mpi", "doom", "carracing", "atari", "disk"]
    assert all(set(c) == {"name", "status", "detail", "fix"} and c["status"] == "ok" for c in doc["checks"])
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "file").write_text("")
    rc, out = _doctor(capsys, "--launcher", all_good, "--runs", str(tmp_path / "x" / "file"), "--json", "--skip", "envs")
    doc = json.loads(out)
    assert rc == 1 and doc["ok"] is False and [c["name"] for c in doc["checks"]] == ["versions", "gpu", "mpi", "disk"]
    assert doc["checks"][-1]["status"] == "fail" and doc["checks"][-1]["fix"]


def test_a_check_that_raises_is_a_failure_and_the_others_still_run(capsys, monkeypatch, tmp_path, versions):
    def broken(opts):
        raise KeyError("boom")

    monkeypatch.setattr(doctor, "check_gpu", broken)
    rc, out = _doctor(capsys, "--skip", "mpi", "envs", "--runs", str(tmp_path))
    assert rc == 1 and "fail  gpu       the check itself failed: KeyError" in out and "ok    disk" in out, out


def test_usage_errors(capsys):
    p = argparse.ArgumentParser()
    doctor.add_args(p)
    with pytest.raises(SystemExit) as e:
        p.parse_args(["--skip", "gpus"])
    assert e.value.code == 2 and "invalid choice: 'gpus'" in capsys.readouterr().err


# ---------------------------------------------------------------- this machine, for real


@pytest.mark.mpi
def test_the_real_doctor_on_this_machines_mpi_and_disk(repo_root, tmp_path):
    """`wm doctor --skip envs gpu`: versions, the 2-rank hello under the venv's mpirun and the disk, for real, and the
    doctor's own process loads none of TensorFlow, gymnasium, ViZDoom or mpi4py."""
    code = (
        "import sys\n"
        "from wm.cli import main\n"
        f"rc = main(['doctor', '--skip', 'envs', 'gpu', '--runs', {str(tmp_path / 'runs')!r}])\n"
        "heavy = [m for m in ('tensorflow', 'keras', 'gymnasium', 'vizdoom', 'mpi4py', 'cma') if m in sys.modules]\n"
        "print('heavy', heavy)\n"
        "sys.exit(rc)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo_root, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    mpi = next(ln for ln in lines if ln.startswith("ok    mpi "))
    assert "2-rank hello under" in mpi and "world size 2" in mpi, res.stdout
    assert lines[-1] == "heavy []" and lines[-2].endswith("0 fail (skipped: envs, gpu)"), res.stdout
