"""Translators, one module per op family. Importing this package registers them all."""

from . import (  # noqa: F401
    activations,
    broadcast,
    constants,
    elementwise,
    indexing,
    loops,
    matmul,
    ranges,
    reductions,
    rnn,
    rnn_cells,
    scatter,
    shape,
    softmax,
    unary,
)
