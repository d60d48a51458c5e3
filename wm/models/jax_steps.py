"""V's and M's compiled steps on JAX (`run.backend: jax`, docs/guide/backends.md).

The models and their losses are the backend-neutral ones (`wm.models.vae`, `wm.models.mdnrnn`, `wm.models.mixture`);
these are their training steps on the JAX backend, Keras 3's stateless pattern: the variables' values live as JAX
arrays between `jax.jit`-compiled steps (`StatelessScope` maps the model's variables onto them, the optimizer's
`stateless_apply` updates them), and `sync()` writes them back into the Keras variables before anything reads
those (a checkpoint, the weights file, a preview). A checkpoint restore or a warm start happens before a step is
made, which reads the variables once.

The noise is keyed as on TensorFlow but drawn by JAX's generator: V's ε from (seed, step), M's dropout masks from
(seed, the optimizer's step), so a resumed run replays the same noise; the numbers differ from TensorFlow's. The
TensorFlow twins are `wm.models.vae_tf` and `wm.models.mdnrnn_tf`. Nothing here imports TensorFlow.
"""

from __future__ import annotations

import jax
import keras


class _Stateless:
    """A model's and its optimizer's variable values as JAX arrays, carried from one compiled step to the next."""

    def __init__(self, model, optimizer=None):
        if optimizer is not None and not optimizer.built:
            optimizer.build(model.trainable_variables)
        self.model, self.optimizer = model, optimizer
        self.trainable = [v.value for v in model.trainable_variables]
        self.fixed = [v.value for v in model.non_trainable_variables]
        self.opt = [v.value for v in optimizer.variables] if optimizer is not None else []

    def scope(self, trainable, fixed):
        """The `StatelessScope` that makes the model's variables read `trainable` and `fixed` inside a trace."""
        mapping = list(zip(self.model.trainable_variables, trainable, strict=True))
        mapping += list(zip(self.model.non_trainable_variables, fixed, strict=True))
        return keras.StatelessScope(state_mapping=mapping)

    def sync(self) -> None:
        """Write the carried values back into the Keras variables (before a checkpoint or a weights file)."""
        for v, a in zip(self.model.trainable_variables, self.trainable, strict=True):
            v.assign(a)
        if self.optimizer is not None:
            for v, a in zip(self.optimizer.variables, self.opt, strict=True):
                v.assign(a)


class VAESteps:
    """V's train step `train(x_uint8, step) -> (loss, recon, kl)` and eval step `evaluate(x_uint8, i)`, on JAX.

    ε for training step `step` is normal(fold_in(key(seed), step)); the eval noise is keyed by (seed + 1, batch
    index), fixed per batch so that epochs compare, as on TensorFlow.
    """

    def __init__(self, model, optimizer, kl_tolerance: float, seed: int):
        self.state = _Stateless(model, optimizer)
        self.model, self.optimizer = model, optimizer
        self.kl_tolerance = float(kl_tolerance)
        self._train_key, self._eval_key = jax.random.key(int(seed)), jax.random.key(int(seed) + 1)
        self._grad = jax.value_and_grad(self._loss, has_aux=True)
        self._train = jax.jit(self._train_fn)
        self._eval = jax.jit(self._eval_fn)

    def _loss(self, trainable, fixed, x, eps):
        with self.state.scope(trainable, fixed):
            loss, recon, kl = self.model.loss_terms(x, eps, self.kl_tolerance)
        return loss, (recon, kl)

    def _noise(self, key, i, n):
        return jax.random.normal(jax.random.fold_in(key, i), (n, self.model.z_dim))

    def _train_fn(self, trainable, fixed, opt, x, step):
        (loss, (recon, kl)), grads = self._grad(trainable, fixed, x, self._noise(self._train_key, step, x.shape[0]))
        trainable, opt = self.optimizer.stateless_apply(opt, grads, trainable)
        return trainable, opt, loss, recon, kl

    def _eval_fn(self, trainable, fixed, x, i):
        loss, (recon, kl) = self._loss(trainable, fixed, x, self._noise(self._eval_key, i, x.shape[0]))
        return loss, recon, kl

    def train(self, x, step: int):
        s = self.state
        s.trainable, s.opt, loss, recon, kl = self._train(s.trainable, s.fixed, s.opt, x, step)
        return loss, recon, kl

    def evaluate(self, x, i: int):
        return self._eval(self.state.trainable, self.state.fixed, x, i)

    def sync(self) -> None:
        self.state.sync()


class MDNRNNSteps:
    """M's train step `train(batch, (c, h)) -> (nll, done_loss, reward_loss, final (c, h))`, on JAX.

    The batch dict is `wm.models.mdnrnn_tf.make_train_step`'s (NumPy arrays do): inputs frames [:, :L], targets
    frames [:, 1:] (teacher forcing, §4). With `model.dropout`, each row's masks come from (seed, the optimizer's
    step).
    """

    def __init__(self, model, optimizer, done_weight: float = 10.0, seed: int = 0, reward_weight: float = 1.0):
        self.state = _Stateless(model, optimizer)
        self.model, self.optimizer = model, optimizer
        self.done_weight, self.reward_weight = float(done_weight), float(reward_weight)
        self._key = jax.random.key(int(seed))
        self._it = next(i for i, v in enumerate(optimizer.variables) if v is optimizer.iterations)
        self._grad = jax.value_and_grad(self._loss, has_aux=True)
        self._train = jax.jit(self._train_fn)

    def _masks(self, opt, b):
        m = self.model
        if m.dropout <= 0:
            return None
        key_z, key_h = jax.random.split(jax.random.fold_in(self._key, opt[self._it]))
        return m.dropout_masks(jax.random.uniform(key_z, (b, m.z_dim)), jax.random.uniform(key_h, (b, m.hidden)))

    def _loss(self, trainable, fixed, batch, state, masks):
        with self.state.scope(trainable, fixed):
            terms, final = self.model.batch_losses(batch, state, masks, self.done_weight, self.reward_weight)
        total, nll, done_loss, r_loss = terms
        return total, (nll, done_loss, r_loss, final)

    def _train_fn(self, trainable, fixed, opt, batch, state):
        masks = self._masks(opt, batch["z"].shape[0])
        (_, (nll, done_loss, r_loss, final)), grads = self._grad(trainable, fixed, batch, state, masks)
        trainable, opt = self.optimizer.stateless_apply(opt, grads, trainable)
        return trainable, opt, nll, done_loss, r_loss, final

    def train(self, batch, state):
        s = self.state
        s.trainable, s.opt, nll, done_loss, r_loss, final = self._train(s.trainable, s.fixed, s.opt, batch, tuple(state))
        return nll, done_loss, r_loss, final

    def sync(self) -> None:
        self.state.sync()
