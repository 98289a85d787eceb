"""A decoder with KV caches loaded for a pool of streams: its explicit form with every KV variable
kept in an arena row (:mod:`ortstate.passes.kv_share`, :mod:`ortstate.passes.ragged_kv`), and how
each of its inputs joins a batch of streams.

A stream feeds what a lone ``StatefulSession`` of the model is fed (batch 1). The batch is built
as Hugging Face batches prompts: inputs along their batch axis, ``attention_mask`` left-padded with
zeros to the longest row (a row's mask is its past and current tokens), ``beam_idx`` the identity.
Whether the model then computes each row exactly as alone when rows hold caches of different
lengths (*ragged* batches: a model that derives positions from the cache's length instead of
``position_ids`` does not) is checked once at load, on random rows; a model that fails the check
is batched only with streams of one length.

A KV cache is a variable ``[batch, heads, positions, head size]`` (f32, positions growing). One
the converter's fused attention appends to is read and written in its arena row in place; one
whose attention stays composed (see ``ortstate inspect``'s attention table) is *copied*: each run
is fed its rows' caches and keeps what the run appended (:mod:`.copied`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnxruntime as ort

from ...decoders.feeds import KNOWN_INPUTS
from ...errors import OrtStateError, PassError, RunError
from ...meta import VariableMeta, read_meta, write_meta
from ...passes.pipelines import KV_POOL, PassOptions
from ...runtime import LoadedModel, numpy_dtype
from ...runtime.loaded import load_model
from ...runtime.source import read_source
from ..layout import read_pool_source

__all__ = ["FeedSpec", "KvModel", "check_names", "check_stream_feeds", "load_kv_model", "wants_kv_pool"]

MASK, ROWS = "attention_mask", "beam_idx"
_SHARED = ("cache_position",)  # one value for every row of a run


@dataclass(frozen=True)
class FeedSpec:
    """A model input as a stream feeds it: ``axis`` its batch axis (None: shared by a run's rows)."""

    name: str
    dtype: np.dtype
    rank: int
    axis: int | None


@dataclass(frozen=True)
class FixedSpec:
    """A variable of a fixed size per stream (a convolution or SSM state): one row along axis 0."""

    var: VariableMeta
    shape: tuple[int, ...]  # one stream's
    carrier: np.dtype


@dataclass
class KvModel:
    """The loaded model, its KV variables, its fixed-size ones, its feeds and the pool's inputs."""

    loaded: LoadedModel
    fingerprint: str
    kv: tuple[VariableMeta, ...]  # every KV cache: the fused attention's (a length input) and copied ones
    kv_shapes: tuple[tuple[int, int], ...]  # (heads, head size) of each KV variable's row
    fixed: tuple[FixedSpec, ...]
    feeds: tuple[FeedSpec, ...]
    seqlens: str  # "" where no attention is fused (no KV cache in place)
    key_index: str
    variables: tuple[VariableMeta, ...]  # all, in the model's order (snapshots)
    batching: str = "ragged"  # see :mod:`.probe`
    last_logits: str | None = None  # the input asking for the last position's logits only
    prompts_batch: bool = False  # fresh prompts of one length run together (see :mod:`.probe`)


def wants_kv_pool(model: Any) -> bool:
    """Whether ``model`` (what ``StreamPool`` takes) has a variable that grows: a KV cache."""
    try:
        meta = read_meta(read_source(model).model)
    except (OrtStateError, ValueError):
        return False
    if meta is None:
        return False
    return any(v.reorder or v.length_input or _grows(v) for v in meta.variables)


def _grows(var: VariableMeta) -> bool:
    """A KV cache's shape: ``[batch, heads, positions, head size]``, its positions dynamic."""
    shape = var.shape or []
    return len(shape) == 4 and not isinstance(shape[2], int) and all(isinstance(d, int) for d in (shape[1], shape[3]))


def load_kv_model(model: Any, sess_options: ort.SessionOptions | None, providers: Sequence[str] | None) -> KvModel:
    """``model`` loaded for a pool of KV streams.

    Raises:
        OrtStateError: no variables, a variable neither a KV cache read by the fused attention nor
            of a fixed size per stream, an input the pool does not know how to batch, or ONNX
            Runtime refusing the model.
    """
    source, meta, fingerprint = read_pool_source(model)
    origin = source.origin
    proto = source.own()
    try:
        ran = KV_POOL.run(proto, meta, PassOptions(origin))
    except PassError as exc:
        raise OrtStateError(f"{origin}: cannot pool its streams: {exc}") from None
    meta, names, last = ran.meta, ran.found("ragged_kv"), ran.found("slice_last_logits")
    kv = tuple(v for v in meta.variables if v.length_input or _copied(v))
    fixed = tuple(_fixed(v, origin) for v in meta.variables if v not in kv)
    if not kv:
        raise OrtStateError(f"{origin}: cannot pool its streams: the model has no KV cache")
    shapes = tuple((v.shape[1], v.shape[3]) if v.shape and len(v.shape) == 4 else (None, None) for v in kv)
    for var, shape in zip(kv, shapes):
        if not all(isinstance(d, int) for d in shape):
            raise OrtStateError(
                f"{origin}: cannot pool its streams: KV cache {var.id!r} has no static heads and head size"
            )
    write_meta(proto, meta)
    loaded = load_model(source, sess_options, providers, form="explicit")
    hidden = {names.seqlens, names.key_index, last} - {""}
    feeds = tuple(_feed(i, origin) for i in loaded.inputs if i.name not in hidden)
    return KvModel(
        loaded,
        fingerprint,
        kv,
        shapes,  # type: ignore[arg-type]
        fixed,
        feeds,
        names.seqlens,
        names.key_index,
        meta.variables,
        last_logits=last,
    )


def _copied(var: VariableMeta) -> bool:
    """A KV cache the fused attention does not append to: the pool copies it in and out of its row."""
    return _grows(var) and not var.init_flag and var.dtype == "float32" and var.carrier in (None, "float32")


def _fixed(var: VariableMeta, origin: str) -> FixedSpec:
    shape = var.shape or []
    dims = list(shape[1:])
    if var.reorder or var.init_flag or not shape or not all(isinstance(d, int) for d in dims):
        raise OrtStateError(
            f"{origin}: cannot pool its streams: variable {var.id!r} is neither a KV cache (f32, "
            "[batch, heads, positions, head size]) nor of a fixed size per stream"
        )
    return FixedSpec(var, (1, *dims), np.dtype(var.carrier or var.dtype))


def _feed(arg: Any, origin: str) -> FeedSpec:
    name, rank = arg.name, len(arg.shape or [])
    dtype = numpy_dtype(arg.type)
    if name not in KNOWN_INPUTS or dtype is None:
        raise OrtStateError(
            f"{origin}: cannot pool its streams: no rule batches input {name!r} "
            f"(the pool takes {', '.join(sorted(KNOWN_INPUTS))})"
        )
    if name in _SHARED:
        axis = None
    elif name == "position_ids" and rank == 3:  # M-RoPE: [sections, batch, n]
        axis = 1
    else:
        axis = 0
    return FeedSpec(name, dtype, rank, axis)


_TOKENS = ("input_ids", "inputs_embeds")


def check_names(who: str, given: Any, specs: Sequence[FeedSpec]) -> None:
    """Raise RunError (naming ``who``) unless ``given`` maps the names of ``specs``, no other."""
    if not isinstance(given, Mapping):
        raise RunError(f"{who}: feeds must be a mapping of input names to arrays")
    if len(given) != len(specs) or any(s.name not in given for s in specs):
        names = {s.name for s in specs}
        missing, extra = sorted(names - set(given)), sorted(map(str, set(given) - names))
        parts = [f"missing input(s) {', '.join(missing)}"] if missing else []
        parts += [f"unknown input(s) {', '.join(extra)}"] if extra else []
        raise RunError(f"{who}: " + "; ".join(parts))


def check_stream_feeds(
    sid: int, given: Any, specs: Sequence[FeedSpec], past: int, max_context: int
) -> tuple[dict[str, np.ndarray], int]:
    """One stream's feeds as arrays, and its number of new tokens (its caches hold ``past``).

    Raises:
        RunError: not a mapping, a missing or unknown input, a wrong dtype or rank, a batch other
            than 1, inputs whose numbers of new tokens differ, positions past ``max_context``, a
            mask neither past + new nor new tokens wide.
    """
    check_names(f"stream {sid}", given, specs)
    arrays: dict[str, np.ndarray] = {}
    width = 0
    for spec in specs:
        value = given[spec.name]
        arr = value if type(value) is np.ndarray else np.asarray(value)
        if arr.dtype != spec.dtype:
            raise RunError(f"stream {sid}: input '{spec.name}' must be {spec.dtype}, got {arr.dtype}")
        if arr.ndim != spec.rank or (spec.axis is not None and arr.shape[spec.axis] != 1):
            raise RunError(
                f"stream {sid}: input '{spec.name}' has shape {list(arr.shape)}; one stream's has rank "
                f"{spec.rank} with 1 along axis {spec.axis}"
            )
        if spec.name in _TOKENS:
            width = arr.shape[1]
        arrays[spec.name] = arr
    if not width:
        raise RunError(f"stream {sid}: no tokens to step")
    for spec in specs:  # what goes with each new token has as many
        if spec.axis is not None and spec.name not in (MASK, ROWS) and arrays[spec.name].shape[spec.axis + 1] != width:
            raise RunError(
                f"stream {sid}: input '{spec.name}' has {arrays[spec.name].shape[spec.axis + 1]} positions, "
                f"input_ids {width}"
            )
    if past + width > max_context:
        raise RunError(f"stream {sid}: {past} + {width} positions are over the pool's max_context of {max_context}")
    mask = arrays.get(MASK)
    if mask is not None and mask.shape[1] not in (width, past + width):
        raise RunError(
            f"stream {sid}: attention_mask has {mask.shape[1]} positions; the stream's are {past} past + "
            f"{width} new (or the {width} new only)"
        )
    return arrays, width
