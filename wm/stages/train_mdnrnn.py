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
"""

from __future__ import annotations

import argparse
from contextlib import closing

import numpy as np

from wm.core.config import Config
from wm.core.errors import WMError
from wm.core.metrics import make_logger
from wm.core.rundir import RunDir, atomic_savez

PREVIEW_STEPS = 150  # frames per preview rollout (a GIF, not an evaluation)
READ_EVERY = 10  # losses are read back (a device sync), checked and logged every this many steps and at every save


def run(cfg: Config, run: RunDir, args: argparse.Namespace) -> None:
    """Train M on the run's series and write weights, the preview GIF and DONE."""
    if not run.is_done("encode"):
        raise WMError(f"{run.stage_dir('encode')}/DONE missing: run encode first")
    from wm.core import tf_setup

    tf = tf_setup.setup()
    from wm.data.sequences import EpisodeBatches, StreamBatches, load_series
    from wm.envs import action_dim
    from wm.models.mdnrnn import MDNRNN, config_path, lr_value, make_optimizer, make_train_step, save_config
    from wm.models.training import Checkpoint, Deferred, Rate, check_finite, prefetch, save_weights

    m_cfg, out = cfg.mdnrnn, run.stage_dir("train-mdnrnn")
    if m_cfg.batching not in ("episodes", "streams"):
        raise WMError(f"mdnrnn.batching must be episodes or streams, got {m_cfg.batching!r}")
    if m_cfg.done_horizon < 1:
        raise WMError(f"mdnrnn.done_horizon must be ≥ 1, got {m_cfg.done_horizon}")
    a_dim = action_dim(cfg)
    with make_logger(run, "train-mdnrnn") as log:
        reward_head = bool(m_cfg.predict_reward)
        series = load_series(
            run.series_dir,
            cfg.vae.z_dim,
            a_dim,
            log,
            max_bad_share=cfg.data.max_bad_share,
            rewards=reward_head,
            dones=bool(m_cfg.predict_done),
        )
        log.info("series: %d episodes, %d frames, %d bad files skipped", series.n_episodes, series.n_frames, series.bad_files)
        if series.terminal is not None:  # the done head's positives (CarRacing: episodes cut at their first done)
            log.info("done targets: %d of %d episodes end by termination", int(series.terminal.sum()), series.n_episodes)
        log.scalars(0, {"mdnrnn/bad_files": series.bad_files}, console=False)
        import keras

        keras.utils.set_random_seed(int(cfg.run.seed))  # the same initial weights on a rerun without a checkpoint
        model = MDNRNN(
            cfg.vae.z_dim,
            a_dim,
            m_cfg.hidden,
            m_cfg.num_mixtures,
            m_cfg.predict_done,
            lstm=m_cfg.lstm,
            dropout=m_cfg.dropout,
            predict_reward=reward_head,
        )
        log.info("LSTM: %s (mdnrnn.lstm: %s), dropout %g", model.lstm_impl, m_cfg.lstm, model.dropout)
        opt = make_optimizer(m_cfg.lr, m_cfg.lr_min, m_cfg.lr_decay, m_cfg.adam_eps, m_cfg.grad_clip)
        ckpt = Checkpoint(out / "checkpoint.npz", model, opt)
        if getattr(args, "force", False):  # --force redoes the training, it does not continue it
            ckpt.delete()
            (out / "carry.npz").unlink(missing_ok=True)
        state = ckpt.restore() or {"step": 0, "epoch": 0, "chunk": 0}
        if state["step"]:
            log.info("resuming at step %d (epoch %d, chunk %d)", state["step"], state["epoch"], state["chunk"])
        elif m_cfg.init_from:
            warm_start(model, run.resolve(m_cfg.init_from))
            log.info("warm start from %s", m_cfg.init_from)
        schedule = [float(m_cfg.lr), float(m_cfg.lr_min), float(m_cfg.lr_decay)]
        if state["step"] and state.get("lr_schedule", schedule) != schedule:  # the schedule follows config.yaml: say so
            log.warning(
                "mdnrnn.lr/lr_min/lr_decay changed since the checkpoint: %s -> %s; the resumed optimiser uses "
                "the new schedule (config.yaml) from step %d",
                state["lr_schedule"],
                schedule,
                state["step"],
            )
        state["lr_schedule"] = schedule
        train_step = make_train_step(model, opt, m_cfg.done_weight, int(cfg.run.seed), float(m_cfg.reward_weight))
        rate = Rate()
        last = [float("nan")] * 3

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

        pending = Deferred(READ_EVERY, handle)  # (step, epoch, nll, done_loss, reward_loss) of steps not read back yet
        flush = pending.flush

        def one(batch, carry):
            nll, done_loss, r_loss, final = train_step(batch, carry)
            state["step"] += 1
            pending.add(state["step"], state["epoch"], nll, done_loss, r_loss)
            return final

        def save(carry=None) -> None:
            flush()
            if carry is None:
                ckpt.save(state)
            else:
                _save(out, ckpt, state, carry)

        def tensors(batch):  # in the prefetch thread, off the step's path
            return {k: tf.constant(v) for k, v in batch.items()}

        if m_cfg.batching == "episodes":
            batches = EpisodeBatches(
                series, m_cfg.batch_size, m_cfg.seq_len, cfg.run.seed, m_cfg.predict_done, m_cfg.done_horizon
            )
            todo = (tensors(batches.batch(k)) for k in range(state["step"], int(m_cfg.steps)))
            with closing(prefetch(todo)) as items:
                for batch in items:
                    one(batch, model.initial_state(m_cfg.batch_size))
                    if state["step"] % m_cfg.checkpoint_every == 0:
                        save()
        else:
            batches = StreamBatches(series, m_cfg.batch_size, m_cfg.seq_len, cfg.run.seed, m_cfg.done_horizon)
            log.info("streams: %d × %d-step chunks per epoch", batches.n_chunks, m_cfg.seq_len)
            carry = _load_carry(out / "carry.npz", state, model, m_cfg.batch_size)

            def chunks(e0: int, c0: int):  # every remaining chunk of every remaining epoch, in order
                for e in range(e0, int(m_cfg.epochs)):
                    for i, batch in batches.epoch(e, c0 if e == e0 else 0):
                        yield e, i, tensors(batch)

            with closing(prefetch(chunks(state["epoch"], state["chunk"]))) as items:
                for e, i, batch in items:
                    if e != state["epoch"]:  # a new epoch: zero state at its start (§4)
                        state["epoch"], state["chunk"] = e, 0
                        carry = model.initial_state(m_cfg.batch_size)
                    carry = one(batch, carry)  # the state carries over to the next chunk (§4)
                    state["chunk"] = i + 1
                    if state["step"] % m_cfg.checkpoint_every == 0:
                        save(carry)
            if state["epoch"] < m_cfg.epochs:  # the last epoch ran to its end
                state["epoch"], state["chunk"] = int(m_cfg.epochs), 0
                carry = model.initial_state(m_cfg.batch_size)
            save(carry)
        flush()
        ckpt.save(state)
        save_weights(model, run.mdnrnn_weights)
        save_config(model, config_path(run.mdnrnn_weights))
        try:
            preview(cfg, run, model, log)
        except WMError as e:
            log.warning("no dream preview: %s", e)
        info = {
            "mdnrnn/step": state["step"],
            "mdnrnn/nll": last[0],
            "mdnrnn/done_loss": last[1],
            **({"mdnrnn/reward_loss": last[2]} if reward_head else {}),
            "params": int(model.count_params()),
            "mdnrnn/bad_files": series.bad_files,
        }
        run.mark_done("train-mdnrnn", info)
        log.info("done: %d steps, nll %.4f, done_loss %.4f", state["step"], last[0], last[1])


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
    atomic_savez(out / "carry.npz", compressed=False, step=np.array(state["step"]), c=carry[0].numpy(), h=carry[1].numpy())
    ckpt.save(state)


