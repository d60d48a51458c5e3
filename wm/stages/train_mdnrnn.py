"""`train-mdnrnn`: train M on `series/` as the authors did (paper settings §4), then write a dream preview GIF.

`mdnrnn.batching`: `episodes` (Car: `mdnrnn.steps` steps of B random whole episodes) or `streams` (Doom:
`mdnrnn.epochs` epochs of B parallel streams in `seq_len` chunks with the LSTM state carried between chunks).
Adam (ε `adam_eps`), clip by value `grad_clip`, lr = (lr − lr_min)·decay^step + lr_min (§4).

Outputs in `mdnrnn/`: `mdnrnn.weights.h5` + `model.json` (sizes), `checkpoint.npz` (+ `carry.npz`, the carried
stream state) while training, `dream_preview.gif`, `DONE`. A rerun resumes from the checkpoint with the same
batches (they are a function of (run.seed, step)). Metrics: `mdnrnn/step`, `mdnrnn/epoch`, `mdnrnn/nll`,
`mdnrnn/done_loss` (and `mdnrnn/reward_loss` with a reward head), `mdnrnn/lr`, `mdnrnn/steps_per_s`.
`mdnrnn.lstm` picks the sequence implementation (`wm.models.mdnrnn`: the custom cell, or `keras.layers.LSTM`/cuDNN
on a view of the same weights); `mdnrnn.dropout` and `mdnrnn.predict_reward` are described there. Batches are
assembled in a background thread (`wm.models.training.prefetch`) while the step runs; the losses are read back (a device
sync), checked and logged every `READ_EVERY` steps and before every save, one record per step as before.

Backend (`run.backend`, docs/guide/backends.md): on TensorFlow the step is `wm.models.mdnrnn_tf`'s; on JAX it is
`wm.models.jax_steps.MDNRNNSteps` over the same NumPy batches, and TensorFlow is not imported for the training. The
dream preview runs on TensorFlow (the dream kernel's backend): after a JAX training, in a child process that loads
the weights file just written.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wm.core.atomic import atomic_savez
from wm.core.config import Config
from wm.core.errors import WMError
from wm.core.metrics import make_logger
from wm.core.rundir import RunDir
from wm.stages.contract import StageInput, stage_input

PREVIEW_STEPS = 150  # frames per preview rollout (a GIF, not an evaluation)
READ_EVERY = 10  # losses are read back (a device sync), checked and logged every this many steps and at every save


@dataclass
class _Fit:
    """What the training loops work with: M, its compiled step, the checkpoint and the state it saves."""

    model: Any
    train_step: Any
    state: dict[str, Any]
    pending: Any  # a `Deferred` of (step, epoch, nll, done_loss, reward_loss) of steps not read back yet
    ckpt: Any
    out: Path
    sync: Any  # writes a JAX step's carried weights back into the Keras variables (a no-op on TensorFlow)


@dataclass(frozen=True)
class Options:
    """train-mdnrnn has no flags of its own; it reads the shared `--force`."""

    force: bool = False  # start afresh: the checkpoint (and the carried stream state) is deleted


def run(inp: StageInput, run: RunDir, opts: Options) -> None:
    """Train M on the run's series and write weights, the preview GIF and DONE."""
    if not run.is_done("encode"):
        raise WMError(f"{run.stage_dir('encode')}/DONE missing: run encode first")
    from wm.core import backend, tf_setup

    cfg = inp.cfg
    name = backend.activate(cfg.run.backend)  # before Keras loads
    if name == "tensorflow":
        tf_setup.setup()
    from wm.models.mdnrnn import config_path, make_optimizer, save_config
    from wm.models.training import Checkpoint, Deferred, save_weights

    m_cfg, out = cfg.mdnrnn, run.stage_dir("train-mdnrnn")
    # mdnrnn.batching's choices and done_horizon ≥ 1 are config.RULES': a config that breaks them never reaches here
    a_dim = inp.setup.action_dim
    with make_logger(run, "train-mdnrnn") as log:
        reward_head = m_cfg.predict_reward
        series = _series(cfg, run, a_dim, log)
        model = _model(cfg, a_dim, log)
        opt = make_optimizer(m_cfg.lr, m_cfg.lr_min, m_cfg.lr_decay, m_cfg.adam_eps, m_cfg.grad_clip)
        ckpt = Checkpoint(out / "checkpoint.npz", model, opt)
        state, schedule = _restore(cfg, run, opts, model, ckpt, out, log)
        train_step, sync = _step(cfg, model, opt, name)
        # the last step's (nll, done_loss, reward_loss), read back; kept in the checkpoint's state, so a rerun that
        # finds the training done (killed before its DONE) reports the same figures as an unbroken run
        last = [float(x) for x in state.get("last_losses", [float("nan")] * 3)]
        state["last_losses"] = last
        pending = Deferred(READ_EVERY, _handler(ckpt, log, schedule, reward_head, last))
        fit = _Fit(model, train_step, state, pending, ckpt, out, sync)
        if m_cfg.batching == "episodes":
            _train_episodes(fit, cfg, series)
        else:
            _train_streams(fit, cfg, series, log)
        pending.flush()
        sync()
        ckpt.save(state)
        save_weights(model, run.mdnrnn_weights)
        save_config(model, config_path(run.mdnrnn_weights))
        try:
            preview(inp, run, model, log) if name == "tensorflow" else _preview_on_tensorflow(run, log)
        except WMError as e:
            log.warning("no dream preview: %s", e)
        info = {
            "backend": name,
            "mdnrnn/step": state["step"],
            "mdnrnn/nll": last[0],
            "mdnrnn/done_loss": last[1],
            **({"mdnrnn/reward_loss": last[2]} if reward_head else {}),
            "params": int(model.count_params()),
            "mdnrnn/bad_files": series.bad_files,
        }
        run.mark_done("train-mdnrnn", info)
        log.info("done: %d steps, nll %.4f, done_loss %.4f", state["step"], last[0], last[1])


