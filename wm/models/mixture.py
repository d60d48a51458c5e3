"""M's losses on any Keras 3 backend: the mixture NLL, the done loss and the reward loss (paper settings §4).

M's head returns plain tensors: per latent dimension K log-mix weights (log-softmaxed), K means and K log-stds
(§4: factorised, one mixture per dimension, log-std not clamped). `mixture_nll` is −log Σ_k π_k N(z; μ_k, σ_k),
averaged over the unmasked (batch · time · dims) entries (§4). On TensorFlow it is TFP's
`MixtureSameFamily(Categorical, Normal).log_prob` (`wm.models.mixture_tf`); on another backend it is the same
density written in `keras.ops` (`mixture_nll_ops`, a log-sum-exp over the K components). The two agree to float32
round-off (tests/test_backends.py); TFP's own JAX substrate is not used because TFP 0.25 (the release that matches
TF 2.21) does not import under current JAX (it reads `jax.interpreters.xla.pytype_aval_mappings`, which JAX removed).
"""

from __future__ import annotations

import math

import keras
from keras import ops

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _masked_mean(values, mask):
    """Mean of `values` over the entries `mask` keeps (a mask of one flag per step is broadcast over the last axis)."""
    if mask is None:
        return ops.mean(values)
    mask = ops.cast(mask, values.dtype)
    if len(mask.shape) == len(values.shape) - 1:
        mask = mask[..., None] * ops.ones_like(values)
    return ops.sum(values * mask) / ops.maximum(ops.sum(mask), 1.0)


def mixture_log_prob(logmix, mu, logstd, target):
    """log Σ_k π_k N(target; μ_k, σ_k) per entry (..., z), in `keras.ops` (the twin of TFP's `log_prob`)."""
    t = ops.cast(target, mu.dtype)[..., None]
    log_normal = -0.5 * ops.square((t - mu) * ops.exp(-logstd)) - logstd - _LOG_SQRT_2PI
    return ops.logsumexp(ops.log_softmax(logmix, axis=-1) + log_normal, axis=-1)


def mixture_nll_ops(logmix, mu, logstd, target, mask=None):
    """`mixture_nll` in `keras.ops` on every backend (the JAX backend's NLL; tested against TFP's)."""
    return _masked_mean(-mixture_log_prob(logmix, mu, logstd, target), mask)


def mixture_nll(logmix, mu, logstd, target, mask=None):
    """Mean negative log-likelihood of `target` (..., z) under the mixtures (..., z, K) over unmasked entries.

    `mask` has the shape of `target` without the last axis (one flag per step, e.g. padding) or the shape of
    `target`; the mean runs over batch · time · dims of the entries it keeps (§4, "z_cost").
    """
    if keras.backend.backend() != "tensorflow":
        return mixture_nll_ops(logmix, mu, logstd, target, mask)
    from wm.models.mixture_tf import mixture

    return _masked_mean(-mixture(logmix, mu, logstd).log_prob(target), mask)


def weighted_done_loss(done_logit, done_target, mask=None, pos_weight: float = 10.0):
    """Sigmoid cross-entropy of the done ("restart") logit with positives weighted ×`pos_weight`, mean over steps (§4).

    TF's `weighted_cross_entropy_with_logits` formula, op for op (the same float32 result on TensorFlow):
    (1 − t)·x + (1 + (w − 1)·t)·(log1p(e^−|x|) + max(−x, 0)).
    """
    x = done_logit
    t = ops.cast(done_target, x.dtype)
    ce = (1 - t) * x + (1 + (pos_weight - 1) * t) * (ops.log1p(ops.exp(-ops.abs(x))) + ops.relu(-x))
    return _masked_mean(ce, mask)


def reward_loss(pred, target, mask=None):
    """Squared error of the reward head, mean over unmasked steps."""
    return _masked_mean(ops.square(pred - ops.cast(target, pred.dtype)), mask)