def _load_carry(path, state: dict, model, batch: int):
    import tensorflow as tf

    if state["chunk"] and path.exists():
        with np.load(path, allow_pickle=False) as f:
            if int(f["step"]) == state["step"] and f["c"].shape == (batch, model.hidden):
                return tf.constant(f["c"]), tf.constant(f["h"])
    return model.initial_state(batch)


def preview(cfg: Config, run: RunDir, model, log) -> None:
    """`mdnrnn/dream_preview.gif`: `preview_episodes` dream rollouts with random actions, decoded by V, side by side."""
    from wm.core.media import save_gif
    from wm.rollouts.dream import DreamEnv, done_options
    from wm.rollouts.engine import dream_episode
    from wm.rollouts.recording import decode
    from wm.rollouts.world import load_world

    n = int(cfg.mdnrnn.preview_episodes)
    if n <= 0:
        return
    world = load_world(cfg, run, need=("vae", "initial_z"))
    vae, mu, logvar, ctrl = world.vae, world.initial_mu, world.initial_logvar, world.controller
    steps = min(PREVIEW_STEPS, int(cfg.dream.max_steps))
    env = DreamEnv(
        model,
        ctrl,
        mu,
        logvar,
        cfg.dream.temperature,
        steps,
        **done_options(cfg),
    )
    rng = np.random.default_rng([cfg.run.seed, 4])
    rollouts = []
    for _ in range(n):
        zs = dream_episode(env, int(rng.integers(2**31)), steps, random=True, record=True)[2]["z"]
        rollouts.append(np.stack(decode(vae, np.stack(zs).astype(np.float32))))
    t_max = max(len(f) for f in rollouts)
    # finished rollouts hold their last frame so the panels stay in step
    padded = [np.concatenate([f, np.repeat(f[-1:], t_max - len(f), 0)]) for f in rollouts]
    save_gif(run.artifact("dream_preview"), np.concatenate(padded, axis=2))
    log.info("dream preview: %d rollouts, %d frames", n, t_max)
