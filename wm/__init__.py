"""World Models (Ha & Schmidhuber 2018) reproduction suite: V (ConvVAE), M (MDN-RNN), C (CMA-ES controller)."""

__version__ = "0.1.0"
