"""`train-vae`: train V (the paper's ConvVAE, docs/paper-settings.md §2) on the episodes, streamed from the shards.

Outputs in `vae/`: `vae.weights.h5` (best by validation loss; what later stages load), `checkpoint.npz` (model +
Adam + state, every `vae.checkpoint_every` steps and every epoch), `recon_epoch_NNN.png` and `reconstructions.png`
(originals over reconstructions), `DONE` last. A rerun after a kill resumes mid-epoch from the checkpoint: the
stream is a function of (seed, epoch) and the consumed batches are skipped, and the sampling noise is a function
of the step, so the result equals an uninterrupted run.

Speed (GPU issue): the losses stay on the device and are read back every `SYNC_EVERY` steps and before every save
(`wm.models.training.Deferred`), not once per step; `vae.jit_compile` (auto: with a GPU, or on a CPU where a ≈ 20 s probe
times XLA faster: `wm.models.vae_tf.probes_xla`) compiles the steps with XLA (the noise is drawn outside it, so it does
not change the numbers); `vae.parallel_files` 0 decodes one episode file per
core; one GPU unless `vae.multi_gpu` (then scale `vae.batch_size`).

Backend (`run.backend`, docs/guide/backends.md): on TensorFlow the steps are `wm.models.vae_tf`'s and the frames a
`tf.data` stream (`frame_dataset`); on JAX they are `wm.models.jax_steps.VAESteps` over NumPy batches of the same
design (`frame_batches`), and TensorFlow is never imported. The weights file is the same either way.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wm.core.config import Config
from wm.core.errors import WMError
from wm.core.metrics import Logger, make_logger
from wm.core.rundir import RunDir
from wm.data.episodes import Checked, EpisodeError, check_folder, episode_spec, read_episode
from wm.data.frames import batches_per_epoch, decode_files, frame_batches, frame_dataset, split_episodes, val_subset
from wm.stages.contract import StageInput

CHECKPOINT = "checkpoint.npz"
LOG_EVERY_S = 2.0  # per-step metrics are averaged over this many seconds (the JSONL stays small)
SYNC_EVERY = 20  # losses are read back (a device sync), checked and summed every this many steps and at every save


@dataclass(frozen=True)
class Options:
    """train-vae has no flags of its own; it reads the shared `--force`."""

    force: bool = False  # start afresh: the checkpoint is not resumed


def run(inp: StageInput, run: RunDir, opts: Options) -> None:
    """Train V per vae.*, resuming from `vae/checkpoint.npz` unless `--force`."""
    with make_logger(run, "train-vae") as log:
        train(inp, run, log, force=opts.force)


def _episodes(inp: StageInput, run: RunDir, log: Logger) -> tuple[list[Path], list[int], Checked]:
    folder = run.stage_dir("collect")
    if not run.is_done("collect"):
        raise WMError(f"no finished collect stage in {folder} (run `collect` first)")
    # the one validation path: misshapen and corrupt files are named and skipped here, before TensorFlow sees them
    cfg = inp.cfg
    checked = check_folder(folder, "episode", max_bad_share=cfg.data.max_bad_share, log=log, **episode_spec(inp.setup))
    paths, lengths = list(checked.paths), list(checked.lengths)
    n = cfg.vae.episodes
    if n > 0:  # V on n episodes only: its step budget, not the dataset size, is what costs
        if len(paths) < n:
            log.warning("vae.episodes=%d but only %d readable episodes: using them all", n, len(paths))
        paths, lengths = paths[:n], lengths[:n]
    return paths, lengths, checked


def _preview_frames(paths: list[Path], n: int = 8) -> np.ndarray:
    """n frames spread over the first episodes of `paths`, for the reconstruction grid."""
    frames = []
    for p in paths:  # the first n episodes, or the next ones where a file's frames do not decompress
        try:
            obs = read_episode(p, keys=("obs",))["obs"]
        except EpisodeError:  # damage inside the frames: the stream names and counts it
            continue
        per = max(1, n // min(n, len(paths)))
        idx = np.linspace(0, len(obs) - 1, per + 2)[1:-1].astype(int)
        frames.extend(obs[i] for i in idx)
        if len(frames) >= n:
            break
    return np.stack(frames[:n])


@dataclass
class _Data:
    """The episodes V trains and validates on (`_data`), and the files the stream finds damaged on the way."""

    checked: Checked
    train_paths: list[Path]
    val_paths: list[Path]
    train_frames: int
    val_frames: int
    steps_per_epoch: int
    data_id: str
    # files whose frames failed to decompress inside the stream: path -> reason
    late: dict[str, str] = field(default_factory=dict)
    said: set[str] = field(default_factory=set)  # … of which these were named in the log


@dataclass(frozen=True)
class _Steps:
    """V's compiled steps on the run's backend: `train(x, step)` and `evaluate(x, batch index)` → (loss, recon, kl),
    `sync()` before anything reads the Keras variables, and the frame stream they take."""

    backend: str  # tensorflow or jax
    label: str  # what the log says: graph, XLA or JAX
    train: Callable
    evaluate: Callable
    sync: Callable[[], None]
    batches: Callable  # `frame_dataset` (tf.data) or `frame_batches` (NumPy), same arguments


def _steps(cfg: Config, model: Any, optimizer: Any, strategy: Any, rates: dict | None, backend: str) -> _Steps:
    """The backend's steps for `model` (after any checkpoint restore: the JAX steps read the variables once)."""
    v, seed = cfg.vae, cfg.run.seed
    if backend == "jax":
        from wm.models.jax_steps import VAESteps

        s = VAESteps(model, optimizer, v.kl_tolerance, seed)
        return _Steps("jax", "JAX", s.train, s.evaluate, s.sync, frame_batches)
    import tensorflow as tf

    from wm.models.vae_tf import make_eval_step, make_train_step, use_xla

    jit = use_xla(v.jit_compile, strategy, rates)
    train = make_train_step(model, optimizer, v.kl_tolerance, seed, strategy, jit_compile=jit)
    ev = make_eval_step(model, v.kl_tolerance, seed, jit_compile=jit)
    return _Steps(
        "tensorflow",
        "XLA" if jit else "graph",
        lambda x, step: train(x, tf.constant(step, tf.int64)),
        lambda x, i: ev(x, tf.constant(i, tf.int64)),
        lambda: None,
        frame_dataset,
    )


