"""A model's inputs, described once for every tool that feeds one: :class:`InputSpec`, read from an
IR's Parameters or from a session's ``get_inputs()`` (:func:`input_specs`), and random values that
fit them (:func:`random_inputs`).

The feeding rules (:mod:`~ortstate.decoders.feeds`), ``generate``, ``bench``, ``verify`` and the
stream pool (which sets each input's batch ``axis``) all describe inputs with :class:`InputSpec`.
It sits here, on :mod:`ortstate.ir`, because that is the lowest place all of them import.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DecoderError
from ..ir import Graph, element_type, parse_partial_shape

__all__ = ["InputSpec", "concrete_shape", "input_specs", "random_inputs"]

# ONNX Runtime spells a tensor's type as ONNX names its element type (``tensor(float)``); numpy's
# names differ for these two, and numpy has no dtype for bfloat16, float8 or strings.
_NUMPY_NAMES = {"float": "float32", "double": "float64"}
_NUMPY_TYPES = frozenset(
    {"float32", "float64", "float16", "bool", *(f"{u}int{b}" for u in ("", "u") for b in (8, 16, 32, 64))}
)


@dataclass(frozen=True)
class InputSpec:
    """One model input.

    Attributes:
        name: the graph input's name.
        dtype: the numpy dtype of its values.
        dims: each dim an int, or None (or a symbolic name, from a session) where dynamic; None for
            a dynamic rank. A stream pool's specs give 1 at the batch axis: one stream's feed.
        axis: the batch axis; None where the input has none (a value the streams of one pool run
            share). An IR's or a session's inputs carry their batch first.
        rows: its values index rows of the batch (``beam_idx``; see
            :mod:`ortstate.passes.batchable.row_index`), so a pool offsets them to each stream's row.
    """

    name: str
    dtype: np.dtype
    dims: tuple[int | str | None, ...] | None
    axis: int | None = 0
    rows: bool = False

    @property
    def rank(self) -> int | None:
        return None if self.dims is None else len(self.dims)

    def shown(self) -> str:
        """The dims as messages show them: ``[?,4]`` (``[...]`` for a dynamic rank)."""
        if self.dims is None:
            return "[...]"
        return "[" + ",".join(str(d) if isinstance(d, int) else "?" for d in self.dims) + "]"


def input_specs(model: Graph | Sequence[Any], *, error: type[Exception] = DecoderError) -> list[InputSpec]:
    """The inputs of ``model``: an IR's Parameters (dims None where dynamic), or a session's inputs
    (onnxruntime ``NodeArg``\\ s, as ``StatefulSession.get_inputs()`` gives them: dims as the
    session declares them, a name where symbolic).

    Raises:
        error: an input whose element type no numpy array can hold, naming the layer or input.
    """
    if not isinstance(model, Graph):
        return [InputSpec(a.name, _session_dtype(a, error), None if a.shape is None else tuple(a.shape)) for a in model]
    specs = []
    for layer in model.parameters:
        etype = element_type(layer.attrs["element_type"])  # the reader checked it is there and known
        if etype.dtype is None:
            raise error(f"{model.source}: {layer.describe()}: no numpy type holds its element type ({etype.name})")
        shape = parse_partial_shape(layer.attrs["shape"])
        dims = None if shape.dims is None else tuple(d.lo if d.is_static else None for d in shape.dims)
        specs.append(InputSpec(layer.tensor_name(), etype.dtype, dims))
    return specs


def _session_dtype(arg: Any, error: type[Exception]) -> np.dtype:
    match = re.fullmatch(r"tensor\((\w+)\)", arg.type)
    name = _NUMPY_NAMES.get(match.group(1), match.group(1)) if match else ""
    if name not in _NUMPY_TYPES:
        raise error(f"input '{arg.name}': unsupported type {arg.type}")
    return np.dtype(name)


def concrete_shape(
    spec: InputSpec, batch: int, dim: int, override: Sequence[int] | None = None, error: type[Exception] = ValueError
) -> tuple[int, ...]:
    """``override`` if it fits ``spec``, else its dims with dynamic ones as ``batch`` (at the batch
    axis) or ``dim``.

    Raises:
        error: ``override`` does not fit the declared dims, or the rank is dynamic and no override given.
    """
    dims = spec.dims
    if override is not None:
        fits = dims is None or (
            len(override) == len(dims) and all(not isinstance(d, int) or d == n for d, n in zip(dims, override))
        )
        if not fits:
            raise error(f"input '{spec.name}': shape {list(override)} does not fit {spec.shown()}")
        return tuple(override)
    if dims is None:
        raise error(f"input '{spec.name}' has a dynamic rank: give a shape (--shape {spec.name}=D0,D1,...)")
    return tuple(d if isinstance(d, int) else (batch if i == spec.axis else dim) for i, d in enumerate(dims))


def random_inputs(
    specs: Sequence[InputSpec],
    rng: np.random.Generator,
    *,
    batch: int = 2,
    dim: int = 4,
    shapes: Mapping[str, Sequence[int]] | None = None,
    scale: float = 1.0,
    error: type[Exception] = ValueError,
) -> dict[str, np.ndarray]:
    """One random value per input: floats ~ N(0, ``scale``²); integers in ``[0, batch)`` (valid as
    indices along the batch axis, e.g. ``beam_idx``, and into any embedding table); bools 50/50.
    Dynamic dims are ``batch`` at the batch axis and ``dim`` elsewhere; ``shapes`` overrides.

    Raises:
        error: a shape that does not fit, or a dynamic rank without a shape.
    """
    feeds = {}
    for spec in specs:
        shape = concrete_shape(spec, batch, dim, (shapes or {}).get(spec.name), error)
        if spec.dtype.kind == "b":
            value = rng.random(shape) < 0.5
        elif spec.dtype.kind in "iu":
            value = rng.integers(0, max(batch, 1), size=shape)
        else:
            value = rng.standard_normal(shape) * scale
        feeds[spec.name] = np.asarray(value).astype(spec.dtype)
    return feeds
