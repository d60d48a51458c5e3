"""Streaming frames for V: a `tf.data` pipeline over the episode shards with bounded memory (docs/paper-settings.md §2).

The authors load every frame into one array (123 GB for the car) and shuffle it (§2). Here an epoch is:
episode files in a seeded random order → `cycle` files decoded in parallel and interleaved frame by frame →
a shuffle buffer of `shuffle_buffer` frames → batches → prefetch. Memory is about (cycle episodes +
shuffle_buffer frames + a few batches), whatever the dataset size.

Everything is deterministic given (seed, epoch), so the data position of a checkpoint is just
(epoch, batches consumed): a resumed epoch rebuilds the same stream and skips the consumed batches.
TensorFlow is imported inside the functions (this module sits under `wm/data`, next to TF-free code).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from wm.core.errors import WMError
from wm.data.episodes import EpisodeError, read_episode


def split_episodes(paths: Sequence[Path], val_fraction: float, seed: int) -> tuple[list[Path], list[Path]]:
    """Hold out whole episodes for validation: round(val_fraction·n) of them (at least 1 when the fraction is > 0
    and n ≥ 2), chosen by a NumPy RNG seeded from `seed` (cfg.run.seed). Both lists keep the sorted file order."""
    paths = list(paths)
    n = len(paths)
    n_val = 0 if val_fraction <= 0 or n < 2 else min(n - 1, max(1, round(val_fraction * n)))
    pick = set(np.random.default_rng([seed, 0x7A1]).permutation(n)[:n_val].tolist())
    return [p for i, p in enumerate(paths) if i not in pick], [p for i, p in enumerate(paths) if i in pick]


def epoch_order(paths: Sequence[Path], seed: int, epoch: int) -> list[Path]:
    """The episode file order of one epoch (a seeded permutation)."""
    perm = np.random.default_rng([seed, epoch, 0xF11E]).permutation(len(paths))
    return [paths[i] for i in perm]


def load_obs(path: str | bytes, frame_shape=(64, 64, 3), failures: dict[str, str] | None = None) -> np.ndarray:
    """The frames of one episode file. Its headers were checked at start-up (`wm.data.episodes.check_folder`); a
    file whose frames still fail to decompress, or do not have `frame_shape`, yields no frames and is recorded in
    `failures` (path -> one-line reason), which the stage names and counts: nothing is skipped silently."""
    if isinstance(path, bytes):
        path = path.decode()
    try:
        obs = read_episode(path, keys=("obs",))["obs"]
    except EpisodeError as e:
        reason = str(e)
    else:
        if obs.shape[1:] == tuple(frame_shape):
            return obs
        reason = f"{path}: obs frames are {obs.shape[1:]}, expected {tuple(frame_shape)}"
    if failures is not None:
        failures[path] = reason
    return np.zeros((0, *frame_shape), np.uint8)


def decode_files(setting: int) -> int:
    """Episode files decoded in parallel (`vae.parallel_files`): the setting, or 0 = one per core (at most 16).

    It is also the interleave width, so it orders the frames: a mid-epoch resume reuses the width its epoch began with.
    """
    n = int(setting)
    if n < 0:
        raise WMError(f"vae.parallel_files must be ≥ 0 (0 = one per core), got {n}")
    return n if n > 0 else max(1, min(os.cpu_count() or 1, 16))


def batches_per_epoch(frames: int, batch_size: int) -> int:
    """Full batches in an epoch (the last partial batch is dropped, as the authors' `num_batches` floor, §0)."""
    return frames // batch_size


def frame_dataset(
    paths: Sequence[Path],
    batch_size: int,
    *,
    seed: int = 0,
    epoch: int = 0,
    shuffle_buffer: int = 0,
    skip_batches: int = 0,
    cycle: int = 4,
    drop_remainder: bool = True,
    frame_shape=(64, 64, 3),
    failures: dict[str, str] | None = None,
):
    """A `tf.data.Dataset` of uint8 (B, 64, 64, 3) batches over the frames of `paths`.

    Args:
        shuffle_buffer: frames in the shuffle buffer; 0 keeps the file order (validation, encoding).
        seed, epoch: the file order and the shuffle depend on them only, so the stream is reproducible.
        skip_batches: batches already consumed in this epoch (resume mid-epoch).
        cycle: episode files decoded in parallel and interleaved.
        failures: filled with path -> reason for files whose frames cannot be read (see `load_obs`).
    """
    import tensorflow as tf

    order = epoch_order(paths, seed, epoch) if shuffle_buffer > 0 else list(paths)
    files = tf.data.Dataset.from_tensor_slices([str(p) for p in order])

    frame_shape = tuple(int(d) for d in frame_shape)

    def episode_frames(path):
        obs = tf.numpy_function(lambda p: load_obs(p, frame_shape, failures), [path], tf.uint8, stateful=False)
        obs.set_shape((None,) + tuple(frame_shape))
        return tf.data.Dataset.from_tensor_slices(obs)

    cycle = max(1, min(cycle, len(order)))
    ds = files.interleave(episode_frames, cycle_length=cycle, block_length=1, num_parallel_calls=cycle, deterministic=True)
    if shuffle_buffer > 0:
        shuffle_seed = int(np.random.default_rng([seed, epoch, 0x5EED]).integers(2**31 - 1))
        ds = ds.shuffle(shuffle_buffer, seed=shuffle_seed, reshuffle_each_iteration=False)
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    if skip_batches:
        ds = ds.skip(skip_batches)
    opts = tf.data.Options()
    opts.deterministic = True
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.prefetch(tf.data.AUTOTUNE).with_options(opts)


def frame_batches(
    paths: Sequence[Path],
    batch_size: int,
    *,
    seed: int = 0,
    epoch: int = 0,
    shuffle_buffer: int = 0,
    skip_batches: int = 0,
    cycle: int = 4,
    drop_remainder: bool = True,
    frame_shape=(64, 64, 3),
    failures: dict[str, str] | None = None,
) -> Iterator[np.ndarray]:
    """uint8 (B, 64, 64, 3) NumPy batches over the frames of `paths`: `frame_dataset`'s design without TensorFlow.

    For a backend that takes NumPy batches (JAX, `wm.models.jax_steps`). The same epoch file order, `cycle` files
    open at once and interleaved frame by frame (each decoded ahead in a thread; np.load's decompression releases
    the GIL), a shuffle buffer of `shuffle_buffer` frames, then batches; a function of (seed, epoch) only, so a
    resume skips the consumed batches. The order is not tf.data's: its shuffle draws from TensorFlow's generator.
    """
    order = epoch_order(paths, seed, epoch) if shuffle_buffer > 0 else list(paths)
    frames = _interleaved(order, max(1, min(cycle, len(order))), tuple(int(d) for d in frame_shape), failures)
    if shuffle_buffer > 0:
        frames = _shuffled(frames, int(shuffle_buffer), np.random.default_rng([seed, epoch, 0x5EED]))
    batch, n = [], 0
    for frame in frames:
        batch.append(frame)
        if len(batch) == batch_size:
            n += 1
            if n > skip_batches:
                yield np.stack(batch)
            batch = []
    if batch and not drop_remainder and n >= skip_batches:
        yield np.stack(batch)


def _interleaved(order: list[Path], cycle: int, frame_shape: tuple, failures) -> Iterator[np.ndarray]:
    """Frames of `order`'s files, `cycle` open at once, one frame from each in turn; a finished file's slot takes the
    next file (as tf.data's `interleave` with block length 1). Files decode `cycle` ahead in a thread pool."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=cycle, thread_name_prefix="frames") as pool:
        ahead = deque(pool.submit(load_obs, str(p), frame_shape, failures) for p in order[:cycle])
        rest = iter(order[cycle:])

        def next_file():
            if not ahead:
                return None
            obs = ahead.popleft().result()
            p = next(rest, None)
            if p is not None:
                ahead.append(pool.submit(load_obs, str(p), frame_shape, failures))
            return iter(obs)

        slots = [f for f in (next_file() for _ in range(cycle)) if f is not None]
        while slots:
            i = 0
            while i < len(slots):
                frame = next(slots[i], None)
                if frame is not None:
                    yield frame
                    i += 1
                    continue
                replacement = next_file()
                if replacement is None:
                    del slots[i]
                else:
                    slots[i] = replacement


def _shuffled(frames: Iterator[np.ndarray], size: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """A shuffle buffer of `size` frames (tf.data's algorithm): each frame out is a random one of the buffer, whose
    place the next frame in takes; the buffer's rest comes out in a random order at the end."""
    buffer: list[np.ndarray] = []
    for frame in frames:
        if len(buffer) < size:
            buffer.append(frame)
            continue
        i = int(rng.integers(size))
        yield buffer[i]
        buffer[i] = frame
    for i in rng.permutation(len(buffer)):
        yield buffer[i]


def val_subset(paths: Sequence[Path], lengths: Sequence[int], max_frames: int) -> list[Path]:
    """The first validation episodes holding at most `max_frames` frames (at least one); 0 = all."""
    if max_frames <= 0:
        return list(paths)
    out, total = [], 0
    for p, n in zip(paths, lengths, strict=False):
        if out and total + n > max_frames:
            break
        out.append(p)
        total += n
    return out
