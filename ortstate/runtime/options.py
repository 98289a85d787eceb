"""The ONNX Runtime session options ortstate chooses for a model when the caller gives none.

One choice so far, measured on 2 cores (``benchmarks/``): ONNX Runtime's CPU memory arena hands
out every intermediate tensor under one mutex per session. A recurrent model steps in tens of µs
with many small tensors, and 16 requests stepped from 2 threads on one session ran *slower* than
from 1 thread with the arena (0.8–1.2×) and 1.4–1.6× faster without it; one thread runs ~1 µs
faster without it too. Decoders whose caches grow every step allocate large, changing buffers the
arena recycles (one stream 0–25 % slower without it), so they keep it: the arena goes off only for
models whose variables all have static shapes. (Serving many decode streams from several threads
is the exception: without the arena 16 llama streams on 2 threads ran 1.51× the 1-thread rate,
1.26× with it; callers who do that pass their own ``sess_options``.)
"""

from __future__ import annotations

import onnxruntime as ort

from ..model_meta import ModelMeta

__all__ = ["default_session_options", "static_states", "tune_session_options"]


def static_states(meta: ModelMeta) -> bool:
    """True if the model has variables and every one has a fully static shape."""
    return bool(meta.variables) and all(
        v.shape is not None and all(isinstance(d, int) for d in v.shape) for v in meta.variables
    )


def tune_session_options(options: ort.SessionOptions, meta: ModelMeta) -> ort.SessionOptions:
    """Apply ortstate's choices for this model to ``options`` (in place) and return them."""
    if static_states(meta):
        options.enable_cpu_mem_arena = False
    return options


def default_session_options(meta: ModelMeta) -> ort.SessionOptions:
    """What :class:`~ortstate.StatefulSession` uses without ``sess_options``: quiet, and tuned."""
    options = ort.SessionOptions()
    options.log_severity_level = 3  # keep ORT's warnings about our graphs away from users
    return tune_session_options(options, meta)