def _step(cfg: Config, model: Any, opt: Any, backend: str) -> tuple[Any, Any]:
    """The backend's compiled step `(batch, (c, h)) -> (nll, done_loss, reward_loss, final)` and its `sync`."""
    m_cfg, seed = cfg.mdnrnn, cfg.run.seed
    if backend == "jax":
        from wm.models.jax_steps import MDNRNNSteps

        steps = MDNRNNSteps(model, opt, m_cfg.done_weight, seed, m_cfg.reward_weight)
        return steps.train, steps.sync
    from wm.models.mdnrnn_tf import make_train_step

    return make_train_step(model, opt, m_cfg.done_weight, seed, m_cfg.reward_weight), lambda: None


def _series(cfg: Config, run: RunDir, a_dim: int, log: Any) -> Any:
    """The run's series (`wm.data.sequences.load_series`), with the targets the heads need; logged."""
    from wm.data.sequences import load_series

    m_cfg = cfg.mdnrnn
    series = load_series(
        run.series_dir,
        cfg.vae.z_dim,
        a_dim,
        log,
        max_bad_share=cfg.data.max_bad_share,
        rewards=m_cfg.predict_reward,
        dones=m_cfg.predict_done,
    )
    log.info("series: %d episodes, %d frames, %d bad files skipped", series.n_episodes, series.n_frames, series.bad_files)
    if series.terminal is not None:  # the done head's positives (CarRacing: episodes cut at their first done)
        log.info("done targets: %d of %d episodes end by termination", int(series.terminal.sum()), series.n_episodes)
    log.scalars(0, {"mdnrnn/bad_files": series.bad_files}, console=False)
    return series


