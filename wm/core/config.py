"""Configuration: one YAML of defaults, named override blocks merged left to right, then `--set a.b=v`.

`configs/base.yaml` holds every key. Every other YAML file in `configs/` holds named blocks (top-level keys,
e.g. `doom_takecover`, `tiny`) that may only override keys present in the defaults. Values are cast to the
type of their default; an unknown key or a value of the wrong type is a `WMError` naming the problem.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from wm.core.errors import WMError

# configs/ beside wm/ in a checkout, wm/configs in the installed wheel (pyproject.toml); this file is wm/core/config.py
_HERE = Path(__file__).resolve().parent
CONFIG_DIR = next(p for p in (_HERE / "../configs", _HERE / "../../configs") if p.is_dir()).resolve()

# Keys of levers that measured no better and left the code (docs/lab/levers.md has each one's measurement). The
# last commit that has them all is RETIRED_AT: check it out to rerun a measurement. A stored config.yaml (an older
# run, the shipped agent) may still hold one at its old default, which is dropped; any other value is refused, since
# this code cannot do what that run did.
RETIRED_AT = "c325296"
RETIRED: dict[str, Any] = {
    "collect.long_hold_share": 0.0,
    "collect.long_hold": [25, 100],
    "vae.flip": False,
    "vae.pick": "first",
    "vae.init_from": "",
    "encode.mirror": False,
    "mdnrnn.reward_over_weight": 1.0,
    "dream.start": "recorded",
    "dream.worlds": [],
    "dream.critics": [],
    "dream.pessimism": 1.0,
    "dream.branch_share": 0.0,
    "dream.branch_episodes": 400,
    "dream.branch_states": 512,
    "dream.branch_window": 0,
    "dream.branch_steps": 0,
    "dream.dropout": -1.0,
    "es.init_from": "",
    "es.pick_top": 0,
    "iterate.vae_epochs": 0,
    "iterate.vae_episodes": 200,
    "iterate.warm_start_c": False,
    "iterate.warm_start_learned": False,
    "iterate.unlearned_minutes": 0,
    "iterate.redraws": 0,
    "iterate.redraw_of": "",
    "es.common_seeds": False,
    "es.cma_diagonal": False,
}
# levers retired after RETIRED_AT, each with the last commit that has it
RETIRED_LATER_AT: dict[str, str] = {"es.common_seeds": "1a17aa4", "es.cma_diagonal": "f7ffdf8"}

# Keys that left for a reason other than a measurement: a stored config at the old default is read as before, any
# other value is refused with the reason.
MOVED: dict[str, tuple[Any, str]] = {
    "metrics.mlflow_uri": (
        "",
        "a tracking server comes from $MLFLOW_TRACKING_URI in your environment, never from a run's config "
        "(docs/guide/run-directory.md)",
    ),
}


class Config(Mapping[str, Any]):
    """An immutable nested mapping with attribute access (`cfg.vae.z_dim`) and dotted lookup (`cfg["vae.z_dim"]`)."""

    def __init__(self, data: Mapping[str, Any]):
        object.__setattr__(self, "_data", {k: Config(v) if isinstance(v, Mapping) else v for k, v in data.items()})

    def __getattr__(self, name: str) -> Any:
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(f"config has no key {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError("Config is immutable; use wm.core.config.update()")

    def __getitem__(self, key: str) -> Any:
        node: Any = self
        for part in key.split("."):
            if not isinstance(node, Config) or part not in node._data:
                raise KeyError(key)
            node = node._data[part]
        return node

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"Config({self.to_dict()!r})"

    def to_dict(self) -> dict[str, Any]:
        return {k: v.to_dict() if isinstance(v, Config) else v for k, v in self._data.items()}

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def hash(self) -> str:
        """Short stable hash of the resolved config (recorded next to results)."""
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": 1}}` → `{"a.b": 1}`."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _type_name(value: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list"}.get(type(value), type(value).__name__)


def cast(key: str, value: Any, default: Any) -> Any:
    """Cast `value` to the type of `default`, or raise a WMError naming key, value and expected type."""
    if default is None or value is None and default is None:
        return value
    expected = type(default)
    bad = WMError(f"config key {key!r}: value {value!r} is not of type {_type_name(default)} (default {default!r})")
    if expected is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise bad
    if expected is int:
        if isinstance(value, bool):
            raise bad
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                raise bad from None
        raise bad
    if expected is float:
        if isinstance(value, bool):
            raise bad
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads `1e-4` (no dot) as a string
            try:
                return float(value)
            except ValueError:
                raise bad from None
        raise bad
    if expected is str:
        if isinstance(value, str):
            return value
        if isinstance(value, bool):  # YAML reads `--set vae.jit_compile=true` as a bool: the word was meant
            return str(value).lower()
        raise bad
    if expected is list:
        if isinstance(value, list):
            return value
        raise bad
    return value


# Every key's allowed values, declared once and checked whenever a config is resolved (`check`): a tuple is the
# choices of a string key; a string is an interval, `>= 1`, `> 0`, `[0, 1]`, `[0, 1)`. A list key's rule applies to
# each element. Keys not named take any value of their default's type.
RULES: dict[str, tuple[str, ...] | str] = {
    "run.seed": ">= 0",
    "run.backend": ("auto", "tensorflow", "jax"),
    "env.preprocess": ("ha2018", "clean"),
    "env.max_steps": ">= 1",
    "env.doom_skill": "[1, 5]",
    "env.frame_size": ">= 8",
    "env.renderer": ("official", "fast"),
    "data.max_bad_share": "[0, 1]",
    "collect.episodes": ">= 1",
    "collect.workers": ">= 0",  # 0: every core (wm.core.procpool.cores)
    "collect.policy": ("hold", "random_agent", "brownian", "agent"),
    "collect.hold_min": ">= 1",
    "collect.hold_max": ">= 1",
    "collect.hold_rule": ("ha2018", "exact"),
    "collect.min_length": ">= 0",
    "collect.random_agent_stdev": ">= 0",
    "collect.brownian_sigma": ">= 0",
    "collect.explore": "[0, 1]",
    "vae.z_dim": ">= 1",
    "vae.kl_tolerance": ">= 0",
    "vae.lr": ">= 0",
    "vae.adam_eps": "> 0",
    "vae.batch_size": ">= 1",
    "vae.epochs": ">= 1",
    "vae.episodes": ">= 0",
    "vae.val_fraction": "[0, 1)",
    "vae.shuffle_buffer": ">= 1",
    "vae.checkpoint_every": ">= 1",
    "vae.early_stop_patience": ">= 0",
    "vae.val_max_frames": ">= 0",
    "vae.parallel_files": ">= 0",
    "vae.jit_compile": ("true", "false", "auto"),
    "encode.batch_size": ">= 1",
    "encode.initial_z": ">= 1",
    "mdnrnn.hidden": ">= 1",
    "mdnrnn.num_mixtures": ">= 1",
    "mdnrnn.lstm": ("custom", "keras", "auto"),
    "mdnrnn.dropout": "[0, 1)",
    "mdnrnn.batching": ("streams", "episodes"),
    "mdnrnn.seq_len": ">= 2",
    "mdnrnn.batch_size": ">= 1",
    "mdnrnn.epochs": ">= 1",
    "mdnrnn.steps": ">= 1",
    "mdnrnn.lr": ">= 0",
    "mdnrnn.lr_min": ">= 0",
    "mdnrnn.lr_decay": "[0, 1]",
    "mdnrnn.grad_clip": "> 0",
    "mdnrnn.adam_eps": "> 0",
    "mdnrnn.done_weight": "> 0",
    "mdnrnn.done_horizon": ">= 1",
    "mdnrnn.reward_weight": ">= 0",
    "mdnrnn.checkpoint_every": ">= 1",
    "mdnrnn.preview_episodes": ">= 0",
    "controller.mode": ("z", "zh", "zc", "zch", "z_hidden"),
    "controller.hidden_units": ">= 1",
    "controller.z_input": ("sampled", "mean"),
    "dream.temperature": "> 0",
    "dream.max_steps": ">= 1",
    "dream.done_sampling": ("threshold", "bernoulli"),
    "es.fitness": ("dream", "real", "toy"),
    "es.popsize": ">= 2",
    "es.sigma0": "> 0",
    "es.trials": ">= 1",
    "es.generations": ">= 1",
    "es.weight_decay": ">= 0",
    "es.eval_every": ">= 1",
    "es.eval_episodes": ">= 1",
    "es.seed": ">= 0",
    "es.chunk": ">= 0",
    "es.task_timeout": "> 0",
    "es.task_retries": ">= 0",
    "es.real_envs_per_worker": ">= 1",
    "es.no_progress_steps": ">= 0",
    "es.device": ("auto", "cpu", "gpu"),
    "es.algorithm": ("cma", "openes", "pepg", "ga"),
    "es.lr": "> 0",
    "es.lr_sigma": "> 0",
    "es.sigma_decay": "[0, 1]",
    "es.sigma_min": ">= 0",
    "es.elite_ratio": "(0, 1]",
    "es.draws": ">= 1",
    "es.pick_real": ">= 0",
    "iterate.rounds": ">= 0",
    "iterate.episodes": ">= 1",
    "iterate.explore": "[0, 1]",
    "iterate.mdnrnn_epochs": ">= 0",
    "iterate.mdnrnn_steps": ">= 0",
    "iterate.generations": ">= 1",
    "iterate.check_episodes": ">= 0",
    "iterate.check_seed": ">= 0",
    "iterate.patience": ">= 1",
    "iterate.max_minutes": ">= 0",
    "iterate.clock": ("wall", "work"),
    "iterate.exploit_ratio": "> 0",
    "iterate.explore_exploit": "[0, 1]",
    "iterate.target_ratio": ">= 0",
    "iterate.final_check": ">= 0",
    "iterate.final_passes": ">= 1",
    "iterate.evaluate_passes": ("all", "result"),
    "iterate.final_more": ">= 0",
    "iterate.dream_gate": ">= 0",
    "iterate.dream_gate_ratio": "[0, 1]",
    "evaluate.episodes": ">= 1",
    "evaluate.seed": ">= 0",
    "evaluate.workers": ">= 0",
    "evaluate.gif_episodes": ">= 0",
    "evaluate.gif_stride": ">= 1",
    "evaluate.temperatures": "> 0",
}


# Keys whose value must match a pattern, with what a value that does not means.
PATTERNS: dict[str, tuple[re.Pattern[str], str]] = {
    # gymnasium.make("module:Id") imports `module` (from the working directory too): a config, which a run directory
    # carries, may only name an env, never code (docs/guide/run-directory.md)
    "env.name": (
        re.compile(r"[^:]*(:[^:]*)?"),
        "names code to import (the <family>:<module>:<id> form), which is refused: register your env in your own "
        "module, name that module in $WM_GYM_MODULES, and use the <family>:<id> form",
    ),
}


def _fits(value: Any, rule: tuple[str, ...] | str) -> bool:
    if isinstance(rule, tuple):
        return value in rule
    if rule[0] in "[(":  # an interval [lo, hi], (lo, hi], [lo, hi)
        lo, hi = (float(x) for x in rule[1:-1].split(","))
        return (lo <= value if rule[0] == "[" else lo < value) and (value <= hi if rule[-1] == "]" else value < hi)
    op, bound = rule.split()
    return value >= float(bound) if op == ">=" else value > float(bound)


def check(cfg: Config) -> Config:
    """Refuse a config with a value outside its key's `RULES`, in one line naming the key, the rule and the value."""
    flat = flatten(cfg.to_dict())
    for key, hint in PATTERNS.items():
        if not hint[0].fullmatch(str(flat[key])):
            raise WMError(f"config key {key!r}: {flat[key]!r} {hint[1]}")
    for key, rule in RULES.items():
        values = flat[key] if isinstance(flat[key], list) else [flat[key]]
        for v in values:
            if not _fits(v, rule):
                allowed = " | ".join(rule) if isinstance(rule, tuple) else rule
                raise WMError(f"config key {key!r} must be {allowed}, got {flat[key]!r}")
    return cfg


