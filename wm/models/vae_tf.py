"""V's compiled steps on TensorFlow: the stateless noise, the graph or XLA train and eval steps, the encoder.

The model and its loss are backend-neutral (`wm.models.vae`); these steps are what the TensorFlow backend runs
(`run.backend: tensorflow`, the default): a `tf.function`, under XLA with `vae.jit_compile`, and across a
MirroredStrategy's replicas with `vae.multi_gpu`. The JAX backend's twin is `wm.models.jax_steps`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import tensorflow as tf  # noqa: E402

from wm.core.errors import WMError  # noqa: E402
from wm.models.vae import FRAME, ConvVAE, make_optimizer  # noqa: E402


def sample_eps(seed: int, step, z_dim: int, batch) -> tf.Tensor:
    """Stateless N(0, 1) noise for step `step`; distinct per replica, identical on replay after a resume."""
    ctx = tf.distribute.get_replica_context()
    replica = ctx.replica_id_in_sync_group if ctx is not None else 0
    s = tf.stack([tf.cast(seed, tf.int64), tf.cast(step, tf.int64) * 1024 + tf.cast(replica, tf.int64)])
    return tf.random.stateless_normal((batch, z_dim), seed=s)


# `vae.jit_compile: auto` on a CPU: a V training of at least PROBE_FRAMES frames first times both steps (xla_probe,
# ≈ 20 s) and takes XLA when it is XLA_MARGIN× faster. Which is faster depends on the CPU: on one 2-core machine
# XLA was no faster (152–171 vs 166–245 frames/s), on another (AMD EPYC, AVX2) 3.3× faster (185.5 vs 56.6).
PROBE_FRAMES = 50_000
XLA_MARGIN = 1.1


def probes_xla(setting, strategy=None, frames: int = 0) -> bool:
    """Whether `use_xla` needs `xla_probe`'s rates: `auto`, no GPU, one replica, a training of >= PROBE_FRAMES."""
    return (
        str(setting).lower() == "auto"
        and frames >= PROBE_FRAMES
        and not tf.config.get_visible_devices("GPU")
        and (strategy or tf.distribute.get_strategy()).num_replicas_in_sync == 1
    )


def use_xla(setting, strategy=None, rates: dict[str, float] | None = None) -> bool:
    """Whether V's steps compile with XLA (`vae.jit_compile`: true | false | auto).

    auto: with a GPU visible; on a CPU when `rates` (xla_probe's frames/s, see `probes_xla`) show XLA
    XLA_MARGIN× faster than the graph step. Never under several replicas (XLA would have to wrap the strategy's
    cross-device reduction). The two steps are the same function with the same noise (tests/test_vae.py).
    """
    if str(setting).lower() not in ("true", "false", "auto"):
        raise WMError(f"vae.jit_compile must be true, false or auto, got {setting!r}")
    if (strategy or tf.distribute.get_strategy()).num_replicas_in_sync > 1:
        return False
    if str(setting).lower() == "auto":
        if tf.config.get_visible_devices("GPU"):
            return True
        return rates is not None and rates["xla"] > XLA_MARGIN * rates["graph"]
    return str(setting).lower() == "true"


def xla_probe(z_dim: int, batch: int, kl_tolerance: float, steps: int = 6) -> dict[str, float]:
    """Training frames/s of the graph and the XLA train step, each on a throwaway V (random weights and frames).

    It draws from Keras's global generator (the throwaway weights): call it before seeding the real model.
    """
    x = tf.constant(np.random.default_rng(0).integers(0, 256, (batch, *FRAME), dtype=np.uint8))
    rates = {}
    for name, jit in (("graph", False), ("xla", True)):
        step = make_train_step(ConvVAE(z_dim), make_optimizer(), kl_tolerance, 0, jit_compile=jit)
        float(step(x, tf.constant(0, tf.int64))[0])  # trace / compile, build the optimizer
        t0 = time.perf_counter()
        for i in range(steps):
            out = step(x, tf.constant(i + 1, tf.int64))
        float(out[0])
        rates[name] = batch * steps / (time.perf_counter() - t0)
    return rates


def make_train_step(
    model: ConvVAE, optimizer, kl_tolerance: float, seed: int, strategy=None, jit_compile: bool = False
) -> Callable[..., tuple[tf.Tensor, tf.Tensor, tf.Tensor]]:
    """A compiled `train_step(x_uint8, step) -> (loss, recon, kl)`: a graph, under XLA with `jit_compile` (see `use_xla`).

    Under a MirroredStrategy each replica takes its slice of the batch; the loss is divided by the replica count
    because Keras sums the replicas' gradients, so the update equals the single-device one.
    """
    strategy = strategy or tf.distribute.get_strategy()
    replicas = strategy.num_replicas_in_sync
    variables = model.trainable_variables

    def update(x, eps):
        with tf.GradientTape() as tape:
            loss, recon, kl = model.loss_terms(x, eps, kl_tolerance)
            scaled = optimizer.scale_loss(loss / replicas)
        grads = tape.gradient(scaled, variables)
        optimizer.apply(grads, variables)
        return loss, recon, kl

    # The noise is drawn outside the XLA cluster: stateless ops with a runtime seed give other numbers under XLA,
    # and a run's noise must not depend on `vae.jit_compile` (or change when it resumes on another machine).
    core = tf.function(update, jit_compile=True, autograph=False) if jit_compile else update

    def replica_step(x, step):
        return core(x, sample_eps(seed, step, model.z_dim, tf.shape(x)[0]))

    @tf.function(autograph=False)
    def train_step(x, step):
        if replicas == 1:
            return replica_step(x, step)
        out = strategy.run(replica_step, args=(x, step))
        return tuple(strategy.reduce("MEAN", v, axis=None) for v in out)

    return train_step


def make_eval_step(
    model: ConvVAE, kl_tolerance: float, seed: int, jit_compile: bool = False
) -> Callable[..., tuple[tf.Tensor, tf.Tensor, tf.Tensor]]:
    """A compiled `eval_step(x_uint8, i) -> (loss, recon, kl)` with fixed noise per batch index (comparable per epoch)."""
    terms = (
        tf.function(lambda x, eps: model.loss_terms(x, eps, kl_tolerance), jit_compile=True, autograph=False)
        if jit_compile
        else None
    )

    @tf.function(autograph=False)
    def eval_step(x, i):
        eps = sample_eps(seed + 1, i, model.z_dim, tf.shape(x)[0])  # outside XLA, as in the train step
        return terms(x, eps) if terms is not None else model.loss_terms(x, eps, kl_tolerance)

    return eval_step


def make_encoder(model: ConvVAE) -> Callable[[tf.Tensor], tuple[tf.Tensor, tf.Tensor]]:
    """A compiled `encode(x_uint8 (N, 64, 64, 3)) -> (mu, logvar)` for any N (one trace)."""
    return tf.function(model.encode, input_signature=[tf.TensorSpec((None,) + FRAME, tf.uint8)], autograph=False)