def _model(cfg: Config, a_dim: int, log: Any) -> Any:
    """M with its initial weights drawn from the run seed; its sequence implementation logged."""
    from wm.core import backend
    from wm.models.mdnrnn import MDNRNN

    m_cfg = cfg.mdnrnn
    backend.seed_keras(cfg.run.seed)  # the same initial weights on a rerun without a checkpoint
    model = MDNRNN(
        cfg.vae.z_dim,
        a_dim,
        m_cfg.hidden,
        m_cfg.num_mixtures,
        m_cfg.predict_done,
        lstm=m_cfg.lstm,
        dropout=m_cfg.dropout,
        predict_reward=m_cfg.predict_reward,
    )
    log.info("LSTM: %s (mdnrnn.lstm: %s), dropout %g", model.lstm_impl, m_cfg.lstm, model.dropout)
    return model


def _restore(
    cfg: Config, run: RunDir, opts: Options, model: Any, ckpt: Any, out: Path, log: Any
) -> tuple[dict[str, Any], list[float]]:
    """The checkpoint's state (afresh with `--force` or without one, then warm-started from `mdnrnn.init_from`) and
    the learning-rate schedule, config.yaml's."""
    m_cfg = cfg.mdnrnn
    if opts.force:  # --force redoes the training, it does not continue it
        ckpt.delete()
        (out / "carry.npz").unlink(missing_ok=True)
    state = ckpt.restore() or {"step": 0, "epoch": 0, "chunk": 0}
    if state["step"]:
        log.info("resuming at step %d (epoch %d, chunk %d)", state["step"], state["epoch"], state["chunk"])
    elif m_cfg.init_from:
        warm_start(model, run.resolve(m_cfg.init_from))
        log.info("warm start from %s", m_cfg.init_from)
    schedule = [m_cfg.lr, m_cfg.lr_min, m_cfg.lr_decay]
    if state["step"] and state.get("lr_schedule", schedule) != schedule:  # the schedule follows config.yaml: say so
        log.warning(
            "mdnrnn.lr/lr_min/lr_decay changed since the checkpoint: %s -> %s; the resumed optimiser uses "
            "the new schedule (config.yaml) from step %d",
            state["lr_schedule"],
            schedule,
            state["step"],
        )
    state["lr_schedule"] = schedule
    return state, schedule


def _handler(ckpt: Any, log: Any, schedule: list[float], reward_head: bool, last: list[float]):
    """The `Deferred`'s handler, with its own steps/s meter; it keeps the last losses in `last`."""
    from wm.models.mdnrnn import lr_value
    from wm.models.training import Rate, check_finite

    rate = Rate()

    def handle(values) -> None:
        """Check the read-back losses (one sync for READ_EVERY steps) and write their records."""
        rate.add(len(values))
        sps = rate.read()
        for s, e, nll, done_loss, r_loss in values:
            check_finite(nll + done_loss + r_loss, s, ckpt)  # before any save: the last good checkpoint stays
            rec = {"mdnrnn/step": s, "mdnrnn/epoch": e, "mdnrnn/nll": nll, "mdnrnn/done_loss": done_loss}
            if reward_head:
                rec["mdnrnn/reward_loss"] = r_loss
            rec.update({"mdnrnn/lr": lr_value(s, *schedule), "mdnrnn/steps_per_s": sps})
            log.scalars(s, rec, console=10.0)
            last[:] = nll, done_loss, r_loss

    return handle


def _one(fit: _Fit, batch, carry):
    """One training step from `carry`; returns the final LSTM state."""
    nll, done_loss, r_loss, final = fit.train_step(batch, carry)
    fit.state["step"] += 1
    fit.pending.add(fit.state["step"], fit.state["epoch"], nll, done_loss, r_loss)
    return final


def _checkpoint(fit: _Fit, carry=None) -> None:
    """Read back the pending losses, then save the checkpoint (and the carried state, for streams)."""
    fit.pending.flush()
    fit.sync()
    if carry is None:
        fit.ckpt.save(fit.state)
    else:
        _save(fit.out, fit.ckpt, fit.state, carry)


def _tensors(batch):
    """A batch's arrays as the backend's tensors (in the prefetch thread, off the step's path)."""
    from keras import ops

    return {k: ops.convert_to_tensor(v) for k, v in batch.items()}


