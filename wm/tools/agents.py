"""`wm agents`: the trained agents shipped inside the package, and a copy of one to run on.

    wm agents                                   # each shipped agent: env, recipe, its score as shipped
    wm agents copy doom_small_s2 runs/agent     # a copy to evaluate, play or watch (parent folders created)

The agents live in the installed package (`wm/agents/`, site-packages for a pip user), which a command may not write
into: an evaluation writes into its run. `copy` makes an ordinary run directory of one, its files given the modes
this process's umask gives a new file (an installed package's files may be read-only).
"""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path
from typing import Any

from wm.core.bounded import read_json_or
from wm.core.copying import copy_tree
from wm.core.errors import WMError
from wm.core.format import count
from wm.core.rundir import RunDir

AGENTS_DIR = Path(__file__).resolve().parent.parent / "agents"


def shipped() -> dict[str, Path]:
    """Every shipped agent by name (a folder of `wm/agents/` with an `agent.json`)."""
    if not AGENTS_DIR.is_dir():
        return {}
    return {p.name: p for p in sorted(AGENTS_DIR.iterdir()) if (p / "agent.json").is_file()}


def agent_path(name: str) -> Path:
    """The shipped agent `name`, or one line naming the agents there are."""
    agents = shipped()
    if name in agents:
        return agents[name]
    close = difflib.get_close_matches(name, list(agents), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f" (the agents: {', '.join(agents) or 'none'})"
    raise WMError(f"no shipped agent {name!r}{hint}")


def score_as_shipped(path: Path) -> dict[str, Any] | None:
    """The agent's own evaluation as shipped (`eval/summary.json`: its float16 weights on the evaluation seeds),
    the one score every reader of a shipped agent shows."""
    s = read_json_or(RunDir(path).eval_summary())
    return s if isinstance(s, dict) and "mean" in s else None


def describe(path: Path) -> str:
    """`doom_takecover, round4 of s2: 830.4 ± 477.1 over 100 episodes (random 213.6 on the same seeds)`."""
    from wm.core.config import Config

    info = read_json_or(path / "agent.json", {})
    cfg = RunDir(path).load_config() or Config({})
    env = cfg["env.name"] if "env" in cfg else "?"
    s = score_as_shipped(path)
    score = f"{s['mean']:.1f} ± {s['std']:.1f} over {count(s['episodes'], 'episode')}" if s else "no score recorded"
    rnd = info.get("random") if isinstance(info, dict) else None
    random = f" (random {rnd['mean']:.1f} on the same seeds)" if isinstance(rnd, dict) and "mean" in rnd else ""
    return f"{env}, {info.get('pass', '?')} of {info.get('source', '?')}: {score}{random}"


def copy(name: str, dest: Path) -> Path:
    """Copy the shipped agent `name` to `dest` (which must not exist; its parents are created)."""
    src = agent_path(name)
    if dest.exists():
        raise WMError(f"{dest} exists; choose another destination")
    dest.parent.mkdir(parents=True, exist_ok=True)
    return copy_tree(src, dest)


def add_args(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.add_parser("list", help="the shipped agents and their scores (the default)")
    c = sub.add_parser("copy", help="copy a shipped agent to a run directory of your own")
    c.add_argument("name", help="the agent, e.g. doom_small_s2")
    c.add_argument("dest", help="the new run directory, e.g. runs/agent (must not exist)")


def main(args: argparse.Namespace) -> int:
    if getattr(args, "action", None) == "copy":
        dest = copy(args.name, Path(args.dest))
        print(f"copied {args.name} to {dest}: wm evaluate --run {dest} --episodes 10 --tag mine, wm play --run {dest}")
        return 0
    agents = shipped()
    if not agents:
        print("no shipped agents in this installation")
        return 0
    for name, path in agents.items():
        print(f"{name:<22} {describe(path)}")
    print("copy one to run it: wm agents copy NAME runs/NAME")
    return 0