@dataclass
class _Loop:
    """What the epoch loop works with: the model and its steps, the checkpoint and the state it saves."""

    cfg: Config
    run: RunDir
    out: Path
    log: Logger
    data: _Data
    strategy: Any  # TensorFlow's distribution strategy; None on JAX
    model: Any
    ckpt: Any
    state: dict[str, Any]
    early: Any
    steps: _Steps
    cycle: int
    preview: np.ndarray
    pending: Any = None  # a `Deferred` of (step, batch, loss, recon, kl), set once the loop exists (`_handler`)


def _data(inp: StageInput, run: RunDir, out: Path, log: Logger) -> _Data:
    """The readable episodes (refused before anything is written), `out` made, split into training and validation."""
    cfg = inp.cfg
    v = cfg.vae
    paths, lengths, checked = _episodes(inp, run, log)  # refuses before anything is written
    out.mkdir(parents=True, exist_ok=True)
    train_paths, val_paths = split_episodes(paths, v.val_fraction, cfg.run.seed)
    length = dict(zip(paths, lengths, strict=False))
    train_frames = sum(length[p] for p in train_paths)
    val_paths = val_subset(val_paths, [length[p] for p in val_paths], v.val_max_frames)
    val_frames = sum(length[p] for p in val_paths)
    steps_per_epoch = batches_per_epoch(train_frames, v.batch_size)
    if steps_per_epoch == 0:
        raise WMError(f"{train_frames} training frames are fewer than one batch of {v.batch_size} (vae.batch_size)")
    data_id = hashlib.sha256("\n".join(p.name for p in train_paths).encode()).hexdigest()[:12]
    return _Data(checked, train_paths, val_paths, train_frames, val_frames, steps_per_epoch, data_id)


