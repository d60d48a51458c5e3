"""C: the paper's linear (or one-hidden-layer) controller on flat parameter vectors (paper settings §6).

Modes (authors' `rnn.py`): "zch" [z, c, h], "zc" [z, c], "z" [z], "z_hidden" [z] → 40 tanh units → A, "zh" [z, h].
Flat-vector layouts (`wm.envs.setup.controller_layout`, where a config's count is read without building C), exactly
the authors' (so their `.best.json` vectors load as they are):

* linear with bias (Car, ZH): params[0:A] = b, params[A:] = W row-major (in, A); a = tanh(xW + b) → 867;
* linear without bias (Doom, ZCH): params = W row-major (in, A); a = tanh(xW) → 1088;
* z_hidden: b_hidden (U), W_hidden (z, U), b_out (A), W_out (U, A) → 1443 with bias (biases dropped when bias=False).

`act` (NumPy) and `act_tf` (TF, for the dream graph) share one layout and accept either one vector (n,) for
every row or one vector per row (B, n) for inputs (B, ...). `car_action` is the CarRacing post-processing
(steer, (a+1)/2, clip(a, 0, 1)) that the authors feed to both the env and M (§6).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wm.envs import JOYSTICK_THRESHOLD, post_action
from wm.envs.setup import Setup, controller_layout


class Controller:
    """Flat-vector controller of one mode; holds only sizes and the layout, the parameters are passed in."""

    def __init__(
        self,
        mode: str,
        z_dim: int,
        hidden: int,
        action_dim: int,
        bias: bool,
        hidden_units: int = 40,
        car_actions: bool | None = None,
        post: str | None = None,
        z_input: str = "sampled",
    ):
        # `wm.envs.setup`'s layout, which a config's parameter count is read from; it refuses an unknown mode
        layout = controller_layout(mode, z_dim, hidden, action_dim, bias, hidden_units, z_input)
        self.mode, self.z_dim, self.hidden, self.action_dim = layout.mode, int(z_dim), int(hidden), int(action_dim)
        self.bias, self.hidden_units = bool(bias), int(hidden_units)
        # CarRacing's 3-d action gets the authors' post-processing; Doom's 1-d action goes to M as is (§6); a discrete
        # gym env's choice goes to M one-hot (`post`, `wm.envs.action_post`)
        if post is None:
            post = "car" if (self.action_dim == 3 if car_actions is None else bool(car_actions)) else "none"
        self.post = post
        self.car_actions = post == "car"
        self.inputs, self.input_dim, self.layout = layout.inputs, layout.input_dim, list(layout.pieces)
        self.n_params = layout.n_params
        # V's μ instead of a sampled z, for C and M alike (`controller.z_input`; the agent step, `wm.rollouts.rollout`)
        self.z_input = layout.z_input

    @classmethod
    def from_setup(cls, facts: Setup) -> Controller:
        """The controller of a resolved setup (`wm.envs.setup`): its layout, sizes and action post-processing."""
        layout = facts.controller
        return cls(
            layout.mode,
            facts.z_dim,
            facts.hidden,
            facts.action_dim,
            layout.bias,
            layout.hidden_units,
            post=facts.post,
            z_input=layout.z_input,
        )

    def __repr__(self) -> str:
        return f"Controller({self.mode}, in={self.input_dim}, A={self.action_dim}, bias={self.bias}, n={self.n_params})"

    # ------------------------------------------------------------------ layout
    def split(self, params, xp=np) -> dict[str, Any]:
        """Flat params (n,) or (B, n) → named pieces, each (…, *shape) row-major (NumPy or TF via `xp`)."""
        out, off = {}, 0
        for name, shape in self.layout:
            size = int(np.prod(shape))
            piece = params[..., off : off + size]
            lead = list(params.shape[:-1]) if xp is np else _tf_lead(params)
            out[name] = xp.reshape(piece, lead + list(shape))
            off += size
        return out

    def features(self, z, c=None, h=None, xp=np):
        parts = {"z": z, "c": c, "h": h}
        missing = [k for k in self.inputs if parts[k] is None]
        if missing:
            raise ValueError(f"controller mode {self.mode} needs {missing}")
        return (
            xp.concat([parts[k] for k in self.inputs], axis=-1)
            if xp is not np
            else np.concatenate([np.asarray(parts[k], np.float32) for k in self.inputs], axis=-1)
        )

    # ------------------------------------------------------------------ NumPy
    def act(self, params: np.ndarray, z: np.ndarray, c: np.ndarray | None = None, h: np.ndarray | None = None) -> np.ndarray:
        """Actions in NumPy. params (n,) with inputs (..., dim), or (B, n) with inputs (B, ..., dim) → (..., A).

        Returns the raw tanh action; apply `postprocess` for what the env and M receive.
        """
        params = np.asarray(params, np.float32)
        x = self.features(z, c, h)
        p = self.split(params)
        if self.mode == "z_hidden":
            x = np.tanh(_np_affine(x, p["W_hidden"], p.get("b_hidden"), params.ndim))
            return np.tanh(_np_affine(x, p["W_out"], p.get("b_out"), params.ndim))
        return np.tanh(_np_affine(x, p["W"], p.get("b"), params.ndim))

    def postprocess(self, a: np.ndarray) -> np.ndarray:
        """The action the env and M receive: `car_action` for CarRacing, unchanged for Doom (§6); a gym env's one-hot
        choice or joystick triple (`wm.envs.m_action`)."""
        return post_action(self.post, a)

    # ------------------------------------------------------------------ TF
    def act_tf(self, params, z, c=None, h=None, postprocess: bool = True):
        """`act` (plus `postprocess` by default) in TF for the dream graph; params (n,) or (B, n) with inputs (B, dim)."""
        import tensorflow as tf

        x = self.features(z, c, h, xp=tf)
        p = self.split(params, xp=tf)
        if self.mode == "z_hidden":
            x = tf.tanh(_tf_affine(x, p["W_hidden"], p.get("b_hidden")))
            a = tf.tanh(_tf_affine(x, p["W_out"], p.get("b_out")))
        else:
            a = tf.tanh(_tf_affine(x, p["W"], p.get("b")))
        return self.postprocess_tf(a) if postprocess else a

    def postprocess_tf(self, a):
        """`postprocess` in TF: what the env and M receive from a tanh action (§6)."""
        import tensorflow as tf

        if self.post == "onehot":
            return tf.one_hot(tf.argmax(a, axis=-1), self.action_dim, dtype=a.dtype)
        if self.post == "joystick":
            axes = tf.sign(a[..., :2]) * tf.cast(tf.abs(a[..., :2]) > JOYSTICK_THRESHOLD, a.dtype)
            return tf.concat([axes, 2.0 * tf.cast(a[..., 2:3] > 0, a.dtype) - 1.0], axis=-1)
        if not self.car_actions:
            return a
        return tf.concat([a[..., :1], (a[..., 1:2] + 1.0) / 2.0, tf.clip_by_value(a[..., 2:3], 0.0, 1.0)], axis=-1)


def _np_affine(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, pdim: int) -> np.ndarray:
    if pdim == 1:
        y = x @ w
    else:  # one weight matrix per leading row: x (B, ..., i), w (B, i, o)
        y = np.einsum("b...i,bio->b...o", x, w)
        if b is not None:
            b = b.reshape(b.shape[:1] + (1,) * (y.ndim - 2) + b.shape[1:])
    return y if b is None else y + b


def _tf_affine(x, w, b):
    import tensorflow as tf

    if w.shape.rank == 2:
        y = tf.matmul(x, w)
    else:
        y = tf.reduce_sum(x[:, :, None] * w, axis=1)  # one small matrix per row; faster than a batched matmul
    return y if b is None else y + b


def _tf_lead(params) -> list:
    import tensorflow as tf

    return [] if params.shape.rank == 1 else [tf.shape(params)[0]]
