"""The pool's form of a model: its explicit form with the batch made dynamic, followed through the
graph, and each variable's init flag made one per row.

The steps, in their order: :func:`~.relax.relax_batch` (every dim that could be the batch a symbol
of its own), :func:`~.unpin.unpin_reshapes` (reshapes that restate their input's shape read the
batch at run time), :func:`~.shape_math.fold_shape_math` (what every run computes the same way),
:func:`~.axes.find_axes` (the batch axis of every input, output and variable; once more after
unpinning where the batch followed through the whole model shows more reshapes restating their
input), and :func:`~.row_init.rows_init` (an init flag per row), which writes the metadata the
pool runs with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import onnx

from ...errors import OrtStateError
from ...meta import ModelMeta, VariableMeta, shown_id, write_meta
from .axes import Axes, B, find_axes, lost_dims
from .relax import relax_batch
from .row_init import rows_init
from .shape_math import fold_shape_math
from .unpin import relaxed_sources, unpin_reshapes

__all__ = ["PoolForm", "pool_form"]


@dataclass(frozen=True)
class PoolForm:
    """What :func:`pool_form` made: the metadata it wrote (without the scalar init flags), the
    caller-fed inputs' dims as they were (None: dynamic), the batch axes, and each flagged
    variable's per-row flag input (``{variable id: input}``)."""

    meta: ModelMeta
    dims: Mapping[str, tuple[int | None, ...]]
    axes: Axes
    flags: Mapping[str, str]


def pool_form(model: onnx.ModelProto, meta: ModelMeta, origin: str) -> PoolForm:
    """Rewrite explicit ``model`` in place into the pool's form (see the module) and write its
    metadata.

    Raises:
        OrtStateError: a variable without a fixed size per stream (before anything changes), an
            input without a dim to batch along, a layer that pins the batch (named), or an init
            flag read by other nodes than its ``If``.
    """
    for var in meta.variables:
        _check_variable(var, origin)
    dims = relax_batch(model, meta)
    ones = {(name, axis) for name, was in dims.items() for axis, d in enumerate(was) if d == 1}
    unpin_reshapes(model, relaxed_sources(model, ones))
    fold_shape_math(model)
    axes = _find_axes(model, meta, origin, ones)
    run_meta, flags = rows_init(model, meta, dict(axes.states), origin)
    write_meta(model, run_meta)
    return PoolForm(run_meta, dims, axes, flags)


def _find_axes(proto: onnx.ModelProto, meta: ModelMeta, origin: str, ones: set[tuple[str, int]]) -> Axes:
    """:func:`find_axes`; where it finds none, once more after unpinning the reshapes that only the
    batch followed through the whole model shows restating their input's shape (a loop's output,
    whose body's state has the batch only once the variables have it too)."""
    try:
        return find_axes(proto, meta, origin)
    except OrtStateError:
        lost = lost_dims(proto, meta, origin)
        batch = [] if lost is None else [(n, a) for n, a in lost[1].items() if (n, a) in ones]
        if not batch or not unpin_reshapes(proto, {B: batch[0]}, lost[0]):
            raise
    fold_shape_math(proto)
    return find_axes(proto, meta, origin)


def _check_variable(var: VariableMeta, origin: str) -> None:
    if var.shape is None:
        raise OrtStateError(
            f"{origin}: variable {shown_id(var.id)} has a dynamic rank; a stream pool needs fixed-size states"
        )
    if var.reorder or var.length_input:
        raise OrtStateError(
            f"{origin}: variable {shown_id(var.id)} is a KV cache (reordered by beam_idx or kept in a larger "
            "buffer) that the pool cannot batch: only caches the converter's fused attention appends to are; "
            "generate one stream at a time with ortstate.generate.Generator"
        )