def _build(cfg: Config, strategy: Any, out: Path, train_frames: int, log: Logger) -> tuple[Any, Any, Any, Any]:
    """The XLA probe's rates (or None), then the seeded model, its optimiser and their checkpoint."""
    from wm.core import backend
    from wm.models.training import Checkpoint
    from wm.models.vae import ConvVAE, make_optimizer

    v = cfg.vae
    rates = None
    if strategy is not None:
        from wm.models.vae_tf import probes_xla, xla_probe

        if probes_xla(v.jit_compile, strategy, train_frames * v.epochs):  # before the seed: it draws weights
            rates = xla_probe(v.z_dim, v.batch_size, v.kl_tolerance)
            log.info("vae.jit_compile auto: graph step %.1f frames/s, XLA %.1f on this CPU", rates["graph"], rates["xla"])
    backend.seed_keras(cfg.run.seed)  # the initial weights depend on the run seed only
    with strategy.scope() if strategy is not None else nullcontext():
        model = ConvVAE(v.z_dim)
        optimizer = make_optimizer(v.lr, v.adam_eps, v.mixed_precision)
        ckpt = Checkpoint(out / CHECKPOINT, model, optimizer)
    return rates, model, optimizer, ckpt


def _restore(ckpt: Any, data_id: str, force: bool, log: Logger) -> dict[str, Any]:
    """The checkpoint's state (afresh with `force` or without one), its epoch restarted when the episodes changed."""
    if force:
        ckpt.delete()
    state = ckpt.restore() or {"epoch": 0, "step": 0, "batch": 0, "data": data_id, "sums": [0.0, 0.0, 0.0, 0]}
    if state["batch"] and state.get("data") != data_id:
        log.warning("the training episodes changed since the checkpoint; restarting epoch %d from its start", state["epoch"])
        state.update(batch=0, sums=[0.0, 0.0, 0.0, 0])
    state["data"] = data_id
    if ckpt.lr_change is not None:  # the checkpoint's Adam holds its own learning rate; config.yaml's is applied
        log.warning(
            "vae.lr changed since the checkpoint: %g -> %g; the resumed optimiser uses %g (config.yaml), "
            "use --force to retrain from scratch",
            *ckpt.lr_change,
            ckpt.lr_change[1],
        )
    return state


def train(
    inp: StageInput, run: RunDir, log: Logger, *, force: bool = False, stop_at_step: int | None = None
) -> dict[str, Any]:
    """The training loop (see the module docstring); returns the DONE info.

    `stop_at_step` raises KeyboardInterrupt just before that global step, without saving, like a kill (tests).
    """
    from wm.core import backend, tf_setup
    from wm.models.training import Deferred, EarlyStopping

    cfg = inp.cfg
    v = cfg.vae
    out = run.stage_dir("train-vae")
    name = backend.activate(cfg.run.backend)  # before Keras loads; refuses before anything is written
    data = _data(inp, run, out, log)  # refuses before anything is written
    strategy = None
    if name == "tensorflow":
        tf_setup.setup(mixed_precision=v.mixed_precision)
        strategy = tf_setup.strategy(multi=v.multi_gpu)
    rates, model, optimizer, ckpt = _build(cfg, strategy, out, data.train_frames, log)
    state = _restore(ckpt, data.data_id, force, log)
    early = EarlyStopping.from_state(state.get("early"), v.early_stop_patience)
    log.info(
        "V: z=%d, %d params; %d train episodes (%d frames, %d steps/epoch), %d val episodes (%d frames); %s",
        v.z_dim,
        model.count_params(),
        len(data.train_paths),
        data.train_frames,
        data.steps_per_epoch,
        len(data.val_paths),
        data.val_frames,
        f"resuming at epoch {state['epoch']} batch {state['batch']}" if state["step"] else "starting",
    )
    log.scalars(state["step"], {"vae/bad_files": len(data.checked.bad)}, console=False)

    steps = _steps(cfg, model, optimizer, strategy, rates, name)
    # the interleave width orders the frames: a run resumed mid-epoch keeps the width its epoch started with
    cycle = int(state["cycle"]) if state["batch"] and state.get("cycle") else decode_files(v.parallel_files)
    state["cycle"] = cycle
    log.info(
        "step: %s (%s backend), %d replica(s); %d episode files decoded in parallel",
        steps.label,
        steps.backend,
        strategy.num_replicas_in_sync if strategy is not None else 1,
        cycle,
    )
    preview = _preview_frames(data.val_paths or data.train_paths)
    loop = _Loop(cfg, run, out, log, data, strategy, model, ckpt, state, early, steps, cycle, preview)
    loop.pending = Deferred(SYNC_EVERY, _handler(loop))  # (step, batch, loss, recon, kl) of steps not read back yet

    while state["epoch"] < v.epochs and not state.get("stopped"):
        epoch = state["epoch"]
        _train_epoch(loop, epoch, stop_at_step)
        _end_epoch(loop, epoch)
    return _mark_done(loop)


