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

__all__ = [
    "default_session_options",
    "log_severity",
    "quiet_session_options",
    "set_log_severity",
    "static_states",
    "tune_session_options",
]

# ONNX Runtime logs a failed run itself (a red ``[E:onnxruntime:...]`` line) before raising, and warns
# about graph inputs that have initializers, which the explicit form's graphs have by design. ortstate
# raises a RunError carrying ONNX Runtime's whole reason, so by default only fatal messages (4) get
# through; ``set_log_severity`` (the CLI's ``--verbose``) lets them through again.
_log_severity = 4


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


def set_log_severity(level: int) -> None:
    """Set the severity from which ONNX Runtime's own log is shown, for the sessions ortstate makes
    without ``sess_options`` from now on: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal (the default).

    Sessions given ``sess_options`` log as those options say.

    Raises:
        ValueError: ``level`` is not 0..4.
    """
    global _log_severity
    if not isinstance(level, int) or not 0 <= level <= 4:
        raise ValueError(f"log severity must be 0 (verbose) .. 4 (fatal), got {level!r}")
    _log_severity = level


def log_severity() -> int:
    """The severity set by :func:`set_log_severity` (4, fatal only, by default)."""
    return _log_severity


def quiet_session_options() -> ort.SessionOptions:
    """New ``SessionOptions`` logging from :func:`log_severity` on (quiet by default)."""
    options = ort.SessionOptions()
    options.log_severity_level = _log_severity
    return options


def default_session_options(meta: ModelMeta) -> ort.SessionOptions:
    """What :class:`~ortstate.StatefulSession` uses without ``sess_options``: quiet, and tuned."""
    return tune_session_options(quiet_session_options(), meta)
