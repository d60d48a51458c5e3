"""Episode files: one compressed `.npz` per episode, written atomically, validated on read.

`episodes/ep_000123.npz` (collect):  obs uint8 (T, 64, 64, 3), action float32 (T, A), reward float32 (T,),
                                     done bool (T,), seed int64 ()
`series/ep_000123.npz`   (encode):   mu float16 (T, z), logvar float16 (T, z), action, reward, done
`series/initial_z.npz`   (encode):   mu float32 (N, z), logvar float32 (N, z)

Row t holds the frame seen at step t, the action taken on it, the reward it earned and whether it ended the
episode. A truncated or corrupt file raises `EpisodeError` naming it; `scan` reports it and carries on.

The one validation path: `check_file` judges a file from its zip index and `.npy` headers alone (keys, dtypes,
shapes, lengths; no frame is decompressed), and `check_folder` runs it over `episodes/` or `series/`, names each bad
file in one line, counts them and refuses (EpisodeError) when more than `data.max_bad_share` of the files are bad.
Every reader (collect's resume, train-vae, encode, M's series reader, `data check`) goes through it, so they agree
on which files are bad, and a misshapen file is named before TensorFlow ever sees it.
"""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wm.core.atomic import atomic_savez
from wm.core.errors import WMError
from wm.core.rundir import EPISODE_FILE

EPISODE_KEYS = ("obs", "action", "reward", "done", "seed")
SERIES_KEYS = ("mu", "logvar", "action", "reward", "done")
_NAME = EPISODE_FILE


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


_UNREADABLE = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, KeyError, NotImplementedError)


def npz_headers(path: str | Path) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """{array name: (shape, dtype)} of an `.npz` from its zip index and `.npy` headers: no array data is decompressed
    beyond each header's first bytes, so this costs about the same for a 3-frame and a 3000-frame episode."""
    out = {}
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                with zf.open(info) as f:
                    major, _ = np.lib.format.read_magic(f)
                    read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
                    shape, _, dtype = read(f)
                out[info.filename[:-4]] = (tuple(shape), np.dtype(dtype))
    except _UNREADABLE as e:
        raise EpisodeError(f"{path}: unreadable episode file ({type(e).__name__}: {e})") from None
    return out


def _fmt(shape: tuple[int, ...], dtype: np.dtype) -> str:
    return f"{dtype} {shape}"


def check_file(
    path: str | Path,
    kind: str = "episode",
    *,
    frame_size: int | None = None,
    z_dim: int | None = None,
    action_dim: int | None = None,
) -> int:
    """Check one `episodes/` file (kind "episode") or `series/` file (kind "series") from its headers; return its steps.

    Checked: the file opens as a zip of `.npy` arrays; every key of EPISODE_KEYS / SERIES_KEYS is there; obs is
    uint8 (T, frame_size, frame_size, 3); mu and logvar are float (T, z_dim) of one shape; action is float (T, A)
    or (T,) with A = action_dim; reward and done are (T,); every per-step array has the same T >= 1. A None size is
    not checked. Raises EpisodeError: one line naming the file and what is wrong. Damage inside the compressed data
    is not seen here (it would need decompressing); readers that decompress report it as EpisodeError too.
    """
    path = Path(path)
    heads = npz_headers(path)
    keys = EPISODE_KEYS if kind == "episode" else SERIES_KEYS
    missing = [k for k in keys if k not in heads]
    if missing:
        raise EpisodeError(f"{path}: missing arrays {missing}")
    lengths = {k: heads[k][0][0] for k in keys if heads[k][0]}
    if len(set(lengths.values())) > 1:
        raise EpisodeError(f"{path}: arrays disagree on length {lengths}")
    problems = []
    if kind == "episode":
        shape, dtype = heads["obs"]
        size = "H, W" if frame_size is None else f"{frame_size}, {frame_size}"
        if (
            dtype != np.uint8
            or len(shape) != 4
            or shape[-1] != 3
            or (frame_size is not None and shape[1:3] != (frame_size,) * 2)
        ):
            problems.append(f"obs must be uint8 (T, {size}, 3), got {_fmt(shape, dtype)}")
    else:
        shape, dtype = heads["mu"]
        if dtype.kind != "f" or len(shape) != 2 or (z_dim is not None and shape[1] != z_dim):
            problems.append(f"mu must be float (T, {'z' if z_dim is None else z_dim}), got {_fmt(shape, dtype)}")
        lv_shape, lv_dtype = heads["logvar"]
        if lv_dtype.kind != "f" or lv_shape != shape:
            problems.append(f"logvar must be float {shape} like mu, got {_fmt(lv_shape, lv_dtype)}")
    shape, dtype = heads["action"]
    width = shape[1] if len(shape) == 2 else 1
    if dtype.kind != "f" or len(shape) not in (1, 2) or (action_dim is not None and width != action_dim):
        problems.append(f"action must be float (T, {'A' if action_dim is None else action_dim}), got {_fmt(shape, dtype)}")
    for k in ("reward", "done"):
        shape, dtype = heads[k]
        if len(shape) != 1 or dtype.kind not in "biuf":
            problems.append(f"{k} must be a number per step (T,), got {_fmt(shape, dtype)}")
    if problems:
        raise EpisodeError(f"{path}: {'; '.join(problems)}")
    t = next(iter(lengths.values()), 0)
    if t < 1:
        raise EpisodeError(f"{path}: holds no steps")
    return int(t)


