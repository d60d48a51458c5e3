"""A folder copied whole or not at all: the shipped agent copied out (`wm agents copy`), a τ run's upstream stages
(`wm sweep prepare`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from wm.core.atomic import plain_mode


def copy_tree(src: Path, dst: Path, hard_links: bool = False) -> Path:
    """`src` copied to `dst` through a temporary folder beside it, renamed at the end (a killed copy leaves no half
    folder), without LOCKs and temporaries. `hard_links`: the files are hard links of the source's (a copy where the
    file system has none); otherwise new files and folders with the modes this process's umask gives them (an
    installed package's files may be read-only)."""
    tmp = dst.with_name(f".tmp-{dst.name}")
    shutil.rmtree(tmp, ignore_errors=True)

    def copy(a: str, b: str) -> None:
        if hard_links:
            try:
                os.link(a, b)
                return
            except OSError:
                pass
        shutil.copyfile(a, b)
        plain_mode(b)

    try:
        shutil.copytree(src, tmp, copy_function=copy, ignore=shutil.ignore_patterns("LOCK", ".tmp-*", "__pycache__"))
        for folder, dirs, _ in os.walk(tmp):
            for d in dirs:
                plain_mode(Path(folder) / d, folder=True)
        plain_mode(tmp, folder=True)
        tmp.rename(dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dst
