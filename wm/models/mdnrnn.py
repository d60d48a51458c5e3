"""M: the paper's MDN-RNN (paper settings §4), its loss and its training step, in Keras 3 + TFP.

Keras mapping of the authors' cell (`LayerNormBasicLSTMCell`, layer norm off, forget_bias 1.0):
the kernel on [x, h] ((in + H), 4H) kept as two variables, `lstm_kernel_x` (rows of x) and `lstm_kernel_h` (rows
of h) so the loops never slice a variable, one bias (4H), gates in TF1 order (i, j, f, o), and a **constant** +1
added to the forget pre-activation inside the cell (not a trainable initial value as Keras' `unit_forget_bias`).
The authors' `rnn.json` kernel (291, 1024) loads as rows [:in] → x, [in:] → h (§4 "Variable order"). Every
weight uses glorot-uniform (TF1 `get_variable` default, biases included, §10.13).

Doom (`predict_done=True`) adds the restart flag as a 66th input; when it is > 0.5 the state (c, h) is zeroed
before the step (§4, §10.10), and the head's column 0 is the done logit. An optional reward head
(`predict_reward`, off in the paper presets; the authors' M predicts no reward) takes the next column: the reward
of the input step's action (row t of an episode). The head's other columns are the MDN:
rows of 15 per latent dimension, dimension-major, [5 log-mix | 5 μ | 5 log σ] (§4 "MDN output layout").
Counts: Car (z 32, A 3, H 256) 422,368; Doom (z 64, A 1, H 512, done) 1,678,785 (§9).

The head returns plain tensors (`MDNOutput`); the TFP mixtures are built only in `wm.models.mixture`.

Dropout (`mdnrnn.dropout` p, off in the paper presets; Dropout's Dream Land, anchors_2026.md): the latent part of
the input (not the action or restart flag) and the previous h entering the recurrent matmul are multiplied by
fixed masks (keep with probability 1 − p, scaled by 1/(1 − p)): one mask per sequence row while training (drawn
from the step counter, so a resume draws the same), one per dream episode in the dream (`wm.rollouts.dream`), none in the
real env. It needs the custom cell (`auto` picks it; cuDNN has no per-row recurrent mask).

`lstm` picks how a teacher-forced sequence runs (`mdnrnn.lstm`; the one-step `step` of the dream and the agents is
the cell either way): `custom` is the cell in a `tf.scan`; `keras` is `keras.layers.LSTM` with the defaults that keep
it cuDNN-eligible on a GPU (tanh, sigmoid, no recurrent dropout, not unrolled, bias), run on a **view** of the same
variables: Keras' gate order (i, f, c, o) and the +1 folded into its forget bias (`keras_layout`), an exact
re-parametrisation, so weights, checkpoints and parameter counts are the custom ones whichever runs. A Doom
restart zeroes the state inside a chunk, which cuDNN cannot do mid-sequence: `restart_segments` cuts every row at
its restarts into segments, runs them as one right-padded batch (zero initial state where a restart begins one,
the carried state where a row's first segment continues it) and puts the outputs back. `auto`: `keras` when TF
sees a GPU (cuDNN), else `custom` (faster on CPU: bench/mdnrnn_lstm.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import keras
import numpy as np
from keras import ops

from wm.core.bounded import check_h5, read_json
from wm.core.errors import WMError
from wm.models import mixture


class MDNOutput(NamedTuple):
    """Head outputs for (..., ) steps: logmix/mu/logstd (..., z, K); done_logit (...) or None without done."""

    logmix: object
    mu: object
    logstd: object
    done_logit: object | None
    reward: object | None = None  # (...) predicted reward of the step, with a reward head


LSTM_IMPLS = ("custom", "keras", "auto")


def resolve_lstm(name: str) -> str:
    """`mdnrnn.lstm` → the implementation that runs: `auto` is `keras` when the backend is TensorFlow and it sees a
    GPU (cuDNN), else `custom`. `keras` is TensorFlow's path only (`wm.models.lstm_cudnn`)."""
    if name not in LSTM_IMPLS:
        raise WMError(f"mdnrnn.lstm must be one of {', '.join(LSTM_IMPLS)}, got {name!r}")
    on_tf = keras.backend.backend() == "tensorflow"
    if name == "keras" and not on_tf:
        backend = keras.backend.backend()
        raise WMError(f"mdnrnn.lstm keras is TensorFlow's cuDNN path; on the {backend} backend use custom or auto")
    if name == "auto":
        if not on_tf:
            return "custom"
        from wm.models.lstm_cudnn import sees_gpu

        return "keras" if sees_gpu() else "custom"
    return name


