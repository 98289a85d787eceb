"""The passes each stage runs, in their order: one protocol (:class:`Step`, :class:`PassResult`)
and the named pipelines (:data:`CONVERT`, :data:`EXPLICIT`, :data:`LOAD`, :data:`LOAD_CUSTOM_OP`,
:data:`POOL`, :data:`KV_POOL`, :data:`EXPORT`).

A step wraps one pass: it runs on the model and its metadata and says what changed
(:class:`PassResult`); a pass that changes the variables writes its metadata into the model itself,
so what a pipeline leaves is a model that reads as it runs. A step may apply only to some models
(:attr:`Step.applies`): a pipeline given ``own`` (the model's owner, as
:meth:`ortstate.runtime.source.Source.own`) asks for the model to change only when a step applies,
so a model no step changes is never copied.

The order is the point of this module: ``to_explicit`` first (the other passes work on the
explicit form), ``share_kv`` before ``group_decode`` (which reads the buffers ``share_kv`` makes),
``ragged_kv`` before ``slice_last_logits`` and ``prune`` last (the lengths the kernel read before).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import onnx

from ..meta import CONTRIB_DOMAIN, CUSTOM_OP, ModelMeta, write_meta
from .fold import fold_static
from .fuse import fusable, fuse_state_ops
from .grouped_decode import group_decode
from .init_guard import Worth, guard_inits
from .kv_layout import kv_layout
from .kv_share import share_kv, shares_any
from .last_logits import slice_last_logits
from .prune import prune
from .ragged_kv import ragged_kv
from .to_explicit import to_explicit
from .transposes import cancel_transposes

__all__ = [
    "CONVERT",
    "EXPLICIT",
    "EXPORT",
    "KV_POOL",
    "LOAD",
    "LOAD_CUSTOM_OP",
    "POOL",
    "PassOptions",
    "PassResult",
    "Pipeline",
    "Ran",
    "Step",
]


@dataclass(frozen=True)
class PassResult:
    """What one pass did: whether it changed the model, the metadata after it (written into the
    model where the pass changed the variables), and what else it found (a count, names it made,
    a layout: the pass's own answer; None when it has none)."""

    changed: bool
    meta: ModelMeta
    found: Any = None


@dataclass(frozen=True)
class PassOptions:
    """What a pipeline's steps take besides the model: the model's origin (for messages), which
    computed inits the converter guards (``guard_inits``'s ``worth``), and how a session's load
    takes the grouped decode step (``group_decode``: one of :data:`.grouped_decode.MODES`)."""

    origin: str = ""
    worth: Worth | None = None
    grouped_decode: str = "auto"


Done = Mapping[str, PassResult]  # the results of the steps run so far, by step name


def _always(model: onnx.ModelProto, meta: ModelMeta, done: Done) -> bool:
    return True


@dataclass(frozen=True)
class Step:
    """One pass in a pipeline: ``run`` applies it (where ``applies`` says it does)."""

    name: str
    run: Callable[[onnx.ModelProto, ModelMeta, PassOptions], PassResult]
    applies: Callable[[onnx.ModelProto, ModelMeta, Done], bool] = _always


@dataclass(frozen=True)
class Ran:
    """What a pipeline did: the metadata after it, and each step's result (steps that did not
    apply are absent)."""

    meta: ModelMeta
    results: dict[str, PassResult] = field(default_factory=dict)

    def found(self, step: str) -> Any:
        """What step ``step`` found (None where it did not run)."""
        result = self.results.get(step)
        return None if result is None else result.found


@dataclass(frozen=True)
class Pipeline:
    """Named steps, run in their order."""

    name: str
    steps: tuple[Step, ...]

    def run(
        self,
        model: onnx.ModelProto,
        meta: ModelMeta,
        options: PassOptions | None = None,
        own: Callable[[], onnx.ModelProto] | None = None,
    ) -> Ran:
        """Run the steps that apply on ``model`` in place (``own``: called for the model to change,
        once, before the first step that applies). A step's error propagates; the steps before it
        have changed the model."""
        options = options or PassOptions()
        results: dict[str, PassResult] = {}
        for step in self.steps:
            if not step.applies(model, meta, results):
                continue
            if own is not None:
                model, own = own(), None
            result = step.run(model, meta, options)
            results[step.name] = result
            meta = result.meta
        return Ran(meta, results)


# -- the steps: each pass as the protocol sees it ------------------------------------------------


def _with_meta(model: onnx.ModelProto, meta: ModelMeta, after: ModelMeta) -> PassResult:
    """A pass that rewrote the variables: its metadata written into the model."""
    if after != meta:
        write_meta(model, after)
        return PassResult(True, after)
    return PassResult(False, meta)


def _counted(count: int, meta: ModelMeta) -> PassResult:
    return PassResult(bool(count), meta, count)


def _prune_keeping_state_ops(model: onnx.ModelProto, meta: ModelMeta, options: PassOptions) -> PassResult:
    before = len(model.graph.node)
    prune(model.graph, frozenset({CONTRIB_DOMAIN}))
    return _counted(before - len(model.graph.node), meta)


def _prune(model: onnx.ModelProto, meta: ModelMeta, options: PassOptions) -> PassResult:
    before = len(model.graph.node)
    prune(model.graph)
    return _counted(before - len(model.graph.node), meta)


def _guard_inits(model: onnx.ModelProto, meta: ModelMeta, options: PassOptions) -> PassResult:
    worth = options.worth if options.worth is not None else (lambda _, __: False)
    return _with_meta(model, meta, guard_inits(model.graph, meta, worth))


def _to_explicit(model: onnx.ModelProto, meta: ModelMeta, options: PassOptions) -> PassResult:
    after = to_explicit(model, meta)
    write_meta(model, after)
    return PassResult(True, after)


def _share_kv(model: onnx.ModelProto, meta: ModelMeta, options: PassOptions) -> PassResult:
    return _with_meta(model, meta, share_kv(model, meta))


def _group_decode(model: onnx.ModelProto, meta: ModelMeta, options: PassOptions) -> PassResult:
    if options.grouped_decode == "off":
        return _counted(0, meta)
    return _counted(group_decode(model, meta, always=options.grouped_decode == "on"), meta)


def _fuse(model: onnx.ModelProto, meta: ModelMeta, options: PassOptions) -> PassResult:
    fuse_state_ops(model, meta)
    return PassResult(True, meta)


def _pool_form(model: onnx.ModelProto, meta: ModelMeta, options: PassOptions) -> PassResult:
    # imported here: shape inference and ONNX's reference evaluator are the pool's alone, not
    # every session's import
    from .batchable import pool_form

    form = pool_form(model, meta, options.origin)  # writes its metadata
    return PassResult(True, form.meta, form)


def _ragged_kv(model: onnx.ModelProto, meta: ModelMeta, options: PassOptions) -> PassResult:
    return PassResult(True, meta, ragged_kv(model, meta))


def _last_logits(model: onnx.ModelProto, meta: ModelMeta, options: PassOptions) -> PassResult:
    last = slice_last_logits(model)
    return PassResult(last is not None, meta, last)


def _kv_layout(model: onnx.ModelProto, meta: ModelMeta, options: PassOptions) -> PassResult:
    return PassResult(True, meta, kv_layout(model, meta))  # removes the metadata: the tools keep no state


def _custom_op(model: onnx.ModelProto, meta: ModelMeta, done: Done) -> bool:
    return meta.form == CUSTOM_OP


def _shares(model: onnx.ModelProto, meta: ModelMeta, done: Done) -> bool:
    return shares_any(model, meta)


def _shared(model: onnx.ModelProto, meta: ModelMeta, done: Done) -> bool:
    return "share_kv" in done


def _unshared(model: onnx.ModelProto, meta: ModelMeta, done: Done) -> bool:
    return not any(v.length_input for v in meta.variables)


def _fusable(model: onnx.ModelProto, meta: ModelMeta, done: Done) -> bool:
    return fusable(model)


TO_EXPLICIT = Step("to_explicit", _to_explicit, _custom_op)

# -- the pipelines ---------------------------------------------------------------------------------

#: The converter's, on the custom-op form it writes: what no output needs (the state ops kept), the
#: computed inits worth skipping behind flags, then the transposes and static shapes both forms keep.
CONVERT = Pipeline(
    "convert",
    (
        Step("prune", _prune_keeping_state_ops),
        Step("guard_inits", _guard_inits),
        Step("cancel_transposes", lambda m, meta, o: _counted(cancel_transposes(m.graph), meta)),
        Step("fold_static", lambda m, meta, o: _counted(fold_static(m.graph), meta)),
    ),
)
#: The explicit form from the custom-op form (``convert(explicit_state=True)``).
EXPLICIT = Pipeline("explicit", (TO_EXPLICIT,))
#: A session's explicit form: made from the custom-op form where need be, then the KV variables in
#: buffers with spare rows, and a grouped attention's decode step over those buffers.
LOAD = Pipeline(
    "load",
    (
        TO_EXPLICIT,
        Step("share_kv", _share_kv, _shares),
        Step("group_decode", _group_decode, _shared),
    ),
)
#: A session of the custom-op form: one state op per dtype group.
LOAD_CUSTOM_OP = Pipeline("load-custom-op", (Step("fuse_state_ops", _fuse, _fusable),))
#: The stream pool's form of a fixed-size-state model (see :mod:`.batchable.pool_form`).
POOL = Pipeline("pool", (TO_EXPLICIT, Step("pool_form", _pool_form)))
#: The KV stream pool's: KV variables in buffers, each stream's in an arena row, the LM head on the
#: last position where asked, and what the kernel no longer reads pruned.
KV_POOL = Pipeline(
    "kv-pool",
    (
        TO_EXPLICIT,
        Step("share_kv", _share_kv, _unshared),
        Step("ragged_kv", _ragged_kv),
        Step("slice_last_logits", _last_logits),
        Step("prune", _prune),
    ),
)
#: ``ortstate export``'s, on the explicit form: the past/present layout of ONNX LLM tools.
EXPORT = Pipeline("export", (Step("kv_layout", _kv_layout),))