def _nearest(key: str, keys: list[str]) -> str:
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.0)
    return f"; did you mean {close[0]!r}?" if close else ""


def update(cfg: Config, overrides: Mapping[str, Any], source: str = "override") -> Config:
    """Return a new Config with `overrides` (nested or dotted keys) applied strictly, its values checked against
    `RULES` (every config the code builds is checked as a loaded one is)."""
    flat = flatten(cfg.to_dict())
    for key, value in flatten(overrides).items():
        if key not in flat and key in MOVED:
            if value == MOVED[key][0]:
                continue
            raise WMError(f"config key {key!r} in {source} is gone: {MOVED[key][1]}")
        if key not in flat and key in RETIRED:
            if value == RETIRED[key]:
                continue  # an older run's config at the retired lever's default: nothing it did is lost
            raise WMError(
                f"config key {key!r} in {source} is a retired lever (measured no better, docs/lab/levers.md): "
                f"{value!r} needs the code of commit {RETIRED_LATER_AT.get(key, RETIRED_AT)}"
            )
        if key not in flat:
            raise WMError(f"unknown config key {key!r} in {source}{_nearest(key, list(flat))}")
        flat[key] = cast(key, value, flat[key])
    return check(Config(_unflatten(flat)))


def _unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def _load_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise WMError(f"cannot parse {path}: {e}".splitlines()[0]) from None
    if not isinstance(data, dict):
        raise WMError(f"{path} must hold a mapping of blocks")
    return data