def _swap_middle_gates(w, H: int):
    """Swap the 2nd and 3rd gate blocks of the last axis: (i, j, f, o) ↔ (i, f, c=j, o). Self-inverse; NumPy arrays
    or tensors (differentiable)."""
    cat = np.concatenate if isinstance(w, np.ndarray) else ops.concatenate
    return cat([w[..., :H], w[..., 2 * H : 3 * H], w[..., H : 2 * H], w[..., 3 * H :]], -1)


def _forget_one(H: int) -> np.ndarray:
    """The custom cell's constant +1 on the forget gate, in Keras' gate order (i, f, c, o)."""
    return np.concatenate([np.zeros(H), np.ones(H), np.zeros(2 * H)]).astype(np.float32)


def keras_layout(kernel_x, kernel_h, bias):
    """The custom cell's (kernel_x, kernel_h, bias) in `keras.layers.LSTM`'s layout (kernel, recurrent_kernel, bias):
    gate blocks (i, j, f, o) → (i, f, c=j, o), and the constant +1 moved into the forget bias. Works on NumPy arrays
    and tensors (differentiable)."""
    H = kernel_h.shape[0]
    return _swap_middle_gates(kernel_x, H), _swap_middle_gates(kernel_h, H), _swap_middle_gates(bias, H) + _forget_one(H)


def from_keras_layout(kernel, recurrent_kernel, bias):
    """The inverse of `keras_layout`: a `keras.layers.LSTM`'s weights as the custom cell's (kernel_x, kernel_h, bias)."""
    kernel, recurrent_kernel, bias = (np.asarray(w, np.float32) for w in (kernel, recurrent_kernel, bias))
    H = recurrent_kernel.shape[0]
    return tuple(_swap_middle_gates(w, H) for w in (kernel, recurrent_kernel, bias - _forget_one(H)))


class _Hidden:
    """Holds a layer where Keras' saving walk does not look (not a Keras object, not a container)."""

    __slots__ = ("layer",)

    def __init__(self, layer):
        self.layer = layer


