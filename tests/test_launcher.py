"""The launcher of ranked starts (`wm.core.launcher`): mpirun, srun, a program, a template; the one command builder
(`wm.core.commands.stage_command`); `--launcher`/`--launcher-args` on pipeline, sweep run and the TUI, and WM_LAUNCHER."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import tiny_run_at
from wm import cli
from wm.core import commands
from wm.core.errors import WMError
from wm.core.launcher import Launcher, from_args, from_env, mpirun_path
from wm.core.registry import STAGES
from wm.core.rundir import RunDir

FIXTURES = Path(__file__).parent / "fixtures"
TAIL = ["py", "-m", "wm", "train-controller", "--run", "runs/x"]


def one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert msg and "\n" not in msg, msg
    return msg


# ---------------------------------------------------------------- the prefixes


def test_mpirun_is_the_default_and_takes_extra_args():
    venv = Path(sys.executable).with_name("mpirun")
    assert (mpirun_path() == str(venv)) if venv.exists() else mpirun_path().endswith("mpirun")
    assert Launcher() == Launcher.parse(None) == Launcher.parse("mpirun") == Launcher("mpirun", "", ())
    assert Launcher().prefix(3) == [mpirun_path(), "-n", "3"]
    assert Launcher.parse("mpirun", "-f hosts --bind-to core").prefix(4) == [
        mpirun_path(),
        *["-f", "hosts", "--bind-to", "core"],
        *["-n", "4"],
    ]
    assert Launcher.parse(None, ["-f", "hosts"]).extra == ("-f", "hosts")


def test_srun_and_a_plain_program():
    assert Launcher.parse("srun", ["--mpi=pmi2"]).prefix(65) == ["srun", "--mpi=pmi2", "-n", "65"]
    assert Launcher.parse("srun").kind == "srun"
    prog = Launcher.parse("/opt/mpi/bin/mpiexec", "-genv FOO 1")
    assert prog.kind == "mpirun" and prog.program == "/opt/mpi/bin/mpiexec"
    assert prog.prefix(2) == ["/opt/mpi/bin/mpiexec", "-genv", "FOO", "1", "-n", "2"]


def test_a_template_has_n_replaced_and_is_split_like_a_shell():
    t = Launcher.parse("mpiexec -f 'my hosts' -n {n} --bind-to core --env \"A=1 2\"")
    assert t.kind == "template"
    assert t.prefix(5) == ["mpiexec", "-f", "my hosts", "-n", "5", "--bind-to", "core", "--env", "A=1 2"]
    assert Launcher.parse("mpiexec -np {n}", "-x X").prefix(2) == ["mpiexec", "-np", "2", "-x", "X"]  # then the extras
    assert Launcher.parse("launch --ranks={n}").prefix(3) == ["launch", "--ranks=3"]


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda: Launcher("template", "mpiexec -f hosts -n 3"), "has no {n}"),
        (lambda: Launcher.parse("mpiexec -f hosts"), "has arguments but no {n}"),
        (lambda: Launcher.parse("mpiexec -n {n} {python}"), "only {n} is replaced, not {python}"),
        (lambda: Launcher.parse("mpiexec -f 'hosts -n {n}"), "No closing quotation"),
        (lambda: Launcher.parse("mpirun", "-f 'hosts"), "No closing quotation"),
        (lambda: Launcher.parse("  "), "names no program"),
        (lambda: Launcher("pbsdsh"), "launcher kind must be one of mpirun, srun, template"),
    ],
)
def test_bad_launchers_are_refused_in_one_line(make, says):
    with pytest.raises(WMError) as e:
        make()
    assert says in one_line(e)


def test_ranks_below_one_are_refused():
    with pytest.raises(ValueError, match="ranks must be >= 1"):
        Launcher.parse("srun").prefix(0)


# ---------------------------------------------------------------- the one command builder


@pytest.mark.parametrize(
    "launcher, prefix",
    [
        (None, [mpirun_path(), "-n", "3"]),
        (Launcher.parse("mpirun", "-f hosts"), [mpirun_path(), "-f", "hosts", "-n", "3"]),
        (Launcher.parse("srun", "--mpi=pmi2"), ["srun", "--mpi=pmi2", "-n", "3"]),
        (Launcher.parse("mpiexec -hosts 'a,b' -n {n}"), ["mpiexec", "-hosts", "a,b", "-n", "3"]),
        (Launcher.parse("mpiexec"), ["mpiexec", "-n", "3"]),
    ],
)
def test_stage_command_puts_the_launcher_before_the_python_command(launcher, prefix):
    argv = commands.stage_command("train-controller", "runs/x", ranks=3, python=["py"], launcher=launcher)
    assert argv == [*prefix, *TAIL]
    # one rank: no launcher, whichever is given
    assert commands.stage_command("train-controller", "runs/x", python=["py"], launcher=launcher) == TAIL
    with pytest.raises(ValueError, match="train-vae does not run across MPI ranks"):
        commands.stage_command("train-vae", "runs/x", ranks=3, launcher=launcher)


def test_a_ranked_start_runs_the_templates_program(tmp_path):
    """The template's program is what runs, with its own words, `-n 3` where {n} was, then the stage's command."""
    fake = [sys.executable, str(FIXTURES / "fake_stage.py")]
    template = f"{shlex.quote(sys.executable)} {shlex.quote(str(FIXTURES / 'fake_mpirun.py'))} --tag 'two words' -n {{n}}"
    cmd = commands.stage_command("train-controller", tmp_path / "r", ranks=3, python=fake, launcher=Launcher.parse(template))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.splitlines()[0] == "mpirun argv: --tag two words -n 3 " + " ".join(
        [*fake, "-m", "wm", "train-controller", "--run", str(tmp_path / "r")]
    )
    assert "fake argv" not in out  # the launcher ran, not the stage directly


# ---------------------------------------------------------------- the flags and the environment


def parse(*argv: str):
    return cli.build_parser().parse_args(list(argv))


def test_pipeline_launcher_flags_through_the_cli_parser():
    args = parse("pipeline", "--run", "r", "--mpi", "65", "--launcher", "srun", "--launcher-args=--mpi=pmi2")
    assert args.mpi == 65 and from_args(args, {}) == Launcher("srun", "srun", ("--mpi=pmi2",))
    args = parse("pipeline", "--run", "r", "--mpi", "9", "--launcher-args", "-f hosts")  # a space: one value
    assert from_args(args, {}).prefix(9) == [mpirun_path(), "-f", "hosts", "-n", "9"]
    args = parse("pipeline", "--run", "r", "--launcher", "mpiexec -f hosts -n {n} --bind-to core")
    assert from_args(args, {}).prefix(9) == ["mpiexec", "-f", "hosts", "-n", "9", "--bind-to", "core"]
    assert from_args(parse("pipeline", "--run", "r"), {}) == Launcher()
    # sweep run and the TUI take the same flags
    args = parse("sweep", "run", "--run", "r", "--mpi", "3", "--launcher", "mpiexec", "--launcher-args", "-l -v")
    assert from_args(args, {}).prefix(3) == ["mpiexec", "-l", "-v", "-n", "3"]
    assert from_args(parse("tui", "runs", "--launcher", "srun"), {}).kind == "srun"


def test_the_help_shows_the_flags(capsys):
    with pytest.raises(SystemExit):
        parse("pipeline", "--help")
    out = capsys.readouterr().out
    assert "--launcher LAUNCHER" in out and "--launcher-args ARGS" in out and "WM_LAUNCHER" in out


def test_the_environment_is_the_default_when_the_flags_are_not_given():
    env = {"WM_LAUNCHER": "srun", "WM_LAUNCHER_ARGS": "--mpi=pmi2 --cpu-bind=cores"}
    bare = parse("pipeline", "--run", "r")
    assert from_args(bare, env).prefix(3) == ["srun", "--mpi=pmi2", "--cpu-bind=cores", "-n", "3"]
    assert from_env(env) == from_args(bare, env)
    # --launcher overrides both (the variable's args belong to the variable's launcher)
    assert from_args(parse("pipeline", "--run", "r", "--launcher", "mpirun"), env) == Launcher()
    # --launcher-args alone replaces WM_LAUNCHER_ARGS
    assert from_args(parse("pipeline", "--run", "r", "--launcher-args=--mpi=pmix"), env).extra == ("--mpi=pmix",)
    # WM_LAUNCHER_ARGS alone: extra args of the default mpirun; an empty WM_LAUNCHER is unset
    assert from_args(bare, {"WM_LAUNCHER": "", "WM_LAUNCHER_ARGS": "-f hosts"}).prefix(2) == [
        mpirun_path(),
        *["-f", "hosts", "-n", "2"],
    ]
    assert from_args(bare, {"WM_LAUNCHER": "mpiexec -n {n} -f hosts"}).kind == "template"
    with pytest.raises(WMError) as e:
        from_args(bare, {"WM_LAUNCHER": "mpiexec -f hosts"})
    assert one_line(e).startswith("WM_LAUNCHER: launcher 'mpiexec -f hosts' has arguments but no {n}")
    with pytest.raises(WMError) as e:
        from_args(parse("pipeline", "--run", "r", "--launcher-args", "-f 'x"), {})
    assert one_line(e).startswith("--launcher-args")


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(
    "argv, env",
    [
        (["--launcher", "mpiexec -f hosts"], {}),
        (["--launcher", "mpiexec -n {n} {python}"], {}),
        (["--launcher-args", "-f 'hosts"], {}),
        ([], {"WM_LAUNCHER": "mpiexec -f hosts"}),
    ],
)
def test_a_bad_launcher_is_one_error_line_exit_2_and_nothing_written(tmp_path, capsys, monkeypatch, argv, env):
    for k in ("WM_LAUNCHER", "WM_LAUNCHER_ARGS"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    existing = tiny_run_at(tmp_path / "old")
    before = files(tmp_path)
    for run in (tmp_path / "new", existing.path):
        pipeline = ["pipeline", "--configs", "doom_takecover", "tiny", "--run", str(run), "--mpi", "3", *argv]
        assert cli.main(pipeline) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: "), err
        assert files(tmp_path) == before
    assert cli.main(["sweep", "run", "--run", str(existing.path), "--taus", "0.5", "--mpi", "3", *argv]) == 2
    assert capsys.readouterr().err.startswith("error: ") and files(tmp_path) == before


# ---------------------------------------------------------------- every ranked start of the pipeline


LAUNCHER = """import sys
from pathlib import Path

