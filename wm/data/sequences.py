"""Batches of encoded series for M (paper settings §4), in the two schemes of the authors.

Every batch is a dict of NumPy arrays for L input steps:
  z (B, L+1, z) float32   frames; inputs are z[:, :L], targets z[:, 1:] (teacher forcing, shift 1)
  action (B, L, A), restart (B, L)   M's other inputs (restart = 1 on an episode's first frame, §4)
  z_mask (B, L)            1 where the target frame exists (padding and stream tails are masked, not learned)
  done_target, done_mask (B, L)   1 where the input frame is the last of its episode ("next frame restarts", §4),
                           when that episode ended by the env's termination (not at the step cap; `load_series`);
                           with `done_horizon` k > 1 (not the paper) its last k frames: "dies within k steps"

z is re-sampled from the stored μ/logvar for every batch, z = μ + exp(logvar/2)·ε (§3: avoids overfitting one
sample). Randomness is a function of (seed, step) or (seed, epoch, chunk), so a resumed run sees the same batches.

* `episodes` (Car): each step draws B distinct random episodes (with replacement only when there are fewer
  than B) and a window of `seq_len` frames: 1000-frame episodes give 999 inputs → 999 targets (§4). With
  `predict_done` the window's last frame is an input too, so the episode's final step gets its done target.
  Shorter episodes are padded and masked.
* `streams` (Doom): each epoch shuffles the episode order, concatenates everything into one stream, cuts it
  into B parallel streams and walks them in chunks of L = `seq_len` inputs; the caller carries the LSTM state
  from chunk to chunk (stateful truncated BPTT, §4). Chunks overlap by one frame so no frame is skipped as an
  input (the authors' 499-of-500 gap, §10.11, is not reproduced). The target across an episode boundary is
  kept, as the authors did (the restart target tells M the episode ended).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from wm.core.errors import WMError
from wm.data.episodes import EpisodeError, check_folder, read_episode


@dataclass
class Series:
    """All episodes of `series/` concatenated in file order: μ/logvar float16 (F, z), action float32 (F, A)."""

    mu: np.ndarray
    logvar: np.ndarray
    action: np.ndarray
    starts: np.ndarray  # (E,) first frame of each episode
    lengths: np.ndarray  # (E,)
    bad_files: int = 0  # files of the folder skipped as corrupt or misshapen (named in the log)
    reward: np.ndarray | None = None  # (F,) float32, row t the reward of action t (loaded for a reward head)
    terminal: np.ndarray | None = None  # (E,) bool, the episode ended by the env's termination (loaded for a done head)

    @property
    def n_episodes(self) -> int:
        return len(self.lengths)

    @property
    def n_frames(self) -> int:
        return len(self.mu)


def load_series(
    folder: str | Path,
    z_dim: int,
    action_dim: int,
    log=None,
    max_bad_share: float = 1.0,
    rewards: bool = False,
    dones: bool = False,
) -> Series:
    """Read every good `ep_*.npz` of `folder` (with `rewards`, their rewards too: M's reward head).

    With `dones` (M's done head) each episode ends at its first recorded termination, that row included: CarRacing's
    data runs on past it (`collect.ignore_done`, §1a) but the real game is over there, so M learns that it ends
    and not what follows. `Series.terminal` tells which episodes ended by termination; the others reached the step
    cap (a truncation, not a death) and get no done target.

    Files are judged by the one validation path (`wm.data.episodes.check_folder`: keys, mu/logvar of width z_dim,
    action of width action_dim, equal lengths): each bad file is named through `log`, skipped and counted in
    `Series.bad_files`, and more than `max_bad_share` bad files (data.max_bad_share) is refused with EpisodeError.
    """
    checked = check_folder(folder, "series", max_bad_share=max_bad_share, log=log, z_dim=z_dim, action_dim=action_dim)
    keys = ("mu", "logvar", "action") + (("reward",) if rewards else ()) + (("done",) if dones else ())
    mus, lvs, acts, rews, terms, late = [], [], [], [], [], 0
    for path in checked.paths:
        try:
            d = read_episode(path, keys)
        except EpisodeError as e:  # damage inside the compressed data, which the header check cannot see
            late += 1
            if log is not None:
                log.warning("skipping bad series file: %s", e)
            continue
        a = d["action"].reshape(len(d["action"]), -1)
        ended = np.flatnonzero(d["done"].reshape(-1)) if dones else np.zeros(0, np.int64)
        n = int(ended[0]) + 1 if len(ended) else len(a)
        if n < 2:
            continue  # a one-frame episode has no target
        mus.append(d["mu"][:n].astype(np.float16))
        lvs.append(d["logvar"][:n].astype(np.float16))
        acts.append(a[:n].astype(np.float32))
        terms.append(len(ended) > 0)
        if rewards:
            rews.append(d["reward"].reshape(-1)[:n].astype(np.float32))
    checked.refuse_if_too_many_bad(max_bad_share, late)
    if not mus:
        raise WMError(f"no usable series episodes in {folder}")
    lengths = np.array([len(m) for m in mus], np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return Series(
        np.concatenate(mus),
        np.concatenate(lvs),
        np.concatenate(acts),
        starts,
        lengths,
        bad_files=len(checked.bad) + late,
        reward=np.concatenate(rews) if rewards else None,
        terminal=np.array(terms, bool) if dones else None,
    )


def _assemble(
    s: Series, idx: np.ndarray, valid: np.ndarray, first: np.ndarray, last: np.ndarray, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """Gather frames idx (B, L+1) into a batch dict; valid/first/last are (B, L+1) flags."""
    mu = s.mu[idx].astype(np.float32)
    sigma = np.exp(s.logvar[idx].astype(np.float32) / 2.0)
    z = (mu + sigma * rng.standard_normal(mu.shape, dtype=np.float32)) * valid[..., None]
    act = s.action[idx[:, :-1]] * valid[:, :-1, None]
    v = valid.astype(np.float32)
    batch = {
        "z": z.astype(np.float32),
        "action": act.astype(np.float32),
        "restart": (first[:, :-1] & valid[:, :-1]).astype(np.float32),
        "z_mask": v[:, 1:] * v[:, :-1],
        "done_target": (last[:, :-1] & valid[:, :-1]).astype(np.float32),
        "done_mask": v[:, :-1],
    }
    if s.reward is not None:  # the reward of each input step's action (masked like done: every real input step)
        batch["reward"] = (s.reward[idx[:, :-1]] * v[:, :-1]).astype(np.float32)
    return batch


def _dying(local: np.ndarray, length: np.ndarray, terminal: np.ndarray, horizon: int) -> np.ndarray:
    """Done targets: frame `local` of an episode of `length` frames is one of its last `horizon` and the episode
    ended by termination (horizon 1: its last frame, the paper's "next frame restarts")."""
    return (local >= length - horizon) & terminal


def _terminal(s: Series, eps: np.ndarray) -> np.ndarray:
    """Whether episodes `eps` end by termination (their last frame is a done target): all of them when the series
    was loaded without its done flags (M without a done head)."""
    return np.ones(len(eps), bool) if s.terminal is None else s.terminal[eps]


class EpisodeBatches:
    """`episodes` scheme: batch(step) → B random whole-episode windows (Car, §4)."""

    def __init__(self, series: Series, batch_size: int, seq_len: int, seed: int, predict_done: bool, done_horizon: int = 1):
        self.s, self.b, self.seed, self.horizon = series, int(batch_size), int(seed), int(done_horizon)
        self.window = int(seq_len)  # frames per window
        self.steps = self.window if predict_done else self.window - 1  # input steps L

    def batch(self, step: int) -> dict[str, np.ndarray]:
        s, rng = self.s, np.random.default_rng([self.seed, 1, int(step)])
        eps = rng.choice(s.n_episodes, self.b, replace=s.n_episodes < self.b)
        n = np.minimum(s.lengths[eps], self.window)
        off = rng.integers(0, s.lengths[eps] - n + 1)  # 0 when the episode fits the window
        pos = np.arange(self.steps + 1)[None, :]
        valid = pos < n[:, None]
        local = off[:, None] + np.minimum(pos, n[:, None] - 1)
        idx = s.starts[eps][:, None] + local
        first = local == 0
        last = _dying(local, s.lengths[eps][:, None], _terminal(s, eps)[:, None], self.horizon)
        return _assemble(s, idx, valid, first & valid, last & valid, rng)


class StreamBatches:
    """`streams` scheme: epoch(e) → the chunks of B parallel streams, L inputs each (Doom, §4)."""

    def __init__(self, series: Series, batch_size: int, seq_len: int, seed: int, done_horizon: int = 1):
        self.s, self.b, self.l, self.seed, self.horizon = series, int(batch_size), int(seq_len), int(seed), int(done_horizon)
        # frames per row: n_chunks·L inputs + 1 final target; the tail that does not fit is dropped (§4)
        self.n_chunks = max(1, (series.n_frames - 1) // (self.b * self.l))

    def epoch_index(self, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(idx, valid, first, last) of shape (B, n_chunks·L + 1) for the shuffled stream of `epoch`."""
        s = self.s
        order = np.random.default_rng([self.seed, 2, int(epoch)]).permutation(s.n_episodes)
        idx = np.concatenate([np.arange(s.starts[e], s.starts[e] + s.lengths[e]) for e in order])
        first = np.concatenate([np.arange(s.lengths[e]) == 0 for e in order])
        term = _terminal(s, order)
        last = np.concatenate(
            [_dying(np.arange(s.lengths[e]), s.lengths[e], t, self.horizon) for e, t in zip(order, term, strict=True)]
        )
        row = self.n_chunks * self.l
        need = self.b * row + 1
        valid = np.ones(need, bool)
        if len(idx) < need:  # tiny data: pad the stream, masked
            pad = need - len(idx)
            valid[len(idx) :] = False
            idx, first, last = (np.concatenate([x, np.zeros(pad, x.dtype)]) for x in (idx, first, last))
        rows = np.arange(self.b)[:, None] * row + np.arange(row + 1)[None, :]
        return idx[rows], valid[rows], first[rows], last[rows]

    def epoch(self, epoch: int, start_chunk: int = 0) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """Yield (chunk index, batch) for chunks start_chunk … n_chunks−1 of `epoch`."""
        idx, valid, first, last = self.epoch_index(epoch)
        for i in range(start_chunk, self.n_chunks):
            sl = slice(i * self.l, (i + 1) * self.l + 1)
            rng = np.random.default_rng([self.seed, 3, int(epoch), i])
            yield i, _assemble(self.s, idx[:, sl], valid[:, sl], first[:, sl], last[:, sl], rng)