def defaults(config_dir: Path = CONFIG_DIR) -> Config:
    """The defaults from `configs/base.yaml`."""
    return Config(_load_yaml(config_dir / "base.yaml"))


def blocks(config_dir: Path = CONFIG_DIR) -> dict[str, dict[str, Any]]:
    """All named blocks from the YAML files in `configs/` other than base.yaml."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(config_dir.glob("*.yaml")):
        if path.name == "base.yaml":
            continue
        for name, block in _load_yaml(path).items():
            if name in out:
                raise WMError(f"config block {name!r} is defined twice (second in {path.name})")
            out[name] = block or {}
    return out


def _apply_block(cfg: Config, name: str, block: Mapping[str, Any]) -> Config:
    """Apply a named block. A block's `for_env` maps env names to settings applied only for that env (a size preset
    sized differently per game, e.g. `small`); a block that has such sections but none for the env is refused."""
    common = {k: v for k, v in block.items() if k != "for_env"}
    cfg = update(cfg, common, source=f"block {name!r}")
    sections = block.get("for_env") or {}
    if not sections:
        return cfg
    env = cfg.env.name
    if env not in sections:
        raise WMError(
            f"config block {name!r} has settings for {', '.join(sorted(sections))} only, not env {env!r} "
            "(name the env's block before it, e.g. --configs carracing small)"
        )
    return update(cfg, sections[env] or {}, source=f"block {name!r} (for {env})")


def parse_set(items: list[str]) -> dict[str, Any]:
    """Parse `a.b=v` strings; values are read as YAML scalars (`3`, `1e-4`, `true`, `[1, 2]`)."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise WMError(f"--set expects key=value, got {item!r}")
        key, raw = item.split("=", 1)
        out[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
    return out


def env_first(names: list[str], available: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """`names` with the env block (one that sets `env.name`, e.g. doom_takecover) moved first: a recipe block such as
    `small` or `tiny` then overrides the env's settings whatever order the command named them in (`small
    doom_takecover` is `doom_takecover small`). Two env blocks are refused: one would silently undo the other."""
    envs = [n for n in names if "name" in ((available.get(n) or {}).get("env") or {})]
    if len(envs) > 1:
        raise WMError(f"config blocks {', '.join(map(repr, envs))} each choose the env: name one of them")
    return envs + [n for n in names if n not in envs]


def _refuse_without_env(names: list[str], available: Mapping[str, Mapping[str, Any]], overrides: Mapping[str, Any]) -> None:
    """A recipe block (`tiny`, `small`) is a size for a game: without the game's block (or `env.name` from a file or
    `--set`) it would silently take base.yaml's defaults for the env (another preprocessing, other workers), which is
    not the recipe any page reports."""
    sets_env = "env.name" in flatten(overrides)
    recipes = []
    for name in names:
        path = Path(name)
        if name.endswith((".yaml", ".yml")) and path.exists():
            sets_env = sets_env or "env.name" in flatten(_load_yaml(path))
        elif "name" in ((available.get(name) or {}).get("env") or {}):
            sets_env = True
        elif name in available:
            recipes.append(name)
    if recipes and not sets_env:
        envs = sorted(n for n, b in available.items() if "name" in ((b or {}).get("env") or {}))
        example = "doom_takecover" if "doom_takecover" in envs else envs[0]
        raise WMError(
            f"--configs {' '.join(names)} names no env: put the env's block first, e.g. --configs {example} "
            f"{' '.join(names)} (env blocks: {', '.join(envs)}), or set env.name"
        )


def load(names: list[str], sets: list[str] | None = None, config_dir: Path = CONFIG_DIR) -> Config:
    """Resolve a config: defaults, the env block, then the other named blocks left to right, then `--set` overrides;
    refused when a value breaks its key's `RULES`.

    Args:
        names: block names, e.g. `["doom_takecover", "tiny"]`, or paths to YAML files holding overrides.
        sets: `a.b=v` overrides applied last.
    """
    cfg = defaults(config_dir)
    available = blocks(config_dir)
    per_env: list[tuple[str, str]] = []  # (block, env its for_env section was applied for)
    overrides = parse_set(sets or [])
    _refuse_without_env(names, available, overrides)
    for name in env_first(names, available):
        path = Path(name)
        if name.endswith((".yaml", ".yml")) and path.exists():
            cfg = update(cfg, _load_yaml(path), source=str(path))
        elif name in available:
            cfg = _apply_block(cfg, name, available[name])
            if available[name].get("for_env"):
                per_env.append((name, cfg.env.name))
        else:
            raise WMError(
                f"unknown config block {name!r}{_nearest(name, sorted(available))} (blocks: {', '.join(sorted(available))})"
            )
    cfg = update(cfg, overrides, source="--set")
    for name, env in per_env:
        if cfg.env.name != env:
            raise WMError(
                f"config block {name!r} applied its {env} settings, then env.name became {cfg.env.name!r}: name the "
                f"env's block before it (e.g. --configs {cfg.env.name} {name})"
            )
    return check(cfg)
