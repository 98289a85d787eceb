"""Every use of onnxruntime's and onnxruntime-extensions' internals, and nothing else.

ortstate reaches past both packages' documented APIs where the hot path pays for them, and only
here; ``tests/runtime/test_ort_adapter.py`` fails loudly when a new release moves any of it.

onnxruntime:
- ``InferenceSession._sess`` is onnxruntime's own session object under the Python wrapper, whose
  ``run`` re-validates the feeds (~2 µs a run) and whose ``run_with_iobinding`` costs ~30 µs more
  when given run options; ``IOBinding._iobinding`` is the binding object that ``run_with_iobinding``
  takes. Where a release has neither, the public wrapper is used (correct, a little slower).
- That binding object binds a numpy array (``bind_input(name, array)``), binds an output to a
  device for a fresh allocation (``bind_output(name, OrtDevice._get_c_device())``) and lists the
  outputs (``get_outputs()``, each with ``.numpy()``: a view of its memory) without the wrapper's
  bookkeeping, a Python object per bound value and per output (see :class:`FastBinding`).

onnxruntime-extensions (Python custom ops; the facts measured are in docs/internals.md):
- ops are registered with ``_ocos.Opdef.create`` and typed with ``PyCustomOpDef.dt_*``;
- ``PyCustomOpDef.install_hooker`` replaces the function the C++ kernel calls with
  ``(op id, inputs, attributes)``; the default one (``_ocos._on_pyop_invocation``) converts every
  output through a Python list (~80 ns an element). Ours hands back contiguous ndarrays as
  ``(op id, shape, array, shape, array, ...)``, after checking each array's dtype and layout itself:
  the C++ side copies raw bytes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnxruntime as ort

# Importing onnxruntime_extensions sets PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python in os.environ
# (its converter module, for its own protobuf needs): every process the user starts afterwards would
# run protobuf in pure Python. ortstate needs none of that, so the environment is put back.
_PROTOBUF = "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"
_protobuf_before = os.environ.get(_PROTOBUF)
from onnxruntime_extensions import PyCustomOpDef, _ocos, get_library_path  # noqa: E402

if _protobuf_before is None:
    os.environ.pop(_PROTOBUF, None)
else:
    os.environ[_PROTOBUF] = _protobuf_before

__all__ = [
    "PYOP_DTYPES",
    "FastBinding",
    "FastRun",
    "custom_op_library",
    "has_fast_path",
    "raw_binding",
    "raw_session",
    "register_pyop",
]

# numpy dtypes a Python op can take and give (no float16/bfloat16: the process aborts on them).
PYOP_DTYPES: dict[np.dtype, int] = {
    np.dtype(np.float32): PyCustomOpDef.dt_float,
    np.dtype(np.float64): PyCustomOpDef.dt_double,
    np.dtype(np.int64): PyCustomOpDef.dt_int64,
    np.dtype(np.int32): PyCustomOpDef.dt_int32,
    np.dtype(np.int16): PyCustomOpDef.dt_int16,
    np.dtype(np.int8): PyCustomOpDef.dt_int8,
    np.dtype(np.uint64): PyCustomOpDef.dt_uint64,
    np.dtype(np.uint32): PyCustomOpDef.dt_uint32,
    np.dtype(np.uint16): PyCustomOpDef.dt_uint16,
    np.dtype(np.uint8): PyCustomOpDef.dt_uint8,
    np.dtype(np.bool_): PyCustomOpDef.dt_bool,
}


# -- onnxruntime ---------------------------------------------------------------------------------
def raw_session(session: ort.InferenceSession) -> Any:
    """onnxruntime's own session object under ``session`` (see the module doc); the wrapper itself
    when a release has none."""
    return getattr(session, "_sess", session)


def raw_binding(binding: ort.IOBinding) -> Any:
    """The binding object :func:`raw_session`'s ``run_with_iobinding`` takes."""
    return getattr(binding, "_iobinding", binding)


def has_fast_path(session: ort.InferenceSession) -> bool:
    """Whether runs skip the Python wrapper (False: this onnxruntime moved its internals)."""
    return raw_session(session) is not session


class FastRun:
    """A session's runs without the Python wrapper's checks: the caller has checked the feeds.

    Attributes:
        session: the session.
        run: ``run(output names, feeds, run options) -> list of arrays``.
        run_bound: ``run_bound(raw binding, run options)`` runs an IOBinding made by
            :meth:`binding`; the outputs are left in the buffers bound.
    """

    __slots__ = ("_raw", "run", "run_bound", "session")

    def __init__(self, session: ort.InferenceSession) -> None:
        self.session = session
        raw = raw_session(session)
        self._raw = raw is not session
        self.run: Callable[[Sequence[str], dict[str, Any], Any], list[np.ndarray]] = raw.run
        self.run_bound: Callable[[Any, Any], Any] = raw.run_with_iobinding if self._raw else session.run_with_iobinding

    def binding(self) -> tuple[ort.IOBinding, Any]:
        """A new IOBinding, and what :attr:`run_bound` takes for it (keep both alive while used:
        onnxruntime holds raw pointers to the buffers bound)."""
        binding = self.session.io_binding()
        return binding, raw_binding(binding) if self._raw else binding


