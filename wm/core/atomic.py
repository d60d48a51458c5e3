"""Atomic writes: every file the suite writes appears whole or not at all.

A write goes to a temporary name beside its target (`.tmp-<stem>-…`, which every reader of a run directory ignores),
is fsynced and renamed onto it, so a crash never leaves a half file visible; the file gets the mode a plain `open`
would have given under the umask (`plain_mode`), and an OSError on the way is one `WriteError` line. Nothing here knows
the run directory's layout (`wm.core.rundir` says where a file goes, this module how it is written): stages, media,
plots, exports and copies (`wm.core.copying`) all write through it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from wm.core.errors import WriteError, describe_os_error


def _umask() -> int:
    """The process's umask, read without changing it where Linux tells it (/proc), else set and restored at once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def plain_mode(path: str | os.PathLike[str], folder: bool = False) -> None:
    """Give a file (or folder) made by `tempfile`, which creates them 0600 (0700), the mode a plain `open` (`mkdir`)
    would have given under the umask: a group's shared project folder, a served report, another user's `results`."""
    os.chmod(path, (0o777 if folder else 0o666) & ~_umask())


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on clean exit it is fsynced and renamed onto `path`.

    On an exception the temporary file is removed and `path` is untouched. The temporary name keeps the
    suffix of `path` (libraries such as Keras and NumPy insist on it) and starts with `.tmp-`, which every
    reader of the run dir ignores (and the CLI removes from a stage's folder when the stage starts).

    An OSError on the way (a full disk, a read-only or forbidden folder, inside the body too) becomes a
    `WriteError`: one line naming `path` and the errno, the CLI's `error: cannot write ...`.
    """
    path = Path(path)
    tmp_path = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.stem}-", suffix="".join(path.suffixes), dir=path.parent)
        os.close(fd)
        tmp_path = Path(tmp)
        plain_mode(tmp_path)
        yield tmp_path
        with open(tmp_path, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
    except WriteError:
        raise
    except OSError as e:
        raise WriteError(describe_os_error(e, path)) from e
    finally:
        if tmp_path is not None:
            with contextlib.suppress(OSError):
                tmp_path.unlink(missing_ok=True)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def atomic_savez(path: str | os.PathLike[str], compressed: bool = True, level: int = 1, **arrays: np.ndarray) -> None:
    """An `.npz` (readable by `np.load`) written to a temporary name, then renamed.

    Deflate level 1 instead of NumPy's default 6: on episode frames it is ~4× faster for ~10 % larger files,
    which matters when collection workers share the cores with the games (measured in bench/collect.py).
    """
    import zipfile

    buf = io.BytesIO()
    mode = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with zipfile.ZipFile(buf, "w", compression=mode, compresslevel=level if compressed else None) as zf:
        for name, arr in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(arr), allow_pickle=False)
    atomic_write_bytes(path, buf.getvalue())


def atomic_save(path: str | os.PathLike[str], save: Callable[[Path], Any]) -> None:
    """Call `save(tmp_path)` (e.g. `model.save_weights`) and rename the result onto `path`."""
    with atomic_path(path) as tmp:
        save(tmp)
