"""The mixture on TensorFlow: the TFP distributions of M's head and the dream's sampler (paper settings §4).

* `mixture`: `MixtureSameFamily(Categorical(logits), Normal(mu, sigma))` with batch shape [..., z_dim] (§10.13),
  whose `log_prob` is M's NLL on the TensorFlow backend (`wm.models.mixture.mixture_nll`);
* `tempered`: the dream's distribution of §4 — `Categorical(logits / τ)`, `Normal(μ, σ·√τ)` (§10.13);
* `sample_mixture`: one draw from `tempered` as the authors draw it — one component per dimension picked by
  inverse CDF of a uniform, then μ_k + σ_k·√τ·ε — written out in plain ops for the dream's inner loop (a tested
  twin of `tempered`; TFP's softmax/cumsum over K = 5 cost more than the rest of the step). The uniforms and
  normals come from the caller, so the dream keys them by (episode seed, step) and an episode never depends
  on the batch it runs in.

The dream kernel runs on TensorFlow whatever backend trained M (docs/guide/backends.md), so these stay TF. TFP is
imported by the two functions that build its distributions, not with the module: the dream (C's training, the dream's
checks and evaluations, play) samples with `sample_mixture` alone and starts ≈ 1.2 s of CPU sooner without it.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import tensorflow as tf

from wm.core.imports import long_lived

if TYPE_CHECKING:
    from tensorflow_probability import distributions as tfd


@functools.cache
def _distributions():
    # TFP's import (≈ 1.2 s), once, as TF's: its objects out of the garbage collector's walks (wm.core.imports)
    with long_lived():
        import tensorflow_probability as tfp

    return tfp.distributions


def mixture(logmix: tf.Tensor, mu: tf.Tensor, logstd: tf.Tensor) -> tfd.MixtureSameFamily:
    """The per-dimension Gaussian mixture with batch shape `logmix.shape[:-1]` (§4, §10.13)."""
    tfd = _distributions()
    return tfd.MixtureSameFamily(
        mixture_distribution=tfd.Categorical(logits=logmix),
        components_distribution=tfd.Normal(loc=mu, scale=tf.exp(logstd)),
    )


def tempered(logmix: tf.Tensor, mu: tf.Tensor, logstd: tf.Tensor, temperature: float | tf.Tensor) -> tfd.MixtureSameFamily:
    """The mixture at temperature τ exactly as the authors sample it (§4): logits/τ and σ·√τ."""
    tfd, tau = _distributions(), tf.cast(temperature, logmix.dtype)
    return tfd.MixtureSameFamily(
        mixture_distribution=tfd.Categorical(logits=logmix / tau),
        components_distribution=tfd.Normal(loc=mu, scale=tf.exp(logstd) * tf.sqrt(tau)),
    )


def sample_mixture(
    logmix: tf.Tensor, mu: tf.Tensor, logstd: tf.Tensor, temperature: float | tf.Tensor, uniform: tf.Tensor, normal: tf.Tensor
) -> tf.Tensor:
    """One draw per latent dimension from `tempered(...)` (the TFP distribution), from caller-supplied noise (§4).

    Args:
        logmix, mu, logstd: (..., z, K) head outputs.
        uniform: (..., z) in (0, 1), one per dimension, picks the component by inverse CDF of π' (as the authors).
        normal: (..., z) standard normal ε.
    Returns:
        z' = μ_k + σ_k·√τ·ε, shape (..., z).
    """
    # The parameters of `tempered(...)`, computed without a softmax/cumsum over the tiny K axis (those two ops
    # cost ~6 ms per dream step at batch 1024 on CPU, more than the rest of the sampler). The max over K is taken
    # off before exp (unrolled too: half the cost of reduce_max): logmix ≥ −log K alone does not save
    # exp(logmix / τ) from underflow (a near-uniform mixture at τ < 0.0155 underflows everywhere, and component 0
    # was always picked); after it the top weight is exactly 1 and the rest cannot overflow.
    tau = tf.cast(temperature, logmix.dtype)
    n_k = logmix.shape[-1]
    top = logmix[..., 0]
    for j in range(1, n_k):
        top = tf.maximum(top, logmix[..., j])
    w = tf.exp((logmix - top[..., None]) / tau)  # unnormalised π'
    cum, k = w[..., 0], tf.zeros_like(uniform, tf.int32)
    total = tf.reduce_sum(w, axis=-1)
    target = uniform * total
    for j in range(1, n_k):  # inverse CDF, unrolled over the K components
        k += tf.cast(cum < target, tf.int32)
        cum = cum + w[..., j]
    bd = k.shape.rank
    loc = tf.gather(mu, k, batch_dims=bd)
    scale = tf.exp(tf.gather(logstd, k, batch_dims=bd)) * tf.sqrt(tau)
    return loc + scale * normal