class FastBinding:
    """An IOBinding for a hot path that binds some values anew every run: through onnxruntime's own
    binding object, ~1-2 µs less a call than the wrapper's (which keeps a reference and a record per
    value bound, and wraps every output in a Python ``OrtValue``). The caller keeps every array it
    binds alive until it binds another under that name: the binding holds its raw pointer only.

    Attributes:
        binding: the public ``IOBinding`` (for what binds once: buffers by pointer);
        raw: what :attr:`FastRun.run_bound` runs;
        bind_array: ``bind_array(name, array)`` binds input ``name`` to ``array`` (C-contiguous,
            native byte order) where it is;
        outputs: ``outputs()``, the last run's outputs in the order first bound, each with
            ``numpy()`` (a view of its memory).
    """

    __slots__ = ("_device", "bind_array", "binding", "outputs", "raw")

    def __init__(self, fast: FastRun) -> None:
        self.binding, self.raw = fast.binding()
        fast_path = self.raw is not self.binding
        self._device = ort.OrtDevice.make("cpu", 0)._get_c_device() if fast_path else None
        # onnxruntime's own methods where it has them: no Python call between
        self.bind_array: Callable[[str, np.ndarray], None] = (
            self.raw.bind_input if fast_path else self.binding.bind_cpu_input
        )
        self.outputs: Callable[[], Sequence[Any]] = self.raw.get_outputs if fast_path else self.binding.get_outputs

    def bind_allocated_output(self, name: str) -> None:
        """Let the next run allocate output ``name`` anew (so an earlier run's result stays as it is)."""
        if self._device is None:
            self.binding.bind_output(name, "cpu")
        else:
            self.raw.bind_output(name, self._device)


# -- onnxruntime-extensions ------------------------------------------------------------------------
def custom_op_library() -> str:
    """The shared library to register on ``SessionOptions`` for the Python ops."""
    return get_library_path()


# op id -> the function the hook calls for it: ``(op id, inputs, attributes) -> the hook's tuple``
_OURS: dict[int, Callable[[int, list, dict], tuple]] = {}
_default_hook = _ocos._on_pyop_invocation
_ndarray = np.ndarray


def register_pyop(
    body: Callable[[list[np.ndarray], str], Any],
    op_type: str,
    inputs: Sequence[np.dtype],
    outputs: Sequence[np.dtype],
    attr: str,
) -> None:
    """Register a Python op of the contrib domain: ``body(inputs, attribute)`` takes the list of input
    arrays and the value of its one string attribute ``attr``, and returns one array (one output) or
    a sequence of arrays, each of the dtype declared here.

    Every op must be registered before any session exists: onnxruntime keeps raw pointers into the
    registry, which registering more can move. The same op type may be registered once per
    input signature.
    """
    opdef = _ocos.Opdef.create(
        body,
        op_type=op_type,
        inputs=[PYOP_DTYPES[np.dtype(d)] for d in inputs],
        outputs=[PYOP_DTYPES[np.dtype(d)] for d in outputs],
        attrs={attr: PyCustomOpDef.dt_string},
    )
    _OURS[id(opdef)] = _caller(body, attr, tuple(np.dtype(d) for d in outputs))


def _caller(body: Callable[[list[np.ndarray], str], Any], attr: str, dtypes: tuple[np.dtype, ...]) -> Callable:
    """What the hook calls for one op: ``body``, then its outputs checked as the C++ side needs them
    (it copies raw bytes: a C-contiguous ndarray of the declared dtype), converted where they are not
    (the common case, checked cheaply first, needs nothing)."""
    if len(dtypes) == 1:
        (dtype,) = dtypes

        def one(k_id: int, feed: list, attributes: dict) -> tuple:
            arr = body(feed, attributes.get(attr, ""))
            if (
                type(arr) is not _ndarray
                or (arr.dtype is not dtype and arr.dtype != dtype)
                or not arr.flags.c_contiguous
            ):
                arr = np.asarray(arr, dtype=dtype, order="C")  # keeps 0-d arrays 0-d
            return (k_id, arr.shape, arr)

        return one

    if len(set(dtypes)) == 1:  # all of one dtype (a fused read): the loop has less to do
        dtype = dtypes[0]

        def same(k_id: int, feed: list, attributes: dict) -> tuple:
            result: list[Any] = [k_id]
            for arr in body(feed, attributes.get(attr, "")):
                if type(arr) is not _ndarray or arr.dtype is not dtype or not arr.flags.c_contiguous:
                    arr = np.asarray(arr, dtype=dtype, order="C")
                result.append(arr.shape)
                result.append(arr)
            return tuple(result)

        return same

    def many(k_id: int, feed: list, attributes: dict) -> tuple:
        result: list[Any] = [k_id]
        for arr, dtype in zip(body(feed, attributes.get(attr, "")), dtypes):
            if (
                type(arr) is not _ndarray
                or (arr.dtype is not dtype and arr.dtype != dtype)
                or not arr.flags.c_contiguous
            ):
                arr = np.asarray(arr, dtype=dtype, order="C")
            result.append(arr.shape)
            result.append(arr)
        return tuple(result)

    return many


def _hook(k_id: int, feed: list, attributes: dict) -> tuple:
    """Call our ops without the list round trip; every other op the default way."""
    call = _OURS.get(k_id)
    if call is None:
        return _default_hook(k_id, feed, attributes)
    return call(k_id, feed, attributes)


PyCustomOpDef.install_hooker(_hook)