def _train_episodes(fit: _Fit, cfg: Config, series: Any) -> None:
    """`mdnrnn.batching: episodes`: the steps left of `mdnrnn.steps`, each on B random whole episodes from zero state."""
    from wm.data.sequences import EpisodeBatches
    from wm.models.training import prefetch

    m_cfg, state = cfg.mdnrnn, fit.state
    batches = EpisodeBatches(series, m_cfg.batch_size, m_cfg.seq_len, cfg.run.seed, m_cfg.predict_done, m_cfg.done_horizon)
    todo = (_tensors(batches.batch(k)) for k in range(state["step"], m_cfg.steps))
    with closing(prefetch(todo)) as items:
        for batch in items:
            _one(fit, batch, fit.model.initial_state(m_cfg.batch_size))
            if state["step"] % m_cfg.checkpoint_every == 0:
                _checkpoint(fit)


def _chunks(batches: Any, epochs: int, e0: int, c0: int):
    """Every remaining chunk of every remaining epoch, in order, as (epoch, chunk, tensors)."""
    for e in range(e0, epochs):
        for i, batch in batches.epoch(e, c0 if e == e0 else 0):
            yield e, i, _tensors(batch)


def _train_streams(fit: _Fit, cfg: Config, series: Any, log: Any) -> None:
    """`mdnrnn.batching: streams`: the chunks left of `mdnrnn.epochs` epochs, the LSTM state carried between chunks."""
    from wm.data.sequences import StreamBatches
    from wm.models.training import prefetch

    m_cfg, state, model = cfg.mdnrnn, fit.state, fit.model
    batches = StreamBatches(series, m_cfg.batch_size, m_cfg.seq_len, cfg.run.seed, m_cfg.done_horizon)
    log.info("streams: %d × %d-step chunks per epoch", batches.n_chunks, m_cfg.seq_len)
    carry = _load_carry(fit.out / "carry.npz", state, model, m_cfg.batch_size)
    with closing(prefetch(_chunks(batches, m_cfg.epochs, state["epoch"], state["chunk"]))) as items:
        for e, i, batch in items:
            if e != state["epoch"]:  # a new epoch: zero state at its start (§4)
                state["epoch"], state["chunk"] = e, 0
                carry = model.initial_state(m_cfg.batch_size)
            carry = _one(fit, batch, carry)  # the state carries over to the next chunk (§4)
            state["chunk"] = i + 1
            if state["step"] % m_cfg.checkpoint_every == 0:
                _checkpoint(fit, carry)
    if state["epoch"] < m_cfg.epochs:  # the last epoch ran to its end
        state["epoch"], state["chunk"] = m_cfg.epochs, 0
        carry = model.initial_state(m_cfg.batch_size)
    _checkpoint(fit, carry)


def warm_start(model, path) -> None:
    """Load `mdnrnn.init_from` into the fresh model (the previous round's M); one clear line when it does not fit."""
    from wm.models.mdnrnn import load_mdnrnn

    src = load_mdnrnn(
        path,
        model.z_dim,
        model.action_dim,
        model.hidden,
        model.num_mixtures,
        model.predict_done,
        predict_reward=model.predict_reward,
    )
    model.set_weights(src.get_weights())


def _save(out, ckpt, state: dict, carry) -> None:
    # carry first, tagged with its step: a kill between the two writes leaves a carry that does not match the
    # checkpoint, which `_load_carry` then ignores (zero state, a harmless restart of the stream).
    atomic_savez(
        out / "carry.npz", compressed=False, step=np.array(state["step"]), c=np.asarray(carry[0]), h=np.asarray(carry[1])
    )
    ckpt.save(state)


def _load_carry(path, state: dict, model, batch: int):
    from keras import ops

    if state["chunk"] and path.exists():
        with np.load(path, allow_pickle=False) as f:
            if int(f["step"]) == state["step"] and f["c"].shape == (batch, model.hidden):
                return ops.convert_to_tensor(f["c"]), ops.convert_to_tensor(f["h"])
    return model.initial_state(batch)


