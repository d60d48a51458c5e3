"""The work clock (`iterate.clock: work`): round control's time budget counted in the minutes a pass's work takes on
the reference machine, not in this machine's wall-clock minutes, so a seed runs the same rounds on every machine.

With the wall clock (`iterate.clock: wall`, the default) `iterate.max_minutes` counts this machine's minutes, and a
seed's rounds depend on the machine: this project's 2-core machines ran the same fixed-size first pass in 25.1 and
33.2 min, so a seed that learns in its sixth round on one may stop unlearned on the other. The
work clock reads what each pass did from its run directory (frames collected and encoded, V's and M's training
samples, dreamed and real steps, the stages it ran) and prices each unit at `iterate.work`'s seconds, measured on
the reference machine (fitted from a finished run's stage timings). It is a pure function of the files: a killed and
resumed run, a replay, or the same seed on a faster or slower machine (or a GPU) counts the same minutes and runs the
same rounds.

What a pass did, by stage (a stage marked DONE with `linked_from`, a round's V, did no work):
- collect: the frames it added to the previous pass's episodes (`agent_frame` when C played them, else
  `collect_frame`);
- train-vae: steps × batch (`vae_sample`); encode: the frames it wrote (`encode_frame`);
- train-mdnrnn: steps × batch × seq_len (`mdnrnn_sample`);
- train-controller: per generation, the population's episodes and, when it evaluated the mean, `es.eval_episodes`
  more, each as long as the generation's mean episode (`dream_step` or, with es.fitness real, `real_step`); with
  `es.pick_real`, each check's tracks at `env.max_steps` (their lengths are not recorded: an upper bound);
- the checks round control plays (`eval/check*`, `eval/gate-*`): their episodes' recorded steps (`real_step`,
  `dream_step`);
- and `stage` seconds for each stage run and each check played (start-up: imports, graphs, workers).
The final check and the evaluations after the rounds are not counted: no round decision follows them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wm.core.bounded import read_json, read_jsonl
from wm.core.config import Config
from wm.core.errors import WMError
from wm.core.rundir import RunDir

UNITS = ("stage", "collect_frame", "agent_frame", "vae_sample", "encode_frame", "mdnrnn_sample", "dream_step", "real_step")
CHECKS = ("check", "check-dream", "check-random")  # round control's own episodes; `gate-*` too (the dream gate)


def rates(cfg: Config) -> dict[str, float]:
    """`iterate.work`: seconds per unit of work on the reference machine, refused in one line when the clock is
    `work` and they price nothing."""
    r = {k: cfg.iterate.work[k] for k in UNITS}
    if any(v < 0 for v in r.values()) or not any(v > 0 for v in r.values()):
        raise WMError(
            "iterate.clock: work needs iterate.work's seconds per unit on the reference machine (each ≥ 0, some > 0), "
            "or iterate.clock: wall"
        )
    return r


def _done(where: RunDir, verb: str) -> dict[str, Any] | None:
    """The stage's DONE figures when it ran in this pass (None: not run here, or linked from another pass)."""
    if not where.is_done(verb):
        return None
    info = where.done_info(verb)
    return None if "linked_from" in info else info


def stage_units(where: RunDir, prev: RunDir | None, cfg: Config) -> dict[str, dict[str, float]]:
    """The work pass `where` did (its own `cfg`), by stage it ran (collect, train-vae, encode, train-mdnrnn,
    train-controller; "checks": round control's episodes) and unit (`UNITS`); `prev`: the pass whose episodes it
    extended (None: the first pass)."""
    out: dict[str, dict[str, float]] = {}

    def add(stage: str, unit: str, n: float) -> None:
        u = out.setdefault(stage, dict.fromkeys(UNITS, 0.0))
        u[unit] += n

    total = frames = 0.0
    if (info := _done(where, "collect")) is not None:
        before = float(prev.done_info("collect").get("collect/frames", 0)) if prev is not None else 0.0
        total = float(info.get("collect/frames", 0))
        frames = max(0.0, total - before)
        add("collect", "agent_frame" if cfg.collect.policy == "agent" else "collect_frame", frames)
    if (info := _done(where, "train-vae")) is not None:
        add("train-vae", "vae_sample", float(info.get("steps", 0)) * cfg.vae.batch_size)
    if (info := _done(where, "encode")) is not None:
        everything = int(info.get("written", 0)) >= int(info.get("episodes", 0)) > 0
        add("encode", "encode_frame", total if everything else frames)
    if (info := _done(where, "train-mdnrnn")) is not None:
        m = cfg.mdnrnn
        add("train-mdnrnn", "mdnrnn_sample", float(info.get("mdnrnn/step", 0)) * m.batch_size * m.seq_len)
    if _done(where, "train-controller") is not None:
        for unit, n in _controller_units(where, cfg).items():
            add("train-controller", unit, n)
    for stage in out.values():
        stage["stage"] = 1.0
    for summary in where.eval_summaries():
        tag = summary.parent.name
        if tag not in CHECKS and not tag.startswith("gate-"):
            continue
        doc = read_json(summary)
        add(
            "checks",
            "dream_step" if doc.get("mode") == "dream" else "real_step",
            float(doc.get("len_mean", 0)) * int(doc.get("episodes", 0)),
        )
        add("checks", "stage", 1.0)
    return out


def pass_units(where: RunDir, prev: RunDir | None, cfg: Config) -> dict[str, float]:
    """`stage_units` summed over the stages: the pass's work by unit."""
    u = dict.fromkeys(UNITS, 0.0)
    for stage in stage_units(where, prev, cfg).values():
        for k, n in stage.items():
            u[k] += n
    return u


def _controller_units(where: RunDir, cfg: Config) -> dict[str, float]:
    es = cfg.es
    u = {"dream_step": 0.0, "real_step": 0.0}
    per_gen = es.popsize * es.trials
    key = "real_step" if es.fitness == "real" else "dream_step"
    gens: dict[int, Mapping[str, Any]] = {}
    for rec in read_jsonl(where.metrics_path("train-controller")):
        if "es/len_mean" in rec:
            gens[int(rec["step"])] = rec  # a resumed generation's record replaces the killed one's
    for rec in gens.values():
        episodes = per_gen + (es.eval_episodes if "es/eval_mean" in rec else 0)
        u[key] += float(rec["es/len_mean"]) * episodes
    if es.pick_real > 0:
        u["real_step"] += len(where.check_files()) * es.pick_real * cfg.env.max_steps
    return u


def seconds(units: Mapping[str, float], r: Mapping[str, float]) -> float:
    return sum(float(units[k]) * float(r[k]) for k in UNITS)


class WorkLedger:
    """The run's work minutes as round control checks its passes: `add` each pass after its check (with the pass it
    extended), `total` is the budget's clock, `marks` {pass: the work minutes when its check ended}."""

    def __init__(self, cfg: Config) -> None:
        self.rates = rates(cfg)
        self.total = 0.0
        self.marks: dict[str, float] = {}
        self.units: dict[str, dict[str, float]] = {}

    def add(self, name: str, where: RunDir, prev: RunDir | None, cfg: Config | None = None) -> float:
        """Count pass `name` (in `where`, its config `cfg` or the one on disk); returns its minutes."""
        cfg = cfg or where.load_config()
        if cfg is None:
            raise WMError(f"the work clock cannot count {name}: {where.path} has no config.yaml")
        self.units[name] = units = pass_units(where, prev, cfg)
        minutes = seconds(units, self.rates) / 60
        self.total += minutes
        self.marks[name] = self.total
        return minutes
