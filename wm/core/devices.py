"""train-controller's TF devices: what `es.device`, the fitness and the launcher ask of `wm.core.tf_setup`.

    devices = decide_devices(cfg, under_mpi=launched_size() > 1)    # first thing in the stage's `run`

Decided once per process, before anything starts TensorFlow (`wm.core.tf_setup`'s rule); the stage hands the
decision to its batched dream pool (`wm.rollouts.engine.EvalSpec`'s threads and GPU).
"""

from __future__ import annotations

from wm.core import tf_setup
from wm.core.config import Config
from wm.core.errors import WMError


def decide_devices(cfg: Config, under_mpi: bool) -> tf_setup.Devices:
    """This process's TF devices (`wm.core.tf_setup.decide`), decided once before anything starts TF; returns them.

    Under mpirun rank 0 runs CMA-ES and never a model: one thread, no GPU (the worker ranks decide the same in the
    CLI). Alone with dream fitness this process is the batched pool's only worker: all TF threads, and the GPU as
    `es.device` says (`auto`: when TF sees one, an earlier decision of this process kept; `cpu`: never; `gpu`:
    a WMError when TF sees none). Alone with real or toy fitness: one thread, no GPU (the engine's CPU worker).
    """
    device = cfg.es.device  # auto, cpu or gpu (config.RULES)
    if under_mpi or cfg.es.fitness != "dream":
        return tf_setup.decide(threads=1, gpu=False)
    try:
        if device == "cpu":
            return tf_setup.decide(threads=None, gpu=False)
        if device == "auto":
            return tf_setup.decide(threads=None, gpu=tf_setup.AUTO)
        devices = tf_setup.decide(threads=None, gpu=True)
    except WMError as e:  # TF already runs in this process with the other GPU set
        raise WMError(f"es.device: {device}, but {e}") from None
    tf = tf_setup.setup()
    if not tf.config.list_physical_devices("GPU"):
        raise WMError("es.device: gpu, but TensorFlow sees no GPU on this machine; set es.device to auto or cpu")
    return devices
