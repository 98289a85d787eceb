"""The inputs of a loaded session as the feeding rules describe them (:class:`~ortstate.decoders.InputSpec`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..decoders import InputSpec
from ..errors import GenerationError
from ..runtime import numpy_dtype

__all__ = ["input_specs"]


def input_specs(node_args: Sequence[Any]) -> list[InputSpec]:
    """:class:`InputSpec` of onnxruntime ``NodeArg``s (``StatefulSession.get_inputs()``)."""
    specs = []
    for arg in node_args:
        dtype = numpy_dtype(arg.type)
        if dtype is None:
            raise GenerationError(f"input '{arg.name}': unsupported type {arg.type}")
        shape = None if arg.shape is None else tuple(arg.shape)
        specs.append(InputSpec(arg.name, dtype, shape))
    return specs