class MDNRNN(keras.Model):
    """LSTM (+1 constant forget bias) with a per-dimension MDN head and, for Doom, restart input and done logit."""

    def __init__(
        self,
        z_dim: int,
        action_dim: int,
        hidden: int,
        num_mixtures: int = 5,
        predict_done: bool = False,
        lstm: str = "custom",
        dropout: float = 0.0,
        predict_reward: bool = False,
        **kw,
    ):
        super().__init__(**kw)
        self.dropout = float(dropout)
        if not 0.0 <= self.dropout < 1.0:
            raise WMError(f"mdnrnn.dropout must be in [0, 1), got {dropout}")
        self.z_dim, self.action_dim, self.hidden = int(z_dim), int(action_dim), int(hidden)
        self.num_mixtures, self.predict_done = int(num_mixtures), bool(predict_done)
        self.predict_reward = bool(predict_reward)
        self.input_dim = self.z_dim + self.action_dim + (1 if self.predict_done else 0)
        self.n_extra = int(self.predict_done) + int(self.predict_reward)  # done, reward columns before the MDN
        self.output_dim = self.z_dim * 3 * self.num_mixtures + self.n_extra
        init = keras.initializers.GlorotUniform
        # glorot limits of the authors' single ((in + H), 4H) kernel, applied to both row blocks
        lim = np.sqrt(6.0 / (self.input_dim + self.hidden + 4 * self.hidden))
        init_k = keras.initializers.RandomUniform(-lim, lim)
        self.lstm_kernel_x = self.add_weight(shape=(self.input_dim, 4 * self.hidden), initializer=init_k, name="lstm_kernel_x")
        self.lstm_kernel_h = self.add_weight(shape=(self.hidden, 4 * self.hidden), initializer=init_k, name="lstm_kernel_h")
        self.lstm_bias = self.add_weight(shape=(4 * self.hidden,), initializer=init(), name="lstm_bias")
        self.out_kernel = self.add_weight(shape=(self.hidden, self.output_dim), initializer=init(), name="out_kernel")
        self.out_bias = self.add_weight(shape=(self.output_dim,), initializer=init(), name="out_bias")
        self.built = True
        self.set_lstm(lstm)

    def set_lstm(self, name: str) -> None:
        """Run sequences with `name` (`custom | keras | auto`, see the module docstring); the weights stay the same."""
        if self.dropout > 0 and name == "keras":
            raise WMError("mdnrnn.lstm keras cannot apply mdnrnn.dropout (per-row recurrent masks): use custom or auto")
        self.lstm_impl = "custom" if self.dropout > 0 else resolve_lstm(name)
        # out of Keras' sight (neither tracked nor walked when saving): the layer holds no weights, and the files
        # written stay exactly the custom ones
        layer = None
        if self.lstm_impl == "keras":
            from wm.models.lstm_cudnn import KerasLSTM

            layer = KerasLSTM(self.hidden)
        object.__setattr__(self, "_keras_lstm", _Hidden(layer))

    def config_dict(self) -> dict:
        return {
            "z_dim": self.z_dim,
            "action_dim": self.action_dim,
            "hidden": self.hidden,
            "num_mixtures": self.num_mixtures,
            "predict_done": self.predict_done,
            **({"predict_reward": True} if self.predict_reward else {}),
        }

    # ------------------------------------------------------------------ cell and head
    def initial_state(self, batch):
        """Zero (c, h) for `batch` sequences."""
        zeros = ops.zeros((batch, self.hidden), "float32")
        return zeros, zeros

    def _inputs(self, z, a, restart):
        parts = [ops.cast(z, "float32"), ops.cast(a, "float32")]
        if self.predict_done:
            if restart is None:
                raise ValueError("predict_done model needs the restart flag")
            parts.append(ops.cast(restart, "float32")[..., None])
        return ops.concatenate(parts, axis=-1)

    def dropout_masks(self, u_z, u_h):
        """Inverted-dropout masks from uniforms (B, z) and (B, H): 1/(1 − p) where u ≥ p, else 0."""
        keep = 1.0 / (1.0 - self.dropout)
        return (
            ops.cast(ops.greater_equal(u_z, self.dropout), "float32") * keep,
            ops.cast(ops.greater_equal(u_h, self.dropout), "float32") * keep,
        )

    def _cell(self, xw, c, h, mask_h=None):
        """One LSTM step given the input projection xw = x·W_x + b (TF1 gate order i, j, f, o; f gets +1); `mask_h`
        (dropout) multiplies the h entering the recurrent matmul only."""
        gates = xw + ops.matmul(h if mask_h is None else h * mask_h, self.lstm_kernel_h)
        i, j, f, o = ops.split(gates, 4, axis=-1)
        c = c * ops.sigmoid(f + 1.0) + ops.sigmoid(i) * ops.tanh(j)
        h = ops.tanh(c) * ops.sigmoid(o)
        return c, h

    def _keep(self, restart):
        """1 where the restart flag is ≤ 0.5, 0 where it zeroes the state (§4)."""
        return 1.0 - ops.cast(ops.greater(ops.cast(restart, "float32"), 0.5), "float32")

    def head(self, h) -> MDNOutput:
        """Head on LSTM outputs h (..., H): the per-dimension mixture parameters and the done logit."""
        out = (
            ops.matmul(h, self.out_kernel) + self.out_bias
            if len(h.shape) == 2
            else ops.tensordot(h, self.out_kernel, 1) + self.out_bias
        )
        done = reward = None
        if self.predict_done:
            done, out = out[..., 0], out[..., 1:]
        if self.predict_reward:
            reward, out = out[..., 0], out[..., 1:]
        lead = tuple(ops.shape(out)[:-1])
        k = self.num_mixtures
        rows = ops.reshape(out, (*lead, self.z_dim, 3 * k))
        logits, mu, logstd = rows[..., :k], rows[..., k : 2 * k], rows[..., 2 * k :]
        return MDNOutput(_log_softmax_small(logits), mu, logstd, done, reward)

    def step(self, z, a, state, restart=None, masks=None):
        """One step for a batch: (z (B, z), a (B, A), (c, h), restart (B,)) → (MDNOutput, (c, h)); `masks` (dropout,
        `dropout_masks`) for z and the recurrent h."""
        c, h = state
        if self.predict_done:
            keep = self._keep(restart)[:, None]
            c, h = c * keep, h * keep  # restart zeroes the state before the step (§4)
        if masks is not None:
            z = ops.cast(z, "float32") * masks[0]
        xw = ops.matmul(self._inputs(z, a, restart), self.lstm_kernel_x) + self.lstm_bias
        c, h = self._cell(xw, c, h, None if masks is None else masks[1])
        return self.head(h), (c, h)

    def call(self, z, a, restart=None, state=None, training=False, masks=None):
        """Teacher-forced sequence: z (B, T, z), a (B, T, A), restart (B, T) → (MDNOutput (B, T, ...), (c, h)).

        The input projection of all T steps is one matmul; only h·W_h runs in the loop (`keras.ops.scan`). `masks`:
        dropout masks (B, z), (B, H) fixed over the sequence (custom cell only).
        """
        c0, h0 = self.initial_state(ops.shape(z)[0]) if state is None else state
        if masks is not None:
            if self._keras_lstm.layer is not None:
                raise WMError("dropout masks need the custom cell (mdnrnn.lstm custom or auto)")
            z = ops.cast(z, "float32") * masks[0][:, None, :]
        mask_h = None if masks is None else masks[1]
        x = self._inputs(z, a, restart)
        if self._keras_lstm.layer is not None:
            from wm.models.lstm_cudnn import run_keras_lstm

            view = keras_layout(self.lstm_kernel_x, self.lstm_kernel_h, self.lstm_bias)
            hs, (c, h) = run_keras_lstm(self._keras_lstm.layer, view, x, c0, h0, restart, self.predict_done)
            return self.head(hs), (c, h)
        xw_t = ops.transpose(ops.tensordot(x, self.lstm_kernel_x, 1) + self.lstm_bias, [1, 0, 2])  # (T, B, 4H)
        # the per-step outputs repeat the carry: Keras' TensorFlow scan requires them to have its structure
        if self.predict_done:
            keep_t = ops.transpose(self._keep(restart))[..., None]  # (T, B, 1)

            def body(carry, inp):
                state = self._cell(inp[0], carry[0] * inp[1], carry[1] * inp[1], mask_h)
                return state, state

            (c, h), (_, hs) = ops.scan(body, (c0, h0), (xw_t, keep_t))
        else:

            def body(carry, xw_s):
                state = self._cell(xw_s, carry[0], carry[1], mask_h)
                return state, state

            (c, h), (_, hs) = ops.scan(body, (c0, h0), xw_t)
        return self.head(ops.transpose(hs, [1, 0, 2])), (c, h)

    # ------------------------------------------------------------------ loss
    def loss_terms(
        self,
        out: MDNOutput,
        z_target,
        z_mask=None,
        done_target=None,
        done_mask=None,
        done_weight: float = 10.0,
        reward_target=None,
        reward_weight: float = 1.0,
    ):
        """(total, nll, done_loss, reward_loss): mixture NLL (mean over unmasked batch·time·dims) + weighted done BCE
        (§4) + `reward_weight` × the reward head's squared error on the steps `done_mask` keeps (every real input
        step)."""
        nll = mixture.mixture_nll(out.logmix, out.mu, out.logstd, z_target, z_mask)
        done_loss = ops.zeros((), "float32")
        if self.predict_done and done_target is not None:
            done_loss = mixture.weighted_done_loss(out.done_logit, done_target, done_mask, done_weight)
        r_loss = ops.zeros((), "float32")
        if self.predict_reward and reward_target is not None:
            r_loss = mixture.reward_loss(out.reward, reward_target, done_mask)
        return nll + done_loss + reward_weight * r_loss, nll, done_loss, r_loss

    def batch_losses(self, batch, state, masks=None, done_weight: float = 10.0, reward_weight: float = 1.0):
        """A training batch's teacher-forced pass and losses: ((total, nll, done_loss, reward_loss), final (c, h)).

        Batch keys: z (B, L+1, z), action (B, L, A), z_mask (B, L), and restart, done_target, done_mask, reward where
        the heads need them; inputs are frames [:, :L], targets frames [:, 1:] (teacher forcing, shift 1, §4). Both
        backends' training steps call it.
        """
        z = batch["z"]
        out, final = self(z[:, :-1], batch["action"], batch.get("restart"), state=state, training=True, masks=masks)
        terms = self.loss_terms(
            out,
            z[:, 1:],
            batch["z_mask"],
            batch.get("done_target"),
            batch.get("done_mask"),
            done_weight,
            batch.get("reward"),
            reward_weight,
        )
        return terms, final