sys.path.insert(0, {root!r})
from wm.core.rundir import RunDir

argv = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(" ".join(argv) + "\\n")
RunDir(argv[argv.index("--run") + 1]).mark_done("train-controller")  # as the ranks would, at the end
"""


def test_the_pipeline_starts_its_ranks_with_the_launcher(tmp_path, tiny_run, monkeypatch):
    """`pipeline --mpi 3 --launcher TEMPLATE` through the CLI, with real subprocesses: train-controller is started by
    the template's program (a script that records its argv and marks the stage DONE), the others were DONE."""
    log = tmp_path / "launched.txt"
    script = tmp_path / "launch.py"
    script.write_text(LAUNCHER.format(root=str(Path(__file__).resolve().parents[1]), log=str(log)))
    monkeypatch.setenv("WM_LAUNCHER", "srun")  # the flag wins over the variable
    run = tiny_run
    for s in STAGES[: [s.verb for s in STAGES].index("train-controller")]:
        run.mark_done(s.verb)
    template = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} --hostfile 'my hosts' -n {{n}}"
    argv = ["pipeline", "--run", str(run.path), "--mpi", "3", "--until", "train-controller", "--launcher", template]
    assert cli.main(argv) == 0
    assert log.read_text().splitlines() == [
        f"--hostfile my hosts -n 3 {sys.executable} -m wm train-controller --run {run.path} --progress-every 0"
    ]


