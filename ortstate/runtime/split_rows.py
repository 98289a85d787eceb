"""How many rows of activations a 4-bit weight's exact int8 split takes on this CPU, set as a model
loads.

The converter runs a compressed 4-bit ``MatMul`` through an ``If`` on the row count
(``ortstate.convert.compressed.exact_split``): up to a number of rows held in an initializer
(``ortstate.meta.SPLIT_ROWS``: rows x K, one for each K), the activations split
exactly into three parts on ONNX Runtime's int8 kernel; more, its f32-compute kernel. Both give
OpenVINO's f32 result to f32 rounding; which is faster at a given row count depends on the CPU's
int8 instructions. The file holds 3, where they cross with AVX2 alone; with AVX-512 VNNI the int8
kernel stays ahead far longer (ONNX Runtime 1.31, 2 threads, AMD EPYC Zen 5,
``python -m benchmarks weights-kernels --rows 3,4,6,8,12,16,24,32``: a 4864 x 896 weight at 8
rows 0.36 ms split against 0.55 ms f32, at 12 rows 0.51 against 0.58, at 16 rows even), so a
``ContinuousBatcher`` of the real-size Qwen2-0.5B int4 IR decoding 4 streams went from 63.6 to
81.5 tokens/s, 8 streams from 84 to 94.5, the same tokens. The value is set per CPU by its
instruction sets (not timed at load: a model then runs the same way on one machine every time),
or by ``ORTSTATE_SPLIT_MAX_ROWS``.
"""

from __future__ import annotations

import os
from functools import cache

import numpy as np
import onnx
import onnxruntime as ort

from ..errors import OrtStateError
from ..meta import SPLIT_ROWS
from .cpu import cpu_flags

__all__ = ["ENV", "VNNI_ROWS", "split_max_rows", "split_rows_values"]

ENV = "ORTSTATE_SPLIT_MAX_ROWS"
VNNI_ROWS = 12  # AVX-512 VNNI: below the even point measured above (16): other cores may cross sooner


def split_max_rows() -> int | None:
    """The row count this CPU's split should take up to, or None to keep the model's own.

    Raises:
        OrtStateError: ``ORTSTATE_SPLIT_MAX_ROWS`` is set to something other than a whole number.
    """
    given = os.environ.get(ENV, "").strip()
    if given:
        try:
            rows = int(given)
        except ValueError:
            rows = -1
        if rows < 0:
            raise OrtStateError(f"{ENV} must be a whole number of rows (0: never split), not {given!r}")
        return rows
    return VNNI_ROWS if "avx512_vnni" in cpu_flags() else None


def split_rows_values(model: onnx.ModelProto) -> dict[str, ort.OrtValue]:
    """The values to load ``model``'s ``SPLIT_ROWS`` initializers with
    (``SessionOptions.add_initializer``): none where the model has none or keeps its own."""
    rows = split_max_rows()
    if rows is None:
        return {}
    found = (SPLIT_ROWS.fullmatch(i.name) for i in model.graph.initializer)
    return {m.group(0): _value(rows * int(m.group(1))) for m in found if m}


@cache
def _value(values: int) -> ort.OrtValue:
    # kept for the process: a session reads an initializer added this way where it is
    return ort.OrtValue.ortvalue_from_numpy(np.array(values, np.int64))