def _log_softmax_small(x):
    """log-softmax over a short last axis, unrolled: `tf.nn.log_softmax` over K = 5 costs ~4 ms per dream step
    at batch 1024 on CPU, several times this (same values, tested)."""
    m = x[..., 0]
    for j in range(1, x.shape[-1]):
        m = ops.maximum(m, x[..., j])
    m = ops.stop_gradient(m)[..., None]
    return x - m - ops.log(ops.sum(ops.exp(x - m), axis=-1, keepdims=True))


def lr_at(step, lr: float, lr_min: float, decay: float):
    """The authors' schedule (§4): (lr − lr_min)·decay^step + lr_min (decay 1.0 = constant)."""
    if keras.backend.backend() == "tensorflow":
        # float64: 0.99999 is 0.9999899864 in float32, 3e-4 off after 24,400 steps
        import tensorflow as tf

        return tf.cast((lr - lr_min) * tf.constant(decay, tf.float64) ** tf.cast(step, tf.float64) + lr_min, tf.float32)
    # JAX computes in float32 unless x64 is on: decay^step as exp(step·log decay), log decay taken in float64 here,
    # is within 2e-8 of the float64 value after 24,400 steps (tests/test_backends.py)
    return (lr - lr_min) * ops.exp(ops.cast(step, "float32") * float(np.log(decay))) + lr_min


