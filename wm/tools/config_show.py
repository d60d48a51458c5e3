"""`wm config`: the resolved config of a command, each key with the one-line why its default carries.

    wm config --configs doom_takecover small              # what `pipeline --configs doom_takecover small` runs
    wm config --configs carracing small --set es.generations=120
    wm config --run runs/car                              # a run's stored config
    wm config --blocks                                    # the blocks there are, each with its first comment line

A pip user has no `configs/` folder to read: this prints the same keys and comments from the installed package's
copy (`wm/configs/base.yaml`), with the value each key resolves to and, where a block or `--set` changed it, the
default beside it.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from wm.core import config as C
from wm.core.format import number

_KEY = re.compile(r"^(\s*)([A-Za-z_][\w]*):(.*)$")


def key_comments(text: str) -> dict[str, str]:
    """`section.key` → the comment on its line in base.yaml (continuation comment lines below it appended)."""
    out: dict[str, str] = {}
    section, last = "", None
    for line in text.splitlines():
        m = _KEY.match(line)
        if m is None:
            stripped = line.strip()
            if last is not None and stripped.startswith("#") and line.startswith(" " * 20):
                out[last] += " " + stripped.lstrip("# ").strip()  # a comment continued under the key's own
            continue
        indent, key, rest = m.groups()
        if not indent:
            section, last = key, None
            continue
        last = f"{section}.{key}"
        out[last] = rest.split("#", 1)[1].strip() if "#" in rest else ""
    return out


def block_summaries() -> dict[str, str]:
    """Each block's name → the first line of the comment right above it in its YAML file, else of the first one
    under it."""
    out = {}
    for path in sorted(C.CONFIG_DIR.glob("*.yaml")):
        if path.name == "base.yaml":
            continue
        above: list[str] = []
        current = None
        for line in path.read_text().splitlines():
            m = _KEY.match(line)
            stripped = line.strip()
            if m is not None and not m.group(1):
                current = m.group(2)
                out[current] = above[0] if above else ""
                above = []
            elif not line.startswith(" ") and stripped.startswith("#"):
                above.append(stripped.lstrip("# ").strip())
            elif not stripped:
                above = []
            elif current is not None and not out[current] and stripped.startswith("#"):
                out[current] = stripped.lstrip("# ").strip()
    return out


def _value(v: Any) -> str:
    return number(v) if isinstance(v, float) else repr(v) if isinstance(v, str) else str(v)


def render(cfg: C.Config, only: str | None = None) -> str:
    """The config, one line per key: value, its default when changed, and its comment."""
    comments = key_comments((C.CONFIG_DIR / "base.yaml").read_text())
    default = C.flatten(C.defaults().to_dict())
    lines, section = [], None
    for key, v in C.flatten(cfg.to_dict()).items():
        sec = key.split(".", 1)[0]
        if only and sec != only and not key.startswith(only):
            continue
        if sec != section:
            lines.append(f"{sec}:")
            section = sec
        was = f"  (default {_value(default[key])})" if key in default and default[key] != v else ""
        why = comments.get(key, "")
        lines.append(f"  {key.split('.', 1)[1]}: {_value(v)}{was}" + (f"  # {why}" if why else ""))
    return "\n".join(lines)


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--configs", nargs="+", default=[], metavar="BLOCK", help="config blocks, as a stage's --configs")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", action="extend", help="overrides, as --set")
    p.add_argument("--run", default=None, help="a run whose stored config.yaml to show (with --set over it)")
    p.add_argument("--section", default=None, help="only this section or key prefix, e.g. es or es.popsize")
    p.add_argument("--blocks", action="store_true", help="list the config blocks instead")


def main(args: argparse.Namespace) -> int:
    if args.blocks:
        for name, about in block_summaries().items():
            print(f"{name:<16} {about}")
        return 0
    if args.run:
        from wm.core.commands import existing_run
        from wm.core.rundir import RunDir

        run = RunDir(args.run)
        existing_run(run)
        cfg = C.update(run.load_config(), C.parse_set(args.set), source="--set")
    else:
        cfg = C.load(args.configs, args.set) if args.configs else C.update(C.defaults(), C.parse_set(args.set), "--set")
    print(render(cfg, args.section))
    return 0
