"""M's compiled training step on TensorFlow (`run.backend: tensorflow`, the default).

The model, its loss and its schedule are backend-neutral (`wm.models.mdnrnn`); this is the `tf.function` that
trains it, with the dropout masks drawn statelessly from (seed, the optimizer's step). The JAX backend's twin is
`wm.models.jax_steps`.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from wm.models.mdnrnn import MDNRNN


def make_train_step(
    model: MDNRNN,
    optimizer: keras.optimizers.Optimizer,
    done_weight: float = 10.0,
    seed: int = 0,
    reward_weight: float = 1.0,
):
    """A compiled training step: batch dict + carried state → (nll, done_loss, reward_loss, final (c, h)).

    Batch keys: z (B, L+1, z) frames, action (B, L, A), restart (B, L), z_mask (B, L), done_target (B, L),
    done_mask (B, L), and reward (B, L) for a reward head. Inputs are frames [:, :L], targets frames [:, 1:]
    (teacher forcing, shift 1, §4); the reward target of input step t is the reward of its action.
    With `model.dropout`, each row gets masks drawn from (seed, the optimizer's step): a resume redraws them.
    """

    def masks(b):
        if model.dropout <= 0:
            return None
        s = tf.stack([tf.cast(seed, tf.int64), tf.cast(optimizer.iterations, tf.int64)])
        u_z = tf.random.stateless_uniform((b, model.z_dim), seed=s)
        u_h = tf.random.stateless_uniform((b, model.hidden), seed=s + tf.constant([0, 1 << 40], tf.int64))
        return model.dropout_masks(u_z, u_h)

    @tf.function(reduce_retracing=True, autograph=False)
    def train_step(batch, state):
        with tf.GradientTape() as tape:
            m = masks(tf.shape(batch["z"])[0])
            (total, nll, done_loss, r_loss), final = model.batch_losses(batch, state, m, done_weight, reward_weight)
        grads = tape.gradient(total, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return nll, done_loss, r_loss, final

    return train_step