def lr_value(step: int, lr: float, lr_min: float, decay: float) -> float:
    """`lr_at` in NumPy (the same float64 arithmetic, then float32): the logged learning rate without a TF op."""
    return float(np.float32((lr - lr_min) * np.float64(decay) ** int(step) + lr_min))


class DecayingLR(keras.optimizers.schedules.LearningRateSchedule):
    """`lr_at` as a Keras schedule, so the optimizer's own iteration counter drives it (resumes with it)."""

    def __init__(self, lr: float, lr_min: float, decay: float):
        self.lr, self.lr_min, self.decay = float(lr), float(lr_min), float(decay)

    def __call__(self, step):
        return lr_at(step, self.lr, self.lr_min, self.decay)

    def get_config(self):
        return {"lr": self.lr, "lr_min": self.lr_min, "decay": self.decay}


def make_optimizer(
    lr: float, lr_min: float, decay: float, adam_eps: float = 1e-8, clip: float = 1.0
) -> keras.optimizers.Optimizer:
    """Adam with ε 1e-8 and elementwise clip-by-value (§4, §10.13), on the decaying schedule."""
    return keras.optimizers.Adam(learning_rate=DecayingLR(lr, lr_min, decay), epsilon=adam_eps, clipvalue=clip)


def save_config(model: MDNRNN, path: str | Path) -> None:
    from wm.core.atomic import atomic_write_json

    atomic_write_json(path, model.config_dict())


def config_path(weights: str | Path) -> Path:
    """The sizes file that travels with M's weights (`model.json` beside them), read by `load_mdnrnn`."""
    return Path(weights).with_name("model.json")


def load_mdnrnn(
    path: str | Path,
    z_dim: int | None = None,
    action_dim: int | None = None,
    hidden: int | None = None,
    num_mixtures: int | None = None,
    predict_done: bool | None = None,
    dropout: float = 0.0,
    predict_reward: bool | None = None,
) -> MDNRNN:
    """Build M and load `path` (a `.weights.h5`); sizes default to the `model.json` next to it. `dropout` is the
    rate the dream applies (`mdnrnn.dropout`), not part of the weights.

    Raises WMError if the file is missing or its shapes do not fit the requested sizes.
    """
    path = Path(path)
    if not path.exists():
        raise WMError(f"M weights not found: {path} (run train-mdnrnn first)")
    meta_path = config_path(path)
    check_h5(path)  # no external storage or links: loading reads only this file
    stored = read_json(meta_path) if meta_path.exists() else {}
    if not isinstance(stored, dict):
        raise WMError(f"{meta_path} is not a mapping of M's sizes")
    meta = {"num_mixtures": 5, **stored}
    dims = {
        "z_dim": z_dim,
        "action_dim": action_dim,
        "hidden": hidden,
        "num_mixtures": num_mixtures,
        "predict_done": predict_done,
    }
    for k, v in dims.items():
        if v is None:
            if k not in meta:
                raise WMError(f"load_mdnrnn: {k} not given and no {meta_path}")
            dims[k] = meta[k]
    if predict_reward is None:
        predict_reward = bool(meta.get("predict_reward", False))
    model = MDNRNN(**dims, dropout=dropout, predict_reward=predict_reward)
    try:
        model.load_weights(str(path))
    except (ValueError, KeyError, OSError) as e:
        raise WMError(f"{path}: weights do not fit M {dims} ({str(e).splitlines()[0][:200]})") from None
    return model
