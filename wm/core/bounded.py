"""Reading a run directory as data: bounded reads, no code, no reach outside it (docs/guide/run-directory.md).

A run directory may come from someone else (a collaborator's run, a downloaded agent, a shared cluster folder). What
the suite reads from it is parsed, never executed, and every read is bounded:

* `read_yaml` — `config.yaml`: at most `MAX_YAML_BYTES`, no YAML aliases (a 2 kB "billion laughs" file expands to
  gigabytes), no nesting deeper than Python's recursion allows; one `WMError` line otherwise.
* `read_json` / `json_line` — `DONE`, `summary.json`, `agent.json`, `rounds.json`, a metrics line: at most
  `MAX_JSON_BYTES`, nesting at most `MAX_DEPTH` deep; one `WMError` line otherwise.
* `read_jsonl` — a `.jsonl` file (metrics, an evaluation's episodes): at most `MAX_JSON_BYTES`, each line read as
  `json_line`; a torn last line (a crash mid-write) is skipped.
* `closed_tree` — refuses a run directory holding a symbolic link that leads out of it: every write, append, delete,
  truncate and sweep of a stage then stays inside the run (a link that stays inside is harmless and allowed).
* `check_h5` — refuses a Keras weights file whose datasets use HDF5 external storage or external / soft links,
  which would make `load_weights` read any local file.
* `inside` — a path named by a run's own file (`rounds.json`'s pass), resolved and kept inside the run.

Nothing here imports TensorFlow: `status` and the TUI read through it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from wm.core.errors import WMError

MAX_YAML_BYTES = 1 << 20  # a resolved config is ≈ 6 kB
MAX_JSON_BYTES = 64 << 20  # rounds.json, summaries: kB; an evaluation's episodes.jsonl of 10k rows: a few MB
MAX_DEPTH = 64  # the suite's own JSON is at most 4 deep


class _NoAliases(yaml.SafeLoader):
    """PyYAML's safe loader without aliases: `*name` is refused, so no small file expands into a huge object."""

    def compose_node(self, parent, index):  # noqa: ANN001, ANN201 - PyYAML's signature
        if self.check_event(yaml.events.AliasEvent):
            event = self.peek_event()
            raise yaml.YAMLError(f"YAML aliases are not allowed (*{event.anchor}, line {event.start_mark.line + 1})")
        return super().compose_node(parent, index)


def _bytes(path: Path, limit: int) -> bytes:
    """The file's bytes, refused in one line past `limit` (read at most limit + 1 bytes: never the whole of a huge file)."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise WMError(f"{path} is larger than {limit // 1024} kB: not a file the suite wrote")
    return data


def parse_yaml(text: str, where: object) -> Any:
    """YAML text without aliases, one `WMError` line naming `where` for anything malformed."""
    try:
        return yaml.load(text, Loader=_NoAliases)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise WMError(f"cannot parse {where}: {str(e).splitlines()[0] or type(e).__name__}") from None
    except RecursionError:
        raise WMError(f"cannot parse {where}: nested too deep") from None


def read_yaml(path: str | os.PathLike[str], limit: int = MAX_YAML_BYTES) -> Any:
    """A YAML file of a run directory (see the module docstring)."""
    path = Path(path)
    try:
        text = _bytes(path, limit).decode()
    except UnicodeDecodeError:
        raise WMError(f"cannot parse {path}: not UTF-8 text") from None
    return parse_yaml(text, path)


def _depth(obj: Any) -> int:
    """Nesting depth of parsed JSON, without recursion."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if isinstance(node, dict):
            stack.extend((v, d + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, d + 1) for v in node)
    return deepest


def parse_json(text: str | bytes, where: object) -> Any:
    """JSON text, one `WMError` line naming `where` when malformed or nested deeper than `MAX_DEPTH`."""
    try:
        obj = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise WMError(f"cannot parse {where}: {str(e).splitlines()[0]}") from None
    except RecursionError:
        raise WMError(f"cannot parse {where}: nested more than {MAX_DEPTH} deep") from None
    if _depth(obj) > MAX_DEPTH:
        raise WMError(f"cannot parse {where}: nested more than {MAX_DEPTH} deep")
    return obj


def read_json(path: str | os.PathLike[str], limit: int = MAX_JSON_BYTES) -> Any:
    """A JSON file of a run directory (see the module docstring)."""
    path = Path(path)
    return parse_json(_bytes(path, limit), path)


def read_json_or(path: str | os.PathLike[str], default: Any = None) -> Any:
    """`read_json`, or `default` for a file that is missing, unreadable or malformed (readers that show what they can)."""
    try:
        return read_json(path)
    except (OSError, WMError):
        return default


def json_line(line: str, where: object = "a JSON line") -> Any:
    """One line of a `.jsonl` file; `WMError` when malformed (a torn last line is the caller's to skip)."""
    return parse_json(line, where)


def read_lines(path: str | os.PathLike[str], limit: int = MAX_JSON_BYTES) -> list[str]:
    """The lines of a run's text file (`.jsonl`, a log), at most `limit` bytes of it from the start."""
    return _bytes(Path(path), limit).decode(errors="replace").splitlines()


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All complete JSON lines of a file; a torn last line (crash mid-write) is ignored."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for line in read_lines(path):
        try:
            out.append(json_line(line))
        except WMError:
            continue
    return out


def closed_tree(root: str | os.PathLike[str]) -> None:
    """Refuse, in one line, a run directory holding a symbolic link that resolves outside it (or nowhere).

    Walks the tree without following links (os.walk lists a linked folder as an entry, not a subtree); a paper-size
    run's ≈ 30k files take ≈ 0.1 s. A link planted after this check (while a command runs) is not seen: the run dir
    is trusted not to change under a running command by anyone but the suite.
    """
    root = Path(root)
    if not root.is_dir():
        return
    top = root.resolve()
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in (*dirs, *files):
            p = Path(folder) / name
            if not p.is_symlink():
                continue
            target = p.resolve()
            if target != top and top not in target.parents:
                raise WMError(
                    f"{root} holds a link that leads outside it ({p} -> {os.readlink(p)}): a run directory is a "
                    "closed tree; replace the link with a copy of what it points to, or remove it"
                )


def inside(root: str | os.PathLike[str], rel: str | os.PathLike[str], what: str) -> Path:
    """`root / rel` resolved, refused in one line unless it stays inside `root` (a path read from a run's own file)."""
    top = Path(root).resolve()
    p = (top / rel).resolve()
    if p != top and top not in p.parents:
        raise WMError(f"{what} {str(rel)!r} leads outside {root}: refused")
    return p


def check_h5(path: str | os.PathLike[str]) -> None:
    """Refuse a weights file whose datasets read other files (HDF5 external storage, external or soft links) or that
    is not an HDF5 file at all: `load_weights` would otherwise read whatever local file it names."""
    import h5py

    path = Path(path)
    if path.is_symlink():
        raise WMError(f"{path} is a link: weights files must be plain files inside the run")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise WMError(f"{path} is unreadable as weights: {str(e).splitlines()[0]}") from None
    bad: list[str] = []
    with f:

        def visit(name: str, link: Any) -> None:
            if isinstance(link, (h5py.ExternalLink, h5py.SoftLink)):
                bad.append(f"{name} is a {type(link).__name__}")
                return
            obj = f.get(name)
            if isinstance(obj, h5py.Dataset) and obj.external:
                bad.append(f"{name} uses external storage")

        f.visititems_links(visit)
    if bad:
        raise WMError(f"{path} is refused: {bad[0]} (weights files must hold their own data)")