def test_every_rounds_ranked_start_uses_the_launcher(tmp_path, monkeypatch):
    """The ranked stages of the first pass and of each round (round control goes through runner.run_stages) get the
    launcher pipeline.main parsed once; the other stages none."""
    from wm.rounds import control, runner

    started: list[tuple[str, list[str]]] = []

    def fake_stage(cmd, run, cfg, verb, tag, every, tick=None):
        started.append((run.path.name, cmd))
        run.mark_done(verb)
        return 0

    def fake_prepare(base, cfg, k, explore=None, learned=False):
        child = RunDir(base.path / f"round{k}")
        child.bind_config(cfg, None)
        return child

    monkeypatch.setattr(runner, "run_stage", fake_stage)
    monkeypatch.setattr(control, "prepare_round", fake_prepare)
    monkeypatch.setattr(control, "dream_gate", lambda *a: None)
    monkeypatch.setenv("WM_LAUNCHER", "mpiexec -f hosts -n {n}")
    monkeypatch.delenv("WM_LAUNCHER_ARGS", raising=False)
    run = tmp_path / "r"
    argv = ["pipeline", "--configs", "doom_takecover", "tiny", "--run", str(run), "--mpi", "4", "--set", "iterate.rounds=2"]
    assert cli.main(argv) == 0
    # the stages that run across ranks (collect, train-controller, evaluate: the registry's `ranks`), in every pass
    ranked = [(where, cmd[cmd.index("wm") + 1]) for where, cmd in started if cmd[:5] == ["mpiexec", "-f", "hosts", "-n", "4"]]
    each = ("collect", "train-controller", "evaluate")
    assert ranked == [(name, verb) for name in ("r", "round1", "round2") for verb in each if (name, verb) in ranked]
    assert [v for n, v in ranked if n == "r"] == list(each)
    assert ("round1", "train-controller") in ranked and ("round2", "train-controller") in ranked
    others = [cmd for _, cmd in started if cmd[0] != "mpiexec"]
    assert others and all(cmd[0] == sys.executable and cmd[3] in ("train-vae", "encode", "train-mdnrnn") for cmd in others)