def preview(inp: StageInput, run: RunDir, model, log) -> None:
    """`mdnrnn/dream_preview.gif`: `preview_episodes` dream rollouts with random actions, decoded by V, side by side."""
    from wm.rollouts.dream import DreamEnv
    from wm.rollouts.episodes import dream_episode
    from wm.rollouts.recording import decode, save_dream_preview
    from wm.rollouts.world import load_world

    cfg, facts = inp.cfg, inp.setup
    n = cfg.mdnrnn.preview_episodes
    if n <= 0:
        return
    world, dream = load_world(facts, run, need=("vae", "initial_z")), facts.dream
    vae, mu, logvar, ctrl = world.vae, world.initial_mu, world.initial_logvar, world.controller
    steps = min(PREVIEW_STEPS, dream.max_steps)
    env = DreamEnv(model, ctrl, mu, logvar, dream.temperature, steps, **dream.done_options())
    rng = np.random.default_rng([cfg.run.seed, 4])
    rollouts = []
    for _ in range(n):
        zs = dream_episode(env, int(rng.integers(2**31)), steps, random=True, record=True)[2]["z"]
        rollouts.append(np.stack(decode(vae, np.stack(zs).astype(np.float32))))
    # the TensorBoard filmstrip goes to the stage's metrics logger (after a JAX training, the preview child's
    # `_ImageRelay`, which hands it to the parent's logger)
    t_max = save_dream_preview(run.artifact("dream_preview"), rollouts, log if hasattr(log, "image") else None)
    log.info("dream preview: %d rollouts, %d frames", n, t_max)


def _preview_on_tensorflow(run: RunDir, log) -> None:
    """`preview` after a JAX training: in a child process on TensorFlow (the dream kernel's backend), from the weights
    file just written, the way every later stage loads them. The child's TensorBoard pictures (the dream filmstrip)
    come back over a pipe and go to this stage's logger."""
    import multiprocessing
    import os

    saved = os.environ.get("KERAS_BACKEND")
    os.environ["KERAS_BACKEND"] = "tensorflow"  # a spawned child takes the environment as it is at its start
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe(duplex=False)
    try:
        child = ctx.Process(target=_preview_child, args=(str(run.path), theirs))
        child.start()
    finally:
        if saved is None:
            os.environ.pop("KERAS_BACKEND", None)
        else:
            os.environ["KERAS_BACKEND"] = saved
    theirs.close()  # the child holds the writing end: a child that dies ends our read with EOFError
    try:
        images = ours.recv()
    except EOFError:
        images = []
    child.join()
    if child.exitcode != 0:
        raise WMError(f"the dream preview's process on TensorFlow exited with {child.exitcode}")
    for tag, img in images:
        if hasattr(log, "image"):
            log.image(tag, img)
    log.info("dream preview drawn on TensorFlow from %s", run.mdnrnn_weights.name)


class _ImageRelay:
    """The preview child's logger: lines to `logging`, pictures kept to be sent to the parent's metrics logger."""

    def __init__(self, name: str) -> None:
        import logging

        self._log = logging.getLogger(name)
        self.images: list[tuple[str, np.ndarray]] = []

    def info(self, msg: str, *args) -> None:
        self._log.info(msg, *args)

    def warning(self, msg: str, *args) -> None:
        self._log.warning(msg, *args)

    def image(self, tag: str, img, step: int | None = None) -> None:
        self.images.append((tag, np.asarray(img)))


def _preview_child(run_path: str, conn) -> None:
    """The child of `_preview_on_tensorflow`: M from the run's weights file, then `preview`; its pictures to `conn`."""
    from wm.core import tf_setup
    from wm.models.mdnrnn import load_mdnrnn

    tf_setup.setup()
    run = RunDir(run_path)
    inp = stage_input(run.load_config(), "train-mdnrnn")
    relay = _ImageRelay("wm.train-mdnrnn.preview")
    preview(inp, run, load_mdnrnn(run.mdnrnn_weights), relay)
    conn.send(relay.images)
    conn.close()
