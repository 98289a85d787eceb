"""One stream's feeds, checked on their own before they join a batch: a bad feed is that stream's
error, never the batch's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..decoders import InputSpec
from ..errors import RunError
from ..runtime.guards import Guard
from ..runtime.guards import check_not_empty as _check_not_empty

__all__ = ["check_feeds", "check_not_empty", "quick_feeds"]


def check_feeds(sid: int, given: Any, specs: tuple[InputSpec, ...]) -> list[np.ndarray]:
    """``given``'s arrays in the order of ``specs`` (this machine's byte order), once each is one
    stream's feed of its input: the dtype, the rank, and every static dim (1 on the batch axis).

    Raises:
        RunError: naming the stream and what is wrong with its feeds.
    """
    if not isinstance(given, Mapping):
        raise RunError(f"stream {sid}: feeds must be a mapping of input names to arrays, not {type(given).__name__}")
    if len(given) != len(specs) or any(s.name not in given for s in specs):
        names = {s.name for s in specs}
        missing = sorted(names - set(given))
        unknown = sorted(str(n) for n in given if n not in names)
        parts = [f"missing input(s) {', '.join(missing)}"] if missing else []
        parts += [f"unknown input(s) {', '.join(unknown)}"] if unknown else []
        raise RunError(f"stream {sid}: {'; '.join(parts)} (inputs: {', '.join(s.name for s in specs)})")
    out = []
    for spec in specs:
        value = given[spec.name]
        try:
            arr = value if type(value) is np.ndarray else np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise RunError(f"stream {sid}: input '{spec.name}': not an array ({exc})") from None
        if arr.dtype != spec.dtype:
            raise RunError(f"stream {sid}: input '{spec.name}': dtype {arr.dtype}, expected {spec.dtype}")
        if arr.ndim != len(spec.dims) or any(d is not None and d != n for d, n in zip(spec.dims, arr.shape)):
            raise RunError(
                f"stream {sid}: input '{spec.name}': shape {list(arr.shape)}, expected {spec.shown()} "
                + (
                    f"(one stream: 1 along axis {spec.axis})"
                    if spec.axis is not None
                    else "(shared by a run's streams)"
                )
            )
        out.append(arr if arr.dtype.isnative else arr.astype(arr.dtype.newbyteorder("=")))
    return out


def quick_feeds(given: Any, specs: tuple[InputSpec, ...]) -> list[np.ndarray] | None:
    """``given``'s arrays when they plainly fit (a dict of native-order arrays of the right dtypes
    and shapes: the steady case, checked cheaply); else None, and :func:`check_feeds` decides."""
    if type(given) is not dict or len(given) != len(specs):
        return None
    out = []
    for spec in specs:
        arr = given.get(spec.name)
        if type(arr) is not np.ndarray or arr.dtype != spec.dtype or not arr.dtype.isnative:
            return None
        shape = arr.shape
        if shape != spec.dims and (
            len(shape) != len(spec.dims) or any(d is not None and d != n for d, n in zip(spec.dims, shape))
        ):
            return None
        out.append(arr)
    return out


def check_not_empty(
    sid: int, arrays: list[np.ndarray], specs: tuple[InputSpec, ...], guards: Mapping[str, Guard]
) -> None:
    """Refuse one stream's feeds (``arrays``, in the order of ``specs``) where an input is empty that
    an ONNX Runtime kernel of the model cannot take (it would crash), as a lone session does.

    Raises:
        RunError: naming the stream and the input.
    """
    try:
        _check_not_empty({s.name: a for s, a in zip(specs, arrays)}, guards)
    except RunError as exc:
        raise RunError(f"stream {sid}: {exc}") from None
