"""V: the paper's convolutional VAE and its loss (docs/paper-settings.md §2), on any Keras 3 backend.

Layers, loss and optimiser follow the authors' `vae/vae.py` exactly: four k4/s2 'valid' convs (32-64-128-256),
linear μ and logvar heads, a linear dense 1024 reshaped to 1×1×1024, deconvs k5,k5,k6,k6 (128-64-32-3), sigmoid
output. Totals: 4,348,547 parameters for z=32 (CarRacing) and 4,446,915 for z=64 (Doom), as in the paper's tables.

Loss (§2): summed squared error over the 64·64·3 pixels of an image, plus the KL of the image floored at
kl_tolerance·z (a floor on the *total* KL, not per-dimension free bits), both averaged over the batch. The decoder
is trained on a sampled z; the noise comes from the caller (the training steps draw it statelessly from
(seed, step), so a resumed run replays exactly the same noise as an uninterrupted one).

The model is written in `keras.ops` only, so it runs on whichever backend Keras runs (`run.backend`,
docs/guide/backends.md). The compiled training steps live with their backend: `wm.models.vae_tf` (TensorFlow:
graph or XLA, a MirroredStrategy) and `wm.models.jax_steps` (JAX).
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
from keras import ops  # noqa: E402

from wm.core.bounded import check_h5
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
    def to_float(x):
        """uint8 frames → float in [0, 1]; float frames pass through (cast to float32)."""
        x = ops.convert_to_tensor(x)
        if keras.backend.standardize_dtype(x.dtype) == "uint8":
            return ops.cast(x, "float32") / 255.0
        return ops.cast(x, "float32")

    def encode(self, x):
        """(mu, logvar), each float32 (N, z)."""
        h = self.encoder(self.to_float(x))
        return ops.cast(self.mu_head(h), "float32"), ops.cast(self.logvar_head(h), "float32")

    def decode(self, z):
        """float32 (N, 64, 64, 3) in [0, 1]."""
        return ops.cast(self.decoder(z), "float32")

    def call(self, x, training: bool = False):
        mu, _ = self.encode(x)
        return self.decode(mu)

    def loss_terms(self, x, eps, kl_tolerance: float):
        """(loss, recon, kl) of a batch, with z = μ + exp(logvar/2)·eps (§2 row 7); all float32."""
        x = self.to_float(x)
        mu, logvar = self.encode(x)
        z = mu + ops.exp(logvar / 2.0) * ops.cast(eps, "float32")
        return vae_loss(x, self.decode(z), mu, logvar, kl_tolerance)


def vae_loss(x, x_hat, mu, logvar, kl_tolerance: float):
    """The authors' loss (§2): (r_loss + kl_loss, r_loss, kl_loss), float32 scalars.

    r_loss = mean over the batch of Σ_pixels (x − x̂)²; kl_loss = mean over the batch of max(KL, kl_tolerance·z),
    KL = −½ Σ_dims (1 + logvar − μ² − e^logvar). Below the floor the KL gradient is zero, as in the authors' code.
    """
    x, x_hat = ops.cast(x, "float32"), ops.cast(x_hat, "float32")
    mu, logvar = ops.cast(mu, "float32"), ops.cast(logvar, "float32")
    r_loss = ops.mean(ops.sum(ops.square(x - x_hat), axis=[1, 2, 3]))
    kl = -0.5 * ops.sum(1.0 + logvar - ops.square(mu) - ops.exp(logvar), axis=1)
    kl = ops.maximum(kl, kl_tolerance * float(mu.shape[-1]))
    kl_loss = ops.mean(kl)
    return r_loss + kl_loss, r_loss, kl_loss


def make_optimizer(lr: float = 1e-4, eps: float = 1e-8, mixed_precision: bool = False) -> keras.optimizers.Optimizer:
    """Adam as the authors (§2): constant lr 1e-4, ε 1e-8 (TF1's default; Keras' is 1e-7, §10.13), no clipping."""
    opt = keras.optimizers.Adam(learning_rate=lr, epsilon=eps)
    if mixed_precision and keras.mixed_precision.global_policy().name == "mixed_float16":
        opt = keras.optimizers.LossScaleOptimizer(opt)
    return opt


def load_vae(path: str | Path, z_dim: int) -> ConvVAE:
    """Build a ConvVAE(z_dim) and load `path` (a `.weights.h5`); WMError naming the file when it does not fit.

    A wrong z size, a corrupt or a missing file are all reported in one line with the expected and found shapes.
    """
    path = Path(path)
    if not path.exists():
        raise WMError(f"VAE weights {path} not found (run train-vae first)")
    check_h5(path)  # no external storage or links: loading reads only this file
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
