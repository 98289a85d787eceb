"""How a folder's decoder reaches ONNX Runtime, for :class:`~.generator.Generator` and
:class:`~.continuous.ContinuousBatcher` alike: converted with the conversion's options (int8
activations), on a given number of ONNX Runtime threads."""

from __future__ import annotations

from typing import Any

import onnxruntime as ort

from ..convert import build
from ..convert.context import ConvertOptions
from ..decoders import ModelFiles
from ..errors import GenerationError
from ..runtime.options import quiet_session_options
from ..runtime.source import Source

__all__ = ["converted_decoder", "thread_options"]


def converted_decoder(files: ModelFiles, graph: Any, int8_activations: bool, *, explicit_state: bool) -> Source:
    """The folder's decoder ``graph`` (read from ``files.decoder``) converted here, its compressed
    weights on int8-quantized activations if ``int8_activations``."""
    built = build(graph, explicit_state=explicit_state, options=ConvertOptions(int8_activations))
    return Source(built.model, str(files.decoder), built.arrays, converted=True)


def thread_options(threads: int | None) -> ort.SessionOptions | None:
    """ONNX Runtime's quiet options on ``threads`` intra-op threads (None: ONNX Runtime's own
    choice, every physical core).

    Raises:
        GenerationError: ``threads`` is not a positive integer.
    """
    if threads is None:
        return None
    if type(threads) is not int or threads < 1:
        raise GenerationError(f"threads must be a positive integer, got {threads!r}", field="threads")
    options = quiet_session_options()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return options
