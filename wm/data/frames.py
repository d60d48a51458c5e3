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
from collections.abc import Sequence
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
