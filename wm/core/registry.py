"""The stage registry: one record per verb of `python -m wm`, the one place a stage's identity lives.

Every consumer reads it, none keeps its own list: the CLI (verbs, help, which verbs load TensorFlow), the run
directory (folders, config sections a stage owns), `status` and the TUI (key figures, plots), the pipeline
(order and progress), the report (training-curve plots), iterative training and the τ sweep (which stages a
round or a τ run shares). The README's stage table is checked against it (tests/test_registry.py).

Pure data and small functions of (run, config, last metrics record): importing this module costs nothing, so
`--help` and the TUI stay free of TensorFlow.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only: the run-dir module imports this one
    from wm.core.config import Config
    from wm.core.rundir import RunDir

Progress = Callable[["RunDir", "Config", dict[str, Any]], "float | None"]
Figures = Callable[["RunDir"], dict[str, Any]]


@dataclass(frozen=True)
class Plot:
    """A training curve: `plots/<file>` in the report; the TUI plots the same series."""

    file: str
    title: str
    xlabel: str
    series: tuple[tuple[str, str], ...]  # (legend name, metric key)


@dataclass(frozen=True)
class Stage:
    """One stage of the pipeline: a function of (config, run directory) with a DONE sentinel in `dir`.

    `role` says what later runs share: "data" and "world" stages are shared by a τ sweep's runs, everything but
    "eval" must be finished before an iterative-training round is built on a run.
    """

    verb: str  # CLI verb, e.g. "train-vae"
    name: str  # short name: metrics/<name>.jsonl, logs/<name>.log
    dir: str  # output folder in the run dir, holds DONE
    module: str  # wm/stages/<x>.py with Options (its flags), run(inp, run, opts) and optionally side_run, …
    help: str
    sections: tuple[str, ...]  # config sections this stage owns
    uses: tuple[str, ...]  # other sections it reads (besides `run` and `env`): its StageInput holds these and its own
    role: str  # data | world | controller | eval
    tf: bool  # loads TensorFlow where its work needs it (its C++ start-up lines muted on the first import)
    reads: tuple[str, ...]  # artifact keys (wm.core.rundir.ARTIFACTS)
    writes: tuple[str, ...]
    key_figures: tuple[str, ...]  # metric keys shown by status and the TUI
    figures: Figures | None = None  # key figures read from files (counts, summaries), before the metrics
    progress: Progress | None = None  # fraction done, for the pipeline's ETA
    plots: tuple[Plot, ...] = ()
    watch: tuple[str, ...] = ()  # the TUI's live plot of the stage
    rate: str | None = None  # throughput metric, the TUI's sparkline
    ranks: bool = False  # runs across MPI ranks under a launcher (rank 0 dispatches, the others play)
    kind: str = field(default="stage", init=False)

    @property
    def blocks(self) -> tuple[str, ...]:
        """Every config block the stage reads: its own sections, its `uses`, then `run` and `env` (the order the TUI
        shows them in)."""
        return (*self.sections, *self.uses, *GLOBAL_SECTIONS)


@dataclass(frozen=True)
class Tool:
    """A verb that is not a stage: `main(args) -> int` of its module, optionally `add_args(parser)`."""

    verb: str
    module: str
    help: str
    tf: bool = False
    kind: str = field(default="tool", init=False)


# ---------------------------------------------------------------- figures and progress read from the run dir


def _episodes_figures(run: RunDir) -> dict[str, Any]:
    return {"collect/episodes": run.count_episodes(run.episodes_dir)} if run.episodes_dir.exists() else {}


def _series_figures(run: RunDir) -> dict[str, Any]:
    return {"encode/episodes": run.count_episodes(run.series_dir)} if run.series_dir.exists() else {}


def _controller_figures(run: RunDir) -> dict[str, Any]:
    """The real pick of `es.pick_real` (train-controller's DONE): which check best.npz is and its real score."""
    return {k: v for k, v in run.done_info("train-controller").items() if k.startswith("pick/")}


def _eval_figures(run: RunDir) -> dict[str, Any]:
    from wm.core.bounded import read_json_or

    path = run.eval_summary()
    s = read_json_or(path, {}) if path.exists() else {}
    if not isinstance(s, dict):
        return {}
    drive = s.get("drive") if isinstance(s.get("drive"), dict) else {}
    # CarRacing's figures beside the score (wm.rollouts.evaluation.drive_summary): a slow car or a crashing one
    return {
        **{f"eval/{k}": s[k] for k in ("episodes", "mean", "std") if k in s},
        **{f"eval/{k}": drive[k] for k in ("tiles", "laps", "speed", "gas") if k in drive},
    }


def _collect_progress(run: RunDir, cfg: Config, rec: dict[str, Any]) -> float | None:
    return run.count_episodes(run.episodes_dir) / max(1, cfg.collect.episodes)


def _encode_progress(run: RunDir, cfg: Config, rec: dict[str, Any]) -> float | None:
    return run.count_episodes(run.series_dir) / max(1, run.count_episodes(run.episodes_dir))


def _vae_progress(run: RunDir, cfg: Config, rec: dict[str, Any]) -> float | None:
    if "vae/epoch_progress" not in rec and "vae/epoch" not in rec:
        return None
    # step records carry epoch_progress (from 0 within training), epoch records vae/epoch (epochs finished)
    return min(1.0, float(rec.get("vae/epoch_progress", rec.get("vae/epoch", 0))) / max(1, cfg.vae.epochs))


def _mdnrnn_progress(run: RunDir, cfg: Config, rec: dict[str, Any]) -> float | None:
    if "mdnrnn/epoch" in rec and cfg.mdnrnn.batching == "streams":
        return (float(rec["mdnrnn/epoch"]) + 1) / max(1, cfg.mdnrnn.epochs)
    if "mdnrnn/step" in rec and cfg.mdnrnn.batching == "episodes":
        return float(rec["mdnrnn/step"]) / max(1, cfg.mdnrnn.steps)
    return None


def _es_progress(run: RunDir, cfg: Config, rec: dict[str, Any]) -> float | None:
    total = cfg.es.generations * cfg.es.draws  # es.draws: the generations count on over every draw
    return float(rec["es/generation"]) / max(1, total) if "es/generation" in rec else None


def _eval_progress(run: RunDir, cfg: Config, rec: dict[str, Any]) -> float | None:
    return float(rec["eval/done"]) / max(1, cfg.evaluate.episodes) if "eval/done" in rec else None


# ---------------------------------------------------------------- the registry

STAGES: tuple[Stage, ...] = (
    Stage(
        "collect",
        "collect",
        "episodes",
        "wm.stages.collect",
        "roll out the data policy, write episodes/*.npz",
        ranks=True,
        sections=("collect",),
        uses=("es",),
        role="data",
        tf=False,
        reads=(),
        writes=("episodes",),
        key_figures=("collect/episodes", "collect/frames"),
        figures=_episodes_figures,
        progress=_collect_progress,
        watch=("collect/episodes",),
        rate="collect/steps_per_s",
    ),
    Stage(
        "train-vae",
        "vae",
        "vae",
        "wm.stages.train_vae",
        "train V (ConvVAE) on the episodes, streamed",
        sections=("vae",),
        uses=("data",),
        role="world",
        tf=False,  # its backend is the config's run.backend: TensorFlow is imported (or not) by the stage
        reads=("episodes",),
        writes=("vae_weights", "reconstructions"),
        key_figures=("vae/epoch", "vae/loss", "vae/val_loss"),
        progress=_vae_progress,
        plots=(
            Plot(
                "vae_loss.png",
                "V (ConvVAE) loss",
                "step",
                (("loss", "vae/loss"), ("val loss", "vae/val_loss"), ("recon", "vae/recon"), ("kl", "vae/kl")),
            ),
        ),
        watch=("vae/loss", "vae/val_loss"),
        rate="vae/frames_per_s",
    ),
    Stage(
        "encode",
        "encode",
        "series",
        "wm.stages.encode",
        "encode every episode with V into series/ (mu, logvar)",
        sections=("encode",),
        uses=("vae", "data"),
        role="data",
        tf=True,
        reads=("episodes", "vae_weights"),
        writes=("series", "initial_z"),
        key_figures=("encode/episodes",),
        figures=_series_figures,
        progress=_encode_progress,
        watch=("encode/episodes",),
    ),
    Stage(
        "train-mdnrnn",
        "mdnrnn",
        "mdnrnn",
        "wm.stages.train_mdnrnn",
        "train M (MDN-RNN) on series/",
        sections=("mdnrnn",),
        uses=("vae", "data"),
        role="world",
        tf=False,  # its backend is the config's run.backend: TensorFlow is imported (or not) by the stage
        reads=("series", "initial_z"),
        writes=("mdnrnn_weights", "dream_preview"),
        key_figures=("mdnrnn/step", "mdnrnn/nll", "mdnrnn/done_loss"),
        progress=_mdnrnn_progress,
        plots=(
            Plot("mdnrnn_nll.png", "M (MDN-RNN) loss", "step", (("nll", "mdnrnn/nll"), ("done loss", "mdnrnn/done_loss"))),
        ),
        watch=("mdnrnn/nll",),
        rate="mdnrnn/steps_per_s",
    ),
    Stage(
        "train-controller",
        "controller",
        "controller",
        "wm.stages.train_controller",
        "train C with CMA-ES (run under mpirun for workers)",
        ranks=True,
        sections=("controller", "dream", "es"),
        uses=("mdnrnn", "evaluate"),
        role="controller",
        tf=True,
        reads=("mdnrnn_weights", "initial_z", "vae_weights"),
        writes=("es_state", "params_best", "params_mean"),
        key_figures=("es/generation", "es/mean", "es/best", "es/eval_best", "pick/generation", "pick/real"),
        figures=_controller_figures,
        progress=_es_progress,
        plots=(
            Plot(
                "es.png",
                "CMA-ES fitness per generation",
                "generation",
                (("mean", "es/mean"), ("best of gen", "es/max"), ("best so far", "es/best"), ("eval of mean", "es/eval_mean")),
            ),
        ),
        watch=("es/best", "es/mean", "es/min"),
        rate="es/evals_per_s",
    ),
    Stage(
        "evaluate",
        "eval",
        "eval",
        "wm.stages.evaluate",
        "evaluate C over N fixed-seed episodes",
        sections=("evaluate",),
        uses=("dream", "es"),
        role="eval",
        tf=True,
        reads=("vae_weights", "mdnrnn_weights", "params_best"),
        writes=("eval_summary",),
        key_figures=("eval/episodes", "eval/mean", "eval/std"),
        figures=_eval_figures,
        progress=_eval_progress,
        ranks=True,
        watch=("eval/mean",),
    ),
)

TOOLS: tuple[Tool, ...] = (
    Tool("status", "wm.tools.status", "print each stage's state and key figures"),
    Tool("data", "wm.tools.data_check", "dataset tools: `data check` summarises episodes/ and bad files"),
    Tool("report", "wm.tools.report", "write the run's Markdown report with plots"),
    Tool("pipeline", "wm.tools.pipeline", "run every stage in order, skipping finished ones"),
    Tool("sweep", "wm.tools.sweep", "τ sweep runs: `sweep prepare` makes one run dir per dream temperature"),
    Tool("results", "wm.tools.results", "gather several runs (seeds) into one Markdown table and JSON, with bootstrap CIs"),
    Tool(
        "play",
        "wm.tools.play",
        "drive in M's dream (or the real game) with the keyboard, or watch C: a pygame window",
        tf=True,
    ),
    Tool(
        "export", "wm.tools.export", "write a run's trained agent (V, M, C, dream starts) as a small run dir, float16 weights"
    ),
    Tool("config", "wm.tools.config_show", "print the resolved config of --configs/--set (or a run's), each key with its why"),
    Tool("agents", "wm.tools.agents", "the trained agents shipped with the package: list them, or copy one to run on"),
    Tool("reference", "wm.tools.reference", "is my run on track? its curves against its preset's recorded runs"),
    Tool("doctor", "wm.tools.doctor", "check this machine for runs: versions, GPUs, MPI, envs, disk"),
    Tool("docs", "wm.tools.docs", "the documentation, installed with the package: list the pages, or print one"),
    Tool("tui", "wm.tui.__main__", "the terminal UI over a run directory or a folder of runs (Textual)"),
)

# The order of `python -m wm --help`: status first, the stages in pipeline order, then the other tools.
VERBS: tuple[Stage | Tool, ...] = (TOOLS[0], *STAGES, *TOOLS[1:])

# Sections that may change at any time: `iterate` only shapes the rounds, which are runs with their own config;
# `data` (max_bad_share) is a tolerance that shapes no artifact, so a rerun may loosen or tighten it.
FREE_SECTIONS = ("iterate", "data", "metrics")
# `run` and `env` belong to no stage: they may not change once any stage has started.
GLOBAL_SECTIONS = ("run", "env")


def stage(key: str) -> Stage:
    """Look a stage up by verb, short name or folder (KeyError when none)."""
    for s in STAGES:
        if key in (s.verb, s.name, s.dir):
            return s
    raise KeyError(key)


def verb(name: str) -> Stage | Tool:
    """The registered verb `name` (KeyError when none)."""
    for v in VERBS:
        if v.verb == name:
            return v
    raise KeyError(name)


def ranked(name: str) -> bool:
    """Whether stage `name` runs across MPI ranks under a launcher (`Stage.ranks`: rank 0 dispatches, the others
    play); False for any other verb or name."""
    return any(s.ranks for s in STAGES if name in (s.verb, s.name))


def stages_with_role(*roles: str) -> tuple[Stage, ...]:
    """The stages whose role is one of `roles`, in pipeline order."""
    return tuple(s for s in STAGES if s.role in roles)


def plots() -> tuple[tuple[Stage, Plot], ...]:
    """Every training-curve plot with its stage, in pipeline order."""
    return tuple((s, p) for s in STAGES for p in s.plots)


# ---------------------------------------------------------------- the stage contract


@runtime_checkable
class StageModule(Protocol):
    """What a stage module (`Stage.module`) must provide: `Options`, a frozen dataclass with one typed field per flag
    the stage reads (its own flags, declared there with `wm.core.flags.flag`, and the shared `force` where it reads
    it), and `run(inp, run, opts)`, the stage as a function of its inputs (`wm.stages.contract.StageInput`: the env
    facts and the config blocks it declares, resolved once by the command), the run directory and its `Options`
    (built from the parsed command line by `options`). The optional hooks are in `StageHooks`; a module
    declares one by defining a module-level name of the same name."""

    Options: type

    def run(self, inp: Any, run: RunDir, opts: Any) -> Any: ...  # inp: a StageInput (the stages' floor is above)


@dataclass(frozen=True)
class StageHooks:
    """A stage's optional hooks with their defaults, read once from its module (`hooks`), so no caller looks them
    up by name. Every hook that reads the command line takes the stage's `Options` (`opts`).

    side_run: an invocation that neither checks nor writes the stage's DONE (`evaluate --random`).
    continues: an invocation that continues a DONE stage from its checkpoint (`train-controller --extend`).
    check_redo: refuses a rerun the stage cannot do, before anything is written.
    redo_hint: what the "already done" line adds to "use --force to redo".
    own_progress: the stage prints its own progress line with an ETA (`OWN_PROGRESS`), so the CLI's is not added.
    """

    side_run: Callable[[Any], bool] | None = None
    continues: Callable[[Any], bool] | None = None
    check_redo: Callable[[Any, RunDir, Any], None] | None = None  # (StageInput, RunDir, Options)
    redo_hint: str = ""
    own_progress: bool = False


def hooks(module: ModuleType) -> StageHooks:
    """The optional hooks a stage module defines (`REDO_HINT` for `redo_hint`)."""
    return StageHooks(
        side_run=getattr(module, "side_run", None),
        continues=getattr(module, "continues", None),
        check_redo=getattr(module, "check_redo", None),
        redo_hint=str(getattr(module, "REDO_HINT", "")),
        own_progress=bool(getattr(module, "OWN_PROGRESS", False)),
    )


def check_stage_module(module: ModuleType, verb: str) -> ModuleType:
    """Refuse a stage module that does not implement `StageModule` (a callable `run` of three parameters and an
    `Options` dataclass) or whose hooks are not what `StageHooks` says, naming the verb and what is wrong."""
    run = getattr(module, "run", None)
    if not callable(run):
        raise TypeError(f"stage {verb}: {module.__name__} has no run(inp, run, opts)")
    params = [p for p in inspect.signature(run).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(params) < 3:
        raise TypeError(f"stage {verb}: {module.__name__}.run takes {len(params)} parameters, not (inp, run, opts)")
    opts = getattr(module, "Options", None)
    if opts is None:
        raise TypeError(f"stage {verb}: {module.__name__} has no Options (a dataclass of the flags the stage reads)")
    if not (isinstance(opts, type) and dataclasses.is_dataclass(opts)):
        raise TypeError(f"stage {verb}: {module.__name__}.Options is not a dataclass")
    if hasattr(module, "add_args"):  # a stage's flags are its Options' fields: these would be missing, unread
        raise TypeError(f"stage {verb}: {module.__name__}.add_args is not read: declare its flags in Options with flag()")
    h = hooks(module)
    for name in ("side_run", "continues", "check_redo"):
        if getattr(h, name) is not None and not callable(getattr(h, name)):
            raise TypeError(f"stage {verb}: {module.__name__}.{name} is not a function")
    return module


def options(module: ModuleType, args: argparse.Namespace) -> Any:
    """The stage's `Options` from its parsed command line, whose parser has a flag per field (`wm.core.flags.add_flags`
    refuses a field without one); a list (`nargs`'s) becomes a tuple: the options are frozen."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(module.Options)}
    return module.Options(**{k: tuple(v) if isinstance(v, list) else v for k, v in given.items()})


def load_stage(verb_name: str) -> ModuleType:
    """Import the module of stage `verb_name` and check it implements the stage contract."""
    return check_stage_module(importlib.import_module(stage(verb_name).module), stage(verb_name).verb)
