"""Episode files: one compressed `.npz` per episode, written atomically, validated on read.

`episodes/ep_000123.npz` (collect):  obs uint8 (T, 64, 64, 3), action float32 (T, A), reward float32 (T,),
                                     done bool (T,), seed int64 ()
`series/ep_000123.npz`   (encode):   mu float16 (T, z), logvar float16 (T, z), action, reward, done
`series/initial_z.npz`   (encode):   mu float32 (N, z), logvar float32 (N, z)

Row t holds the frame seen at step t, the action taken on it, the reward it earned and whether it ended the
episode. A truncated or corrupt file raises `EpisodeError` naming it; `scan` reports it and carries on.
"""

from __future__ import annotations

import re
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from wm.errors import WMError
from wm.rundir import atomic_savez

EPISODE_KEYS = ("obs", "action", "reward", "done", "seed")
SERIES_KEYS = ("mu", "logvar", "action", "reward", "done")
_NAME = re.compile(r"^ep_(\d{6,})\.npz$")


class EpisodeError(WMError):
    """A missing, truncated or malformed episode file."""


def episode_name(index: int) -> str:
    return f"ep_{index:06d}.npz"


def episode_index(path: Path) -> int:
    m = _NAME.match(path.name)
    if not m:
        raise EpisodeError(f"{path}: not an episode file name (ep_NNNNNN.npz)")
    return int(m.group(1))


def list_episodes(folder: str | Path) -> list[Path]:
    """Episode files in `folder`, sorted by index (temporary `.tmp-*` files are ignored)."""
    folder = Path(folder)
    if not folder.exists():
        return []
    return sorted((p for p in folder.iterdir() if _NAME.match(p.name)), key=episode_index)


def write_episode(path: str | Path, **arrays: np.ndarray) -> None:
    """Write one episode atomically (temp name → rename)."""
    atomic_savez(path, **arrays)


def read_episode(path: str | Path, keys: Iterable[str] = EPISODE_KEYS) -> dict[str, np.ndarray]:
    """Load and check one episode file; raises EpisodeError naming the file on any problem."""
    path = Path(path)
    keys = tuple(keys)
    try:
        with np.load(path, allow_pickle=False) as f:
            missing = [k for k in keys if k not in f.files]
            if missing:
                raise EpisodeError(f"{path}: missing arrays {missing}")
            data = {k: f[k] for k in keys}
    except EpisodeError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, KeyError) as e:
        raise EpisodeError(f"{path}: unreadable episode file ({type(e).__name__}: {e})") from None
    lengths = {k: len(v) for k, v in data.items() if v.ndim > 0}
    if len(set(lengths.values())) > 1:
        raise EpisodeError(f"{path}: arrays disagree on length {lengths}")
    if "obs" in data and (data["obs"].dtype != np.uint8 or data["obs"].ndim != 4 or data["obs"].shape[-1] != 3):
        raise EpisodeError(f"{path}: obs must be uint8 (T, H, W, 3), got {data['obs'].dtype} {data['obs'].shape}")
    return data


def episode_length(path: str | Path) -> int:
    """Number of steps in an episode without decompressing the frames (reads the `done` array only)."""
    return int(len(read_episode(path, keys=("done",))["done"]))


def scan(folder: str | Path, keys: Iterable[str] = ("done",)) -> Iterator[tuple[Path, dict[str, np.ndarray] | None, str | None]]:
    """Yield (path, arrays, None) for good files and (path, None, reason) for bad ones."""
    for path in list_episodes(folder):
        try:
            yield path, read_episode(path, keys), None
        except EpisodeError as e:
            yield path, None, str(e)


def good_episodes(folder: str | Path, log=None) -> list[Path]:
    """Episode files that load; each bad one is reported by name through `log.warning` (or skipped)."""
    out = []
    for path, _, reason in scan(folder):
        if reason is None:
            out.append(path)
        elif log is not None:
            log.warning("skipping bad episode file: %s", reason)
    return out