def _handler(loop: _Loop):
    """The `Deferred`'s handler for `loop`, with its own throughput meter and averaging window (`LOG_EVERY_S`)."""
    from wm.models.training import Rate, check_finite

    state, log = loop.state, loop.log
    batch_size, steps_per_epoch = loop.cfg.vae.batch_size, loop.data.steps_per_epoch
    rate, window, last_log = Rate(), [], [time.time()]

    def handle(values) -> None:
        """The read-back losses of the last steps (one sync for SYNC_EVERY steps): check, sum, log."""
        for step, _, loss, recon, kl in values:
            check_finite(loss, step, loop.ckpt)  # before any save: the last good checkpoint stays
            sums = state["sums"]
            state["sums"] = [sums[0] + loss, sums[1] + recon, sums[2] + kl, sums[3] + 1]
            window.append((loss, recon, kl))
        rate.add(batch_size * len(values))
        step, batch = values[-1][:2]
        if time.time() - last_log[0] >= LOG_EVERY_S or batch == steps_per_epoch:
            m = np.mean(window, axis=0)
            log.scalars(
                step,
                {
                    "vae/loss": m[0],
                    "vae/recon": m[1],
                    "vae/kl": m[2],
                    "vae/frames_per_s": rate.read(),
                    "vae/epoch_progress": state["epoch"] + batch / steps_per_epoch,
                },
                console=15.0,
            )
            window.clear()
            last_log[0] = time.time()

    return handle


def _train_epoch(loop: _Loop, epoch: int, stop_at_step: int | None) -> None:
    """The training steps of `epoch` from its next batch, a checkpoint every `vae.checkpoint_every` steps."""
    v, state, pending = loop.cfg.vae, loop.state, loop.pending
    ds = loop.steps.batches(
        loop.data.train_paths,
        v.batch_size,
        seed=loop.cfg.run.seed,
        epoch=epoch,
        shuffle_buffer=v.shuffle_buffer,
        skip_batches=state["batch"],
        cycle=loop.cycle,
        failures=loop.data.late,
    )
    if loop.strategy is not None and loop.strategy.num_replicas_in_sync > 1:
        ds = loop.strategy.experimental_distribute_dataset(ds)
    for x in ds:
        step = state["step"] + 1
        if stop_at_step is not None and step >= stop_at_step:
            raise KeyboardInterrupt(f"stopped before step {step}")
        state["step"], state["batch"] = step, state["batch"] + 1
        pending.add(step, state["batch"], *loop.steps.train(x, step))
        if v.checkpoint_every > 0 and step % v.checkpoint_every == 0 and state["batch"] < loop.data.steps_per_epoch:
            pending.flush()
            loop.steps.sync()
            loop.ckpt.save(state)
    pending.flush()