def scan(folder: str | Path, kind: str = "episode", **spec) -> Iterator[tuple[Path, int | None, str | None]]:
    """Yield (path, steps, None) for good files and (path, None, reason) for bad ones (`check_file` with `spec`)."""
    for path in list_episodes(folder):
        try:
            yield path, check_file(path, kind, **spec), None
        except EpisodeError as e:
            yield path, None, str(e)


@dataclass
class Checked:
    """The verdict on a folder of episode or series files: good ones (sorted, with their steps) and bad ones."""

    folder: Path
    kind: str
    paths: list[Path] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)  # one line each, naming the file

    @property
    def total(self) -> int:
        return len(self.paths) + len(self.bad)

    def refuse_if_too_many_bad(self, max_bad_share: float, found_later: int = 0) -> None:
        """EpisodeError when more than `max_bad_share` of the files are bad (`found_later`: bad files a reader
        found while decompressing, on top of `bad`), or when no file is good."""
        n_bad = len(self.bad) + found_later
        noun = "episode" if self.kind == "episode" else "series"
        if not self.total:
            raise EpisodeError(f"no {noun} files in {self.folder}")
        if n_bad <= max_bad_share * self.total and n_bad < self.total:
            return
        first = f" (first: {self.bad[0]})" if self.bad else ""
        raise EpisodeError(
            f"{n_bad} of {self.total} {noun} files in {self.folder} are bad, more than "
            f"data.max_bad_share={max_bad_share:g} allows{first}; `python -m wm data check --run {self.folder.parent}` "
            "lists them: "
            "remove or regenerate them, or raise data.max_bad_share"
        )


def episode_spec(facts) -> dict[str, int]:
    """What `check_file` requires of an `episodes/` file of the setup `facts` (`wm.envs.setup.Setup`: frame size,
    action width); every reader passes the same spec so they all agree on which files are bad."""
    return {"frame_size": facts.env.frame_size, "action_dim": facts.action_dim}


def check_folder(folder: str | Path, kind: str = "episode", *, max_bad_share: float = 1.0, log=None, **spec) -> Checked:
    """`check_file` on every file of `folder`: each bad one is named in one line through `log.warning`; refused with
    EpisodeError (before the caller writes anything) when more than `max_bad_share` of them are bad."""
    out = Checked(Path(folder), kind)
    for path, steps, reason in scan(folder, kind, **spec):
        if reason is None:
            out.paths.append(path)
            out.lengths.append(steps)
        else:
            out.bad.append(reason)
            if log is not None:
                log.warning("skipping bad %s file: %s", kind, reason)
    out.refuse_if_too_many_bad(max_bad_share)
    return out


def good_episodes(folder: str | Path, log=None, kind: str = "episode", max_bad_share: float = 1.0, **spec) -> list[Path]:
    """The files of `folder` that pass `check_file`; each bad one is reported by name through `log.warning`."""
    return check_folder(folder, kind, max_bad_share=max_bad_share, log=log, **spec).paths