def test_the_guides_launcher_examples_parse_with_the_cli_parser():
    """docs/guide/mpi-and-clusters.md's Launchers section: each `python -m wm …` line is accepted, its launcher too."""
    import re

    doc = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "mpi-and-clusters.md").read_text()
    section = doc.split("\n## Launchers\n", 1)[1].split("\n## ", 1)[0]
    lines = [ln.split("  #", 1)[0].strip() for b in re.findall(r"```bash\n(.*?)```", section, re.S) for ln in b.splitlines()]
    cmds = [shlex.split(ln)[3:] for ln in lines if ln.startswith("python -m wm ")]
    assert len(cmds) >= 4, cmds
    env = {"WM_LAUNCHER": "srun", "WM_LAUNCHER_ARGS": "--mpi=pmi2"}
    for words in cmds:
        assert from_args(parse(*words), env).prefix(2)[-2:] in (["-n", "2"], ["--bind-to", "core"]), words


def test_sweep_run_starts_each_taus_training_and_the_table_under_the_launcher(tmp_path, monkeypatch):
    """`sweep run --mpi 3 --launcher srun`: each τ's train-controller and then `evaluate --sweep` (the table's real
    episodes) start with the same ranks and launcher (before: the table ran in one process)."""
    from wm.tools import sweep

    src = RunDir(tmp_path / "r")
    dsts = {t: RunDir(tmp_path / f"r-tau{t:g}") for t in (0.5, 1.0)}
    monkeypatch.setattr(sweep, "reuse_or_prepare", lambda s, t: dsts[t])
    cmds: list[list[str]] = []

    def fake_run(cmd):
        cmds.append(cmd)
        if "train-controller" in cmd:
            RunDir(cmd[cmd.index("--run") + 1]).mark_done("train-controller", {})
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(subprocess, "run", fake_run)
    assert sweep.run_all(src, [0.5, 1.0], 3, 4, Launcher.parse("srun", "--mpi=pmi2")) == 0
    pre = ["srun", "--mpi=pmi2", "-n", "3", sys.executable, "-m", "wm"]
    assert cmds[:2] == [[*pre, "train-controller", "--run", str(d.path)] for d in dsts.values()]
    table = [*pre, "evaluate", "--run", str(src.path), "--set", "evaluate.temperatures=[0.5, 1]", "--sweep"]
    assert cmds[2] == [*table, "--sweep-runs", *(str(d.path) for d in dsts.values()), "--episodes", "4"]
