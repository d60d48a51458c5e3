"""V: the paper's convolutional VAE, its loss and its training step (docs/paper-settings.md §2).

Layers, loss and optimiser follow the authors' `vae/vae.py` exactly: four k4/s2 'valid' convs (32-64-128-256),
linear μ and logvar heads, a linear dense 1024 reshaped to 1×1×1024, deconvs k5,k5,k6,k6 (128-64-32-3), sigmoid
output. Totals: 4,348,547 parameters for z=32 (CarRacing) and 4,446,915 for z=64 (Doom), as in the paper's tables.

Loss (§2): summed squared error over the 64·64·3 pixels of an image, plus the KL of the image floored at
kl_tolerance·z (a floor on the *total* KL, not per-dimension free bits), both averaged over the batch. The decoder
is trained on a sampled z. The sampling noise is drawn statelessly from (seed, step), so a resumed run replays
exactly the same noise as an uninterrupted one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from wm.core.errors import WMError  # noqa: E402

FRAME = (64, 64, 3)


class ConvVAE(keras.Model):
    """The World Models ConvVAE (§2): `encode(x) -> (mu, logvar)`, `decode(z) -> x̂`, `call(x)` reconstructs from μ.

    Inputs are (N, 64, 64, 3) frames, uint8 (divided by 255 here) or float in [0, 1]. Weights use Keras' defaults,
    which are TF1 `tf.layers`' defaults too (glorot-uniform kernels, zero biases, §2).
    """

    def __init__(self, z_dim: int, **kwargs):
        super().__init__(**kwargs)
        self.z_dim = int(z_dim)
        L = keras.layers
        # §2 table, rows 1–5: 64→31→14→6→2, flattened in NHWC order to 1024.
        self.encoder = keras.Sequential(
            [keras.Input(FRAME)]
            + [
                L.Conv2D(f, 4, strides=2, padding="valid", activation="relu", name=f"enc_conv{i}")
                for i, f in enumerate((32, 64, 128, 256), 1)
            ]
            + [L.Flatten(name="enc_flatten")],
            name="encoder",
        )
        # Row 6: two linear heads.
        self.mu_head = L.Dense(self.z_dim, name="enc_mu")
        self.logvar_head = L.Dense(self.z_dim, name="enc_logvar")
        self.mu_head.build((None, 1024))
        self.logvar_head.build((None, 1024))
        # Rows 8–12: 1×1 → 5 → 13 → 30 → 64. The output layer stays float32 under mixed precision.
        self.decoder = keras.Sequential(
            [keras.Input((self.z_dim,)), L.Dense(1024, name="dec_dense"), L.Reshape((1, 1, 1024), name="dec_reshape")]
            + [
                L.Conv2DTranspose(f, k, strides=2, padding="valid", activation="relu", name=f"dec_deconv{i}")
                for i, (f, k) in enumerate(((128, 5), (64, 5), (32, 6)), 1)
            ]
            + [L.Conv2DTranspose(3, 6, strides=2, padding="valid", activation="sigmoid", dtype="float32", name="dec_deconv4")],
            name="decoder",
        )
        self.built = True

    @staticmethod
    def to_float(x) -> tf.Tensor:
        """uint8 frames → float in [0, 1]; float frames pass through (cast to float32)."""
        x = tf.convert_to_tensor(x)
        if x.dtype == tf.uint8:
            return tf.cast(x, tf.float32) / 255.0
        return tf.cast(x, tf.float32)

    def encode(self, x) -> tuple[tf.Tensor, tf.Tensor]:
        """(mu, logvar), each float32 (N, z)."""
        h = self.encoder(self.to_float(x))
        return tf.cast(self.mu_head(h), tf.float32), tf.cast(self.logvar_head(h), tf.float32)

    def decode(self, z) -> tf.Tensor:
        """float32 (N, 64, 64, 3) in [0, 1]."""
        return tf.cast(self.decoder(z), tf.float32)

    def call(self, x, training: bool = False) -> tf.Tensor:
        mu, _ = self.encode(x)
        return self.decode(mu)

    def loss_terms(self, x, eps, kl_tolerance: float) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """(loss, recon, kl) of a batch, with z = μ + exp(logvar/2)·eps (§2 row 7); all float32."""
        x = self.to_float(x)
        mu, logvar = self.encode(x)
        z = mu + tf.exp(logvar / 2.0) * tf.cast(eps, tf.float32)
        return vae_loss(x, self.decode(z), mu, logvar, kl_tolerance)


def vae_loss(x, x_hat, mu, logvar, kl_tolerance: float) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """The authors' loss (§2): (r_loss + kl_loss, r_loss, kl_loss), float32 scalars.

    r_loss = mean over the batch of Σ_pixels (x − x̂)²; kl_loss = mean over the batch of max(KL, kl_tolerance·z),
    KL = −½ Σ_dims (1 + logvar − μ² − e^logvar). Below the floor the KL gradient is zero, as in the authors' code.
    """
    x, x_hat = tf.cast(x, tf.float32), tf.cast(x_hat, tf.float32)
    mu, logvar = tf.cast(mu, tf.float32), tf.cast(logvar, tf.float32)
    r_loss = tf.reduce_mean(tf.reduce_sum(tf.square(x - x_hat), axis=[1, 2, 3]))
    kl = -0.5 * tf.reduce_sum(1.0 + logvar - tf.square(mu) - tf.exp(logvar), axis=1)
    kl = tf.maximum(kl, kl_tolerance * float(mu.shape[-1]))
    kl_loss = tf.reduce_mean(kl)
    return r_loss + kl_loss, r_loss, kl_loss


def make_optimizer(lr: float = 1e-4, eps: float = 1e-8, mixed_precision: bool = False) -> keras.optimizers.Optimizer:
    """Adam as the authors (§2): constant lr 1e-4, ε 1e-8 (TF1's default; Keras' is 1e-7, §10.13), no clipping."""
    opt = keras.optimizers.Adam(learning_rate=lr, epsilon=eps)
    if mixed_precision and keras.mixed_precision.global_policy().name == "mixed_float16":
        opt = keras.optimizers.LossScaleOptimizer(opt)
    return opt


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
    core = tf.function(update, jit_compile=True) if jit_compile else update

    def replica_step(x, step):
        return core(x, sample_eps(seed, step, model.z_dim, tf.shape(x)[0]))

    @tf.function
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
    terms = tf.function(lambda x, eps: model.loss_terms(x, eps, kl_tolerance), jit_compile=True) if jit_compile else None

    @tf.function
    def eval_step(x, i):
        eps = sample_eps(seed + 1, i, model.z_dim, tf.shape(x)[0])  # outside XLA, as in the train step
        return terms(x, eps) if terms is not None else model.loss_terms(x, eps, kl_tolerance)

    return eval_step


def make_encoder(model: ConvVAE) -> Callable[[tf.Tensor], tuple[tf.Tensor, tf.Tensor]]:
    """A compiled `encode(x_uint8 (N, 64, 64, 3)) -> (mu, logvar)` for any N (one trace)."""
    return tf.function(model.encode, input_signature=[tf.TensorSpec((None,) + FRAME, tf.uint8)])


def load_vae(path: str | Path, z_dim: int) -> ConvVAE:
    """Build a ConvVAE(z_dim) and load `path` (a `.weights.h5`); WMError naming the file when it does not fit.

    A wrong z size, a corrupt or a missing file are all reported in one line with the expected and found shapes.
    """
    path = Path(path)
    if not path.exists():
        raise WMError(f"VAE weights {path} not found (run train-vae first)")
    model = ConvVAE(z_dim)
    try:
        import h5py

        with h5py.File(path, "r") as f:
            found: list[tuple[int, ...]] = []
            f.visititems(lambda n, o: found.append(tuple(o.shape)) if isinstance(o, h5py.Dataset) else None)
    except Exception as e:  # h5py raises OSError, KeyError, ValueError... on a damaged file
        raise WMError(f"VAE weights {path} are unreadable ({type(e).__name__}: {e})".splitlines()[0]) from None
    expected = [tuple(w.shape) for w in model.weights]
    if sorted(found) != sorted(expected):
        zs = sorted({s[-1] for s in found if len(s) == 2 and s[0] == 1024})
        raise WMError(
            f"VAE weights {path} do not fit ConvVAE(z_dim={z_dim}): file has {len(found)} arrays "
            f"(μ/logvar width {zs or '?'}), model expects {len(expected)} (width {z_dim}); "
            f"check vae.z_dim"
        )
    try:
        model.load_weights(str(path))
    except Exception as e:
        raise WMError(f"VAE weights {path} do not fit ConvVAE(z_dim={z_dim}): {e}".splitlines()[0]) from None
    return model
