"""Whether a session's load gives a grouped attention the grouped decode step
(:mod:`ortstate.passes.grouped_decode`): ``ORTSTATE_GROUPED_DECODE``, read as each model loads.

- ``auto`` (or unset): where the pass's thresholds say it pays (one new row, from 2,048 rows of
  context, 4 or more query heads per KV head; measured on the real-size model, see the pass);
- ``on``: wherever it can run, whatever the context and the group size;
- ``off``: never: every step runs ONNX Runtime's ``GroupQueryAttention``.

Both ways give the same logits to f32 rounding; the setting moves only the time a long context's
decode step takes, so it is there to measure the step against the kernel on one machine
(``python -m benchmarks grouped``) or to pin it, as ``ORTSTATE_SPLIT_MAX_ROWS`` pins the split.
"""

from __future__ import annotations

import os

from ..errors import OrtStateError
from ..passes.grouped_decode import MODES

__all__ = ["ENV", "grouped_decode_mode"]

ENV = "ORTSTATE_GROUPED_DECODE"


def grouped_decode_mode() -> str:
    """``auto``, ``on`` or ``off``, as ``ORTSTATE_GROUPED_DECODE`` says (``auto`` when unset or empty).

    Raises:
        OrtStateError: the variable holds anything else.
    """
    given = os.environ.get(ENV, "").strip()
    if not given:
        return "auto"
    if given.lower() not in MODES:
        raise OrtStateError(f"{ENV} must be one of {', '.join(MODES)}, not {given!r}")
    return given.lower()