def _end_epoch(loop: _Loop, epoch: int) -> None:
    """End of epoch: validation, preview, keep-best, checkpoint (in that order: a kill redoes the end only)."""
    from wm.core.media import image_grid, save_png
    from wm.models.training import check_finite, save_weights

    cfg, run, data, state, early = loop.cfg, loop.run, loop.data, loop.state, loop.early
    sums = state["sums"]
    n = max(sums[3], 1)
    train_m = [sums[0] / n, sums[1] / n, sums[2] / n]
    val_m = _validate(loop.steps, data.val_paths, cfg.vae.batch_size, data.late) if data.val_paths else train_m
    _report_late(data.late, data.said, data.checked, cfg.data.max_bad_share, loop.log)
    check_finite(val_m[0], state["step"], loop.ckpt)
    loop.steps.sync()  # the Keras variables hold the step's weights from here on
    recon = np.asarray(loop.model(loop.preview))
    grid = image_grid([loop.preview, recon])
    save_png(loop.out / f"recon_epoch_{epoch + 1:03d}.png", grid)
    save_png(run.artifact("reconstructions"), grid)
    loop.log.image("vae/reconstructions", grid, state["step"])
    improved, stop = early.update(val_m[0])
    if improved or not run.vae_weights.exists():
        save_weights(loop.model, run.vae_weights)
    loop.log.scalars(
        state["step"],
        {
            "vae/epoch": epoch + 1,
            "vae/loss": train_m[0],
            "vae/recon": train_m[1],
            "vae/kl": train_m[2],
            "vae/val_loss": val_m[0],
            "vae/val_recon": val_m[1],
            "vae/val_kl": val_m[2],
            "vae/best_val_loss": early.best,
            "vae/bad_files": len(data.checked.bad) + len(data.late),
        },
    )
    state.update(
        epoch=epoch + 1, batch=0, sums=[0.0, 0.0, 0.0, 0], early=early.state_dict(), last_val=val_m[0], stopped=bool(stop)
    )
    loop.ckpt.save(state)
    if stop:
        loop.log.info("early stopping: no validation improvement for %d epochs", early.bad_epochs)


def _mark_done(loop: _Loop) -> dict[str, Any]:
    """Write DONE with the training's figures and return them."""
    v, run, data, state, early = loop.cfg.vae, loop.run, loop.data, loop.state, loop.early
    info = {
        "z_dim": v.z_dim,
        "backend": loop.steps.backend,
        "epochs": state["epoch"],
        "steps": state["step"],
        "best_val_loss": early.best,
        "val_loss": state.get("last_val"),
        "train_frames": data.train_frames,
        "val_frames": data.val_frames,
        "train_episodes": len(data.train_paths),
        "val_episodes": len(data.val_paths),
        "weights": run.vae_weights.name,
        "early_stopped": bool(state.get("stopped")),
        "bad_files": len(data.checked.bad) + len(data.late),
    }
    run.mark_done("train-vae", info)
    loop.log.info(
        "done: %d epochs, %d steps, best val loss %.4g -> %s", info["epochs"], info["steps"], early.best, run.vae_weights
    )
    return info


def _report_late(late: dict[str, str], said: set[str], checked: Checked, max_bad_share: float, log: Logger) -> None:
    """Name each file the stream could not decompress (once), and refuse when the bad files now pass the share."""
    for path, reason in sorted(late.items()):
        if path not in said:
            said.add(path)
            log.warning("skipping bad episode file: %s", reason)
    checked.refuse_if_too_many_bad(max_bad_share, len(late))


def _validate(steps: _Steps, paths: list[Path], batch_size: int, failures: dict[str, str] | None = None) -> list[float]:
    """Frame-weighted mean (loss, recon, kl) over the validation episodes, fixed noise per batch."""
    totals, n = np.zeros(3), 0
    for i, x in enumerate(steps.batches(paths, batch_size, drop_remainder=False, failures=failures)):
        b = int(x.shape[0])
        totals += b * np.array([float(t) for t in steps.evaluate(x, i)])
        n += b
    return (totals / max(n, 1)).tolist()
