"""`wm docs`: the project's documentation, installed with the package, from any directory.

    wm docs                          # every page: its name and first heading, and the folder they are in
    wm docs gpu                      # print a page (guide/gpu.md); any unique part of its path works
    wm docs docs/guide/gpu.md        # the form every hint of the suite names a page by
    wm docs --path troubleshooting   # only where the page is (to open it in a viewer or an editor)

A checkout reads `docs/` beside `wm/`; the wheel carries the same pages as `wm/docs/` (pyproject.toml), so a hint
that names `docs/guide/gpu.md` leads a pip user to the page too. Figures are installed beside the pages.
"""

from __future__ import annotations

import argparse
import difflib
from pathlib import Path

from wm.core.errors import WMError

_PACKAGE = Path(__file__).resolve().parent.parent


def docs_dir() -> Path | None:
    """The documentation folder: the wheel's `wm/docs/`, else a checkout's `docs/` beside `wm/`; None without either."""
    for p in (_PACKAGE / "docs", _PACKAGE.parent / "docs"):
        if (p / "guide").is_dir():
            return p
    return None


def pages(root: Path) -> list[str]:
    """Every page's path under `root`, `guide/gpu.md` style, sorted."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.md"))


def title(path: Path) -> str:
    """A page's first Markdown heading (its title), or '' (bounded: the first 40 lines)."""
    with path.open(encoding="utf-8", errors="replace") as f:
        for _, line in zip(range(40), f, strict=False):
            if line.startswith("#"):
                return line.lstrip("#").strip().replace("`", "")
    return ""


def find(root: Path, name: str) -> Path:
    """The page `name` names: a path under docs/ (with or without `docs/`, `.md` or an `#anchor`), or any part of
    one that only one page has; one line naming the candidates otherwise."""
    want = name.split("#", 1)[0].strip().removeprefix("./").removeprefix("docs/").lower()
    every = pages(root)
    stem = want.removesuffix(".md")
    exact = [p for p in every if p.lower() in (want, f"{stem}.md") or p.lower().removesuffix(".md").endswith(f"/{stem}")]
    hits = exact or [p for p in every if stem and stem in p.lower()]
    if len(hits) == 1:
        return root / hits[0]
    if hits:
        raise WMError(f"{name!r} names several pages: {', '.join(hits[:8])}")
    names = {Path(p).stem.lower(): p for p in every} | {p.lower().removesuffix(".md"): p for p in every}
    close = difflib.get_close_matches(stem, list(names), n=1, cutoff=0.6)
    hint = f"; did you mean {names[close[0]].removesuffix('.md')!r}?" if close else "; wm docs lists them"
    raise WMError(f"no documentation page {name!r}{hint}")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("page", nargs="?", help="a page to print: guide/gpu.md, docs/guide/gpu.md or a unique part (gpu)")
    p.add_argument("--path", action="store_true", help="print only where the page (or the folder) is")


def main(args: argparse.Namespace) -> int:
    root = docs_dir()
    if root is None:
        raise WMError("this installation has no documentation folder (neither wm/docs/ nor a checkout's docs/)")
    if args.page:
        page = find(root, args.page)
        print(page if args.path else page.read_text(encoding="utf-8", errors="replace"), end="" if not args.path else "\n")
        return 0
    if args.path:
        print(root)
        return 0
    for name in pages(root):
        print(f"{name:<34} {title(root / name)}")
    print(f"in {root}; print one: wm docs PAGE (e.g. wm docs gpu)")
    return 0
