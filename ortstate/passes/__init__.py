"""Graph passes: ONNX model -> ONNX model, on one walker (:mod:`.walk`).

The converter writes the custom-op form; every other form the runtime or a user gets is made here,
each by exactly one pass, one module each:

- :func:`to_explicit` (:mod:`.to_explicit`): the explicit form (``convert(explicit_state=True)``,
  and a session's ``form="auto"``);
- :func:`guard_inits` (:mod:`.init_guard`): computed inits behind their variable's init flag, in
  both forms (the converter guards those worth skipping, :func:`to_explicit` every one it needs);
- :func:`fuse_state_ops` (:mod:`.fuse`): the custom-op form with one state op per dtype group
  (what a session of the custom-op form runs; never saved);
- :func:`share_kv` (:mod:`.kv_share`): the explicit form's KV variables given length inputs and
  outputs, so a session can keep them in buffers with spare rows (done on load, never saved);
- :func:`~.ragged_kv.ragged_kv` (:mod:`.ragged_kv`): those buffers read at a length per row, so one
  run steps streams whose caches hold different numbers of rows (the KV pool's form, never saved);
- :func:`group_decode` (:mod:`.grouped_decode`): a grouped attention's one-row step over those
  buffers as batched products that read each KV head once (done on load, never saved);
- :func:`kv_layout` (:mod:`.kv_layout`): the past/present layout of ONNX LLM tools
  (onnxruntime-genai, optimum), made from the explicit form for ``ortstate export``;
- :func:`prune` (:mod:`.prune`): what no output needs, dropped;
- :func:`fold_static` (:mod:`.fold`): what every run computes the same way, computed once (shapes
  with numbers for dims, an RNN's ``sequence_lens`` that is the whole sequence, reshapes to the
  same shape), from what :mod:`.symbolic` and :mod:`.dims` know before a run and
  :mod:`.sequence_lens` recognises;
- :func:`cancel_transposes` (:mod:`.transposes`): Transposes that undo each other (the recurrent
  layers' layouts), cancelled;
- :func:`offload_initializers` (:mod:`.offload`): large initializers out of the protobuf, for ONNX
  Runtime to be handed (see :mod:`ortstate.runtime.large`).

Around them: :mod:`.walk` (the one walker), :mod:`.build` (new names and nodes),
:mod:`.pipelines` (the passes each stage runs, in their order, behind one protocol), and
:mod:`.batchable` (what makes a model batchable by the stream pool; imported by the pool only).

A pass changes the model it is given in place and checks before it changes anything (raising
:class:`~ortstate.errors.PassError`); the caller copies a model that is not its own. A pass imports
nothing from the converter or the runtime: the ONNX model and :mod:`ortstate.meta` are all it
knows. Another layout (e.g. the past/present names of onnxruntime-genai) is one more module here.
"""

from .fold import fold_static
from .fuse import fusable, fuse_state_ops
from .grouped_decode import group_decode
from .init_guard import guard_inits
from .kv_layout import KvCache, kv_layout
from .kv_share import share_kv, shares_all, shares_any
from .offload import Offloaded, offload_initializers, offloads_any
from .prune import prune
from .to_explicit import to_explicit
from .transposes import cancel_transposes

__all__ = [
    "KvCache",
    "Offloaded",
    "cancel_transposes",
    "fold_static",
    "fusable",
    "fuse_state_ops",
    "group_decode",
    "guard_inits",
    "kv_layout",
    "offload_initializers",
    "offloads_any",
    "prune",
    "share_kv",
    "shares_all",
    "shares_any",
    "to_explicit",
]
