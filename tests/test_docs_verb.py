"""`wm docs`: the pages from any directory, found by the names the suite's hints use; every hint names a real page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wm import cli
from wm.tools import docs

ROOT = Path(__file__).resolve().parent.parent


def test_the_pages_are_listed_with_their_titles_and_printed_by_any_unique_name(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # from another directory
    assert cli.main(["docs"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^guide/gpu\.md +Running on a GPU$", out, re.M) and "wm docs PAGE" in out
    gpu = (ROOT / "docs" / "guide" / "gpu.md").read_text()
    for name in ("gpu", "guide/gpu.md", "docs/guide/gpu.md", "docs/guide/gpu.md#gpu-memory", "GPU"):
        assert cli.main(["docs", name]) == 0
        assert capsys.readouterr().out == gpu
    assert cli.main(["docs", "--path", "paper-settings"]) == 0
    assert capsys.readouterr().out.strip() == str(ROOT / "docs" / "paper-settings.md")


@pytest.mark.parametrize(
    ("name", "line"),
    [
        ("README", "error: 'README' names several pages: guide/README.md, lab/README.md, results/README.md"),
        ("gpux", "error: no documentation page 'gpux'; did you mean 'guide/gpu'?"),
        ("zzzz", "error: no documentation page 'zzzz'; wm docs lists them"),
    ],
)
def test_a_name_that_is_not_one_page_is_one_line(name, line, capsys):
    assert cli.main(["docs", name]) == 2
    assert capsys.readouterr().err.strip() == line


def test_every_page_a_message_of_the_suite_names_exists():
    """A hint such as `(docs/guide/gpu.md)` in an error line leads to a page `wm docs` finds, in both layouts."""
    named = set()
    for folder in ("wm", "tui", "mpi"):
        for path in (ROOT / folder).rglob("*.py"):
            named |= {m.group(1) for m in re.finditer(r"docs/([\w./-]+\.md)", path.read_text())}
    assert len(named) > 10
    missing = sorted(n for n in named if not (ROOT / "docs" / n).is_file())
    assert not missing, missing
    root = docs.docs_dir()
    assert root == ROOT / "docs" and all(docs.find(root, f"docs/{n}") == root / n for n in named)
