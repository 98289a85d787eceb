"""Translators, one module per op family. Importing this package registers them all."""

from . import (  # noqa: F401
    activations,
    attention,
    broadcast,
    constants,
    convolution,
    elementwise,
    indexing,
    loops,
    matmul,
    movement,
    normalization,
    padding,
    ranges,
    reductions,
    rnn,
    rnn_cells,
    scatter,
    shape,
    softmax,
    unary,
)
