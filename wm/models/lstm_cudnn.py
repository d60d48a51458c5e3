"""M's `mdnrnn.lstm keras` path: `keras.layers.LSTM` (cuDNN on a GPU) over M's own variables, TensorFlow only.

`wm.models.mdnrnn` holds the model and its custom cell in `keras.ops`; this module is the TensorFlow backend's
cuDNN-eligible twin of its teacher-forced loop (the mapping is in that module's docstring): a view cell over M's
variables in Keras' layout, and `restart_segments`, which runs a Doom batch with restarts inside its rows as
segments, since cuDNN cannot zero the state mid-sequence.
"""

from __future__ import annotations

import keras
import tensorflow as tf


def sees_gpu() -> bool:
    """Whether TensorFlow sees a GPU (where `mdnrnn.lstm auto` takes this path)."""
    return bool(tf.config.list_logical_devices("GPU"))


class ViewCell(keras.layers.LSTMCell):
    """Keras' LSTM cell without weights of its own: kernel, recurrent kernel and bias are the tensors in `view`, set
    by `run_keras_lstm` for each call (its variables in Keras' layout, so gradients reach them)."""

    view: tuple | None = None

    def build(self, input_shape):
        self.built = True

    kernel = property(lambda self: self.view[0])
    recurrent_kernel = property(lambda self: self.view[1])
    bias = property(lambda self: self.view[2])


class KerasLSTM(keras.layers.LSTM):
    """`keras.layers.LSTM` (cuDNN-eligible defaults; Keras picks cuDNN on a GPU) over a `ViewCell`."""

    def __init__(self, units: int):
        super().__init__(
            units,
            activation="tanh",
            recurrent_activation="sigmoid",
            use_bias=True,
            recurrent_dropout=0.0,
            unroll=False,
            return_sequences=True,
            return_state=True,
        )
        self.cell = ViewCell(units, name="lstm_cell")


def restart_segments(lstm, x: tf.Tensor, h0: tf.Tensor, c0: tf.Tensor, restart: tf.Tensor):
    """Run the sequence layer `lstm` ((xs, [h, c], mask) → (hs, h, c)) over x (B, T, D) from (h0, c0), with the
    state zeroed before every step whose restart flag is > 0.5 (§4), exactly, without a reset inside any sequence.

    Every row is cut at its restarts into segments; the segments form one batch (n, L, D) padded on the right
    (a right-padded mask: cuDNN's sequence lengths) whose initial state is zero, or the row's carried state for a
    row's first segment when no restart begins it. Returns hs (B, T, H) and each row's final (h, c) (those of its
    last segment).
    """
    shape = tf.shape(x)
    B, T, D = shape[0], shape[1], x.shape[-1]
    r = tf.cast(restart, tf.float32) > 0.5
    first = tf.sequence_mask(tf.ones([B], tf.int32), T)  # (B, T): t == 0
    start = tf.reshape(r | first, [-1])  # segment starts, row-major
    seg = tf.cumsum(tf.cast(start, tf.int32)) - 1  # the segment of every (b, t)
    t = tf.tile(tf.range(T), [B])
    start_t = tf.boolean_mask(t, start)  # (n,): where each segment begins
    n = tf.shape(start_t)[0]
    pos = t - tf.gather(start_t, seg)
    lengths = tf.math.unsorted_segment_sum(tf.ones_like(seg), seg, n)
    L = tf.reduce_max(lengths)
    idx = tf.stack([seg, pos], 1)
    xs = tf.scatter_nd(idx, tf.reshape(x, [-1, D]), tf.stack([n, L, D]))
    xs = tf.ensure_shape(xs, [None, None, D])
    row = tf.boolean_mask(tf.repeat(tf.range(B), T), start)
    carried = tf.cast(tf.boolean_mask(tf.reshape(first & ~r, [-1]), start), x.dtype)[:, None]
    hs, h, c = lstm(
        xs, initial_state=[tf.gather(h0, row) * carried, tf.gather(c0, row) * carried], mask=tf.sequence_mask(lengths, L)
    )
    last = tf.reshape(seg, tf.stack([B, T]))[:, -1]
    return tf.reshape(tf.gather_nd(hs, idx), tf.stack([B, T, -1])), tf.gather(h, last), tf.gather(c, last)


def run_keras_lstm(lstm, view, x, c0, h0, restart, predict_done: bool):
    """M's teacher-forced LSTM over inputs x (B, T, D) from (c0, h0) through `lstm` (a `KerasLSTM`) on `view`, M's
    variables in Keras' layout (`wm.models.mdnrnn.keras_layout`): (hs (B, T, H), (c, h))."""
    lstm.cell.view = view
    try:
        if predict_done:
            hs, h, c = restart_segments(lstm, x, h0, c0, restart)
        else:
            hs, h, c = lstm(x, initial_state=[h0, c0])
    finally:
        lstm.cell.view = None  # no tensor of this trace outlives it
    return hs, (c, h)
