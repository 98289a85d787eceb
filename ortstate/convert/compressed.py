"""Compressed weights as ONNX Runtime runs them: MatMulNBits, GatherBlockQuantized, f16 + Cast.

Why these ops, measured with ``benchmarks/weights_kernels.py`` (ONNX Runtime 1.31 CPU, AVX2):

- ``com.microsoft`` ``MatMulNBits`` is emitted directly rather than standard blocked
  ``DequantizeLinear`` + ``MatMul``: ONNX Runtime fuses the latter into the same kernel, but at
  ``session.qdq_matmulnbits_accuracy_level``, whose default 4 quantizes the activations to int8
  (logits move ~1e-2 from OpenVINO's exact results), and a plain ONNX Runtime user would not know
  to set it. Written directly, ``accuracy_level`` 0 computes ``(q - zp) * scale`` in f32 exactly
  as OpenVINO's CPU plugin does; the file also keeps OpenVINO's ``[N, K]`` layout (DQ's blocked
  form is ``[K, N]``: a transpose at conversion and another when ORT fuses it).
- 4-bit codes go in as stored: OpenVINO packs u4 two a byte, the first value in the low nibble,
  which is ``MatMulNBits``' ``B`` layout, so the bytes are the ``.bin``'s (i4 flips each nibble's
  top bit: ``q + 8``).
- Decoding (at most ``SPLIT_MAX_ROWS`` rows of activations) runs the int8 kernels
  (``accuracy_level`` 4), which ONNX Runtime makes 1.5x (4-bit) to 20x (8-bit) faster than its
  f32-compute ones on AVX2, on activations split exactly into three parts whose int8
  quantization loses nothing that f32 would keep (:func:`_int8_grid_parts`): the result is
  OpenVINO's exact one to f32 rounding. More rows (a prompt) run a 4-bit weight's f32-compute
  kernel, faster there, through an ``If`` on the row count.
- 8-bit weights are written as they are (``MatMulNBits`` bits=8) and always split: ONNX Runtime
  1.31 has no fast f32-compute 8-bit kernel on x86 (at ``accuracy_level`` 0 it dequantizes all of
  B on every call). Where the split cannot be built (an input of unknown rank) an int8 weight runs
  as one 4-bit ``MatMulNBits`` over twice the rows, its high and low nibbles: ``q - zp = 16 (hi -
  zp_hi) + (lo - zp_lo)`` with ``zp = 16 zp_hi + zp_lo``, scales ``16 s`` and ``s``, then the two
  halves added (exact, the int8 weight's memory). With ``int8_activations`` (an explicit option,
  what OpenVINO's default CPU config does) the activations are quantized once: int8 runs as
  ``MatMulNBits`` bits=8 and int4 at ``accuracy_level`` 4.
- Embeddings: ``GatherBlockQuantized`` dequantizes the gathered rows in f32 and gives zeros for
  out-of-range indices (negative ones count from the end): OpenVINO's Gather-8, with no guard.
- f16/bf16 weights stay in their type in the file and reach f32 through a Cast (which ONNX
  Runtime folds at load for a MatMul: its CPU provider has no f32-activation kernel over f16
  weights); a Gather gathers the f16 rows first, so tables stay f16 in memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

from ..ir import Layer
from .context import Context, Node
from .weights import FloatWeight, QuantizedWeight, plan_weights

__all__ = ["MS_DOMAIN", "float_weight", "gather_quantized", "matmul_quantized"]

MS_DOMAIN = "com.microsoft"


def _pack4(values: np.ndarray) -> np.ndarray:
    """Two 4-bit values a byte along the last axis (padded to even), the first in the low nibble."""
    if values.shape[-1] % 2:
        values = np.concatenate([values, np.zeros(values.shape[:-1] + (1,), values.dtype)], axis=-1)
    return (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)


def _blocks(w: QuantizedWeight) -> int:
    return -(-w.k // w.block)


def _per_block(value: np.ndarray, w: QuantizedWeight) -> np.ndarray:
    """``[rows, groups]`` -> ``[rows, blocks]``: each group's value repeated in each of its blocks."""
    repeat = _blocks(w) if w.groups == 1 else w.group // w.block
    return np.repeat(value, repeat, axis=1)


def _blocked_codes(codes: np.ndarray, w: QuantizedWeight) -> np.ndarray:
    """``[rows, k]`` codes padded to whole blocks: ``[rows, blocks, block]``."""
    pad = _blocks(w) * w.block - w.k
    if pad:
        codes = np.pad(codes, ((0, 0), (0, pad)))
    return codes.reshape(codes.shape[0], _blocks(w), w.block)


_CHUNK = 4096  # rows transformed at a time: a 151936-row LM head never exists in more than one copy


def _by_rows(w: QuantizedWeight, shape: tuple[int, ...], fill: Any) -> Any:
    """A ``make`` for :meth:`GraphBuilder.lazy_const`: a ``uint8`` array of ``shape`` whose rows
    ``[start, stop)`` of the weight ``fill(start, stop)`` computes, a chunk at a time."""

    def make() -> np.ndarray:
        out = np.empty(shape, np.uint8)
        for start in range(0, w.rows, _CHUNK):
            fill(out, start, min(start + _CHUNK, w.rows))
        return out

    return make


def _record(ctx: Context, w: QuantizedWeight | FloatWeight, how: str, names: list[str]) -> None:
    ctx.record_weight(w.layer.name, w.source, how, names)


def matmul_quantized(node: Node, ctx: Context, w: QuantizedWeight) -> str:
    """``A @ W^T`` for a quantized ``W [N, K]`` (MatMul's B, either orientation).

    Exact by default, through :func:`_split_group`: a few rows of A (decoding) reach the int8
    kernels split exactly, more rows (a prompt) a 4-bit weight's f32-compute kernel. With
    ``int8_activations`` the activations are quantized once, as OpenVINO's default CPU config
    does. An input of unknown rank keeps the f32-compute kernel (the split reshapes by rank).
    """
    int8_act = ctx.options.int8_activations
    dims = node.input_shape(0).dims
    if int8_act or dims is None or not dims:
        inputs, attrs, nibbles = _weight_inputs(ctx, w, native8=int8_act and w.bits == 8)
        return _matmul_node(ctx.b, node.inputs[0], inputs, {**attrs, "accuracy_level": 4 if int8_act else 0}, nibbles)
    done = ctx.emitted.get((node.layer.id, "split-group"))
    if done is None:
        _split_group(node, ctx, w, len(dims))
        done = ctx.emitted[(node.layer.id, "split-group")]
    return done[0][0]


def _weight_inputs(ctx: Context, w: QuantizedWeight, native8: bool) -> tuple[list[str], dict[str, Any], bool]:
    """``w``'s own ``MatMulNBits`` initializers and attributes (no ``accuracy_level``), once per form,
    and whether they are an 8-bit weight's nibble halves (unless ``native8``)."""
    key = (w.layer.id, "matmul", native8)
    if key not in ctx.emitted:
        nibbles = w.bits == 8 and not native8
        names, attrs = _nibble_inputs(ctx, w) if nibbles else _stacked(ctx, [w], w.bits)
        ctx.emitted[key] = (names, attrs, nibbles)
        how = "int8 activations" if ctx.options.int8_activations else "f32 compute"
        what = "int8 as 4-bit high/low nibbles" if nibbles else f"{w.bits}-bit"
        _record(ctx, w, f"MatMulNBits {what} block {w.block}, {how}", names)
    return ctx.emitted[key]


def _matmul_node(graph: Any, a: str, inputs: list[str], attrs: dict[str, Any], nibbles: bool) -> str:
    """``MatMulNBits(a, *inputs)`` appended to ``graph`` (a builder), plus the add of an 8-bit
    weight's two nibble halves."""
    out = graph.op("MatMulNBits", [a, *inputs], attrs, domain=MS_DOMAIN)
    if not nibbles:
        return out
    high, low = graph.op("Split", [out], {"axis": -1, "num_outputs": 2}, outputs=2)
    return graph.op("Add", [high, low])


# Up to this many rows of A take the exact int8 split (three kernel rows each), more a 4-bit
# weight's f32-compute kernel. ONNX Runtime 1.31, AVX2, a 4864x896 4-bit weight, 2 threads
# (``benchmarks/weights_kernels.py``): the int8 kernel takes ~225 us for 3 rows and ~46 us for each
# further row, the f32 one ~360 us for 1 row and ~75 us for each further row: they cross at 3.
SPLIT_MAX_ROWS = 3


def _split_group(node: Node, ctx: Context, w: QuantizedWeight, rank: int) -> None:
    """Every compressed-weight MatMul reading ``node``'s A (q/k/v, gate/up) with ``w``'s block and
    K, as one ``If`` on A's row count (``ctx.emitted[(layer id, "split-group")]`` holds each one's
    output). Their weights of one bit width run as one ``MatMulNBits`` over the rows of all of them
    (one initializer, split after): ONNX Runtime 1.31 ran q/k/v as one kernel in 0.18 ms instead of
    0.28 ms, gate/up in 1.19 instead of 1.38 (a 3-row split, 2 threads: 7 ms a token over 24 layers).

    - At most :data:`SPLIT_MAX_ROWS` rows: A split once (:func:`_int8_grid_parts`), the kernels at
      ``accuracy_level`` 4 on the three parts, summed.
    - More rows: 4-bit weights at ``accuracy_level`` 0 on A (the same initializer: ONNX Runtime
      prepacks a 4-bit weight once for each kernel). 8-bit weights take the split for any row
      count (ONNX Runtime has no fast f32-compute 8-bit kernel, and their 4-bit nibble form would
      be a second copy of the weight in the file): the ``If`` gives the parts out and their kernel
      runs once, after it.

    The split's ~20 small values live in the branches: in the main graph, 24 layers of them made
    ONNX Runtime's allocation planner (quadratic in a graph's values) take 9.7 s instead of 3.3 s
    to load the real-size int4 model. So a group of 8-bit weights only still gets its ``If``, both
    branches splitting. A 1-D A (one row) needs no ``If``.
    """
    graph, plan = node.graph, plan_weights(node.graph)
    src, port = graph.producer(node.layer, 0)
    members: list[tuple[Layer, QuantizedWeight]] = []
    for dst, index in graph.consumers(src, src.outputs.index(port)):
        other = plan.weights.get(graph.producer(dst, 1)[0].id) if dst.type == "MatMul" and index == 0 else None
        done = (dst.id, "split-group") in ctx.emitted
        if isinstance(other, QuantizedWeight) and (other.block, other.k) == (w.block, w.k) and not done:
            members.append((dst, other))
    four = [mw for _, mw in members if mw.bits == 4]
    eight = [mw for _, mw in members if mw.bits == 8]
    fused4, fused8 = _fused_inputs(ctx, four, 4), _fused_inputs(ctx, eight, 8)
    b, x = ctx.b, node.inputs[0]
    axis = b.const(np.array([-2], np.int64), hint="axis_m2")

    def summed(graph_b: Any, parts: str, fused: tuple[list[str], dict[str, Any]]) -> str:
        rows = _matmul_node(graph_b, parts, fused[0], {**fused[1], "accuracy_level": 4}, False)
        return graph_b.op("ReduceSum", [rows, axis], {"keepdims": 0})

    def branch(graph_b: Any, few: bool) -> list[str]:
        """The 4-bit weights' result, then the parts if 8-bit weights need them."""
        outs, parts = [], None
        if fused4 is not None:
            if few:
                parts = _int8_grid_parts(x, rank, w, graph_b, b)
                outs.append(summed(graph_b, parts, fused4))
            else:
                outs.append(_matmul_node(graph_b, x, fused4[0], {**fused4[1], "accuracy_level": 0}, False))
        if fused8 is not None:
            outs.append(parts or _int8_grid_parts(x, rank, w, graph_b, b))
        return outs

    if rank == 1:
        outs = branch(b, True)
    else:
        branches = {}
        for name, few in (("then_branch", True), ("else_branch", False)):
            sub = b.sub(f"{node.layer.name}/{'few' if few else 'many'}_rows")
            for out in branch(sub, few):
                sub.add_output(out, TensorProto.FLOAT, None)
            branches[name] = sub.graph()
        limit = b.const(np.array(SPLIT_MAX_ROWS * w.k, np.int64), hint="split_max_values")
        few_rows = b.op("LessOrEqual", [b.op("Size", [x]), limit])
        count = (fused4 is not None) + (fused8 is not None)
        outs = b.op("If", [few_rows], branches, outputs=count)
        outs = [outs] if count == 1 else outs
    results = []
    if fused4 is not None:
        results += _split_rows(b, outs[0], four)
    if fused8 is not None:
        results += _split_rows(b, summed(b, outs[-1], fused8), eight)
    ordered = [dst for dst, mw in members if mw.bits == 4] + [dst for dst, mw in members if mw.bits == 8]
    for dst, out in zip(ordered, results):
        ctx.emitted[(dst.id, "split-group")] = ([out], {}, False)


def _split_rows(b: Any, out: str, weights: list[QuantizedWeight]) -> list[str]:
    """The result of a fused ``MatMulNBits`` cut back into each weight's columns."""
    if len(weights) == 1:
        return [out]
    sizes = b.const(np.array([mw.rows for mw in weights], np.int64), hint="split_sizes")
    return b.op("Split", [out, sizes], {"axis": -1}, outputs=len(weights))


def _fused_inputs(ctx: Context, weights: list[QuantizedWeight], bits: int) -> tuple[list[str], dict[str, Any]] | None:
    """:func:`_stacked` for a split group's ``bits``-wide weights, each recorded for ``inspect``;
    None for no weights."""
    if not weights:
        return None
    names, attrs = _stacked(ctx, weights, bits)
    how = f"exact (int8 split up to {SPLIT_MAX_ROWS} rows, f32 beyond)" if bits == 4 else "exact (int8 split)"
    for mw in weights:  # the report counts the shared initializers' bytes once, on the first
        _record(ctx, mw, f"MatMulNBits {bits}-bit block {mw.block}, {how}", names)
    return names, attrs


def _stacked(ctx: Context, weights: list[QuantizedWeight], bits: int) -> tuple[list[str], dict[str, Any]]:
    """One ``MatMulNBits``' initializers and attributes (no ``accuracy_level``) for ``weights`` (all
    ``bits`` wide, one block and K) stacked by rows, their codes as stored: 4-bit two a byte (the
    ``.bin``'s bytes where rows start on a byte; i4: each nibble + 8), 8-bit one."""
    w0, b = weights[0], ctx.b
    blocks = _blocks(w0)
    per_block = w0.block * bits // 8
    rows = sum(mw.rows for mw in weights)
    shape = (rows, blocks, per_block)

    def stored(mw: QuantizedWeight) -> np.ndarray | None:
        """``mw``'s 4-bit bytes as in the ``.bin`` (a view), or None (they need packing)."""
        if bits != 4 or mw.packed is None or mw.k % mw.block:
            return None
        return mw.packed_unsigned() if mw.signed else mw.packed

    def make() -> np.ndarray:
        if len(weights) == 1 and (view := stored(w0)) is not None:
            return view.reshape(shape)  # no copy
        out = np.empty(shape, np.uint8)
        offset = 0
        for mw in weights:
            view = stored(mw)
            for start in range(0, mw.rows, _CHUNK):
                stop = min(start + _CHUNK, mw.rows)
                if view is not None:
                    chunk = view[start:stop].reshape(stop - start, blocks, per_block)
                else:
                    codes = _blocked_codes(mw.codes(start, stop), mw)
                    chunk = _pack4(codes) if bits == 4 else codes
                out[offset + start : offset + stop] = chunk
            offset += mw.rows
        return out

    hint = w0.layer.name if len(weights) == 1 else f"{w0.layer.name}+{len(weights) - 1}"
    data = b.lazy_const(shape, np.uint8, make, hint)
    scale = np.concatenate([_per_block(mw.scale, mw) for mw in weights])
    zp = np.concatenate([_per_block(mw.zero_point, mw) for mw in weights])
    names = [data, b.const(scale.reshape(-1), hint=f"{hint}_scale")]
    if np.any(zp != 1 << (bits - 1)):
        names.append(b.const((_pack4(zp) if bits == 4 else zp).reshape(-1), hint=f"{hint}_zero_point"))
    return names, {"K": w0.k, "N": rows, "bits": bits, "block_size": w0.block}


# The activations' split: three parts, the first two exactly on int8 grids.
_PARTS = 3
_TINY = np.float32(1e-30)  # the scale of an all-zero block (any positive value keeps 0 / s finite)


def _int8_grid_parts(x: str, rank: int, w: QuantizedWeight, b: Any, consts: Any) -> str:
    """``x [..., K]`` as ``[..., 3, K]`` (nodes in builder ``b``, constants in ``consts``): parts
    ``x1 + x2 + x3 = x``, for one ``MatMulNBits`` call at ``accuracy_level`` 4 whose three result
    rows sum (``ReduceSum``) to ``x @ W^T``.

    ``accuracy_level`` 4 quantizes A to int8 per block of ``block_size`` values along K,
    symmetric, scale ``max|a| / 127`` (MLAS). A block whose values already lie on that grid --
    ``s * round(a / s)`` with ``s = max|a| / 127``, which holds ``max|a|`` itself as ``127 s`` -- is
    quantized with no error, and its dot product with the codes is integer arithmetic. ``x1`` is
    ``x`` on its grid, ``x2`` the remainder ``x - x1`` on its own grid (127x finer), ``x3`` what is
    left (at most ``max|x| / 64516``), which the kernel quantizes with an error below ``max|x| /
    2**23``: f32's own rounding. The three rows cost one pass over the weight (they share each
    unpacked block). ``tests/convert/test_weights.py`` pins the result to f32 accuracy on
    heavy-tailed activations: if a later ONNX Runtime quantizes differently, it fails, not drifts.
    """
    block = w.block
    blocks = -(-w.k // block)
    pad = blocks * block - w.k
    if pad:  # per channel with K not a multiple of the block: the kernel's last block is partial
        pads = np.zeros(2 * rank, np.int64)
        pads[-1] = pad
        x = b.op("Pad", [x, consts.const(pads, hint="pads")])
    keep = [0] * (rank - 1)
    blocked = b.op("Reshape", [x, consts.const(np.array(keep + [blocks, block], np.int64), hint="blocked")])
    last = consts.const(np.array([-1], np.int64), hint="axis_m1")
    tiny, inv127 = consts.const(_TINY, hint="tiny"), consts.const(np.float32(1 / 127), hint="inv127")
    parts, rest = [], blocked
    for _ in range(_PARTS - 1):
        amax = b.op("ReduceMax", [b.op("Abs", [rest]), last], {"keepdims": 1})
        scale = b.op("Mul", [b.op("Max", [amax, tiny]), inv127])
        on_grid = b.op("Mul", [b.op("Round", [b.op("Div", [rest, scale])]), scale])
        parts.append(on_grid)
        rest = b.op("Sub", [rest, on_grid])
    parts.append(rest)
    stacked = b.op("Concat", parts, {"axis": -2})  # [..., 3 * blocks, block]
    shape = consts.const(np.array(keep + [_PARTS, blocks * block], np.int64), hint="parts")
    rows = b.op("Reshape", [stacked, shape])
    if pad:
        zero, k = consts.const(np.array([0], np.int64), hint="zero"), consts.const(np.array([w.k], np.int64), hint="k")
        rows = b.op("Slice", [rows, zero, k, last])
    return rows


def _nibble_inputs(ctx: Context, w: QuantizedWeight) -> tuple[list[str], dict[str, Any]]:
    """An 8-bit weight as one 4-bit ``MatMulNBits`` over twice its rows: high nibbles (scale
    ``16 s``) above low nibbles (scale ``s``), added after (see the module docstring)."""
    b, hint, blocks = ctx.b, w.layer.name, _blocks(w)
    scale, zp = _per_block(w.scale, w), _per_block(w.zero_point, w)
    shape = (2 * w.rows, blocks, w.block // 2)

    def fill_split(out: np.ndarray, start: int, stop: int) -> None:
        codes = w.codes(start, stop)
        out[start:stop] = _pack4(_blocked_codes(codes >> 4, w))
        out[w.rows + start : w.rows + stop] = _pack4(_blocked_codes(codes & 15, w))

    data = b.lazy_const(shape, np.uint8, _by_rows(w, shape, fill_split), hint)
    scale = np.concatenate([scale * 16, scale])
    zp = np.concatenate([zp >> 4, zp & 15])
    names = [data, b.const(scale.reshape(-1), hint=f"{hint}_scale")]
    if np.any(zp != 8):
        names.append(b.const(_pack4(zp).reshape(-1), hint=f"{hint}_zero_point"))
    return names, {"K": w.k, "N": 2 * w.rows, "bits": 4, "block_size": w.block}


def gather_quantized(node: Node, ctx: Context, w: QuantizedWeight, indices: str) -> str:
    """Rows ``indices`` of a quantized table ``W [rows, k]``, dequantized in f32 (out of range: 0)."""
    key = (w.layer.id, "gather", False)
    if key not in ctx.emitted:
        ctx.emitted[key] = _gather_inputs(ctx, w)
    (data, *params), attrs, _ = ctx.emitted[key]
    return ctx.b.op("GatherBlockQuantized", [data, indices, *params], attrs, domain=MS_DOMAIN)


def _gather_inputs(ctx: Context, w: QuantizedWeight) -> tuple[list[str], dict[str, Any], bool]:
    b, hint = ctx.b, w.layer.name
    scale, zp = _per_block(w.scale, w), _per_block(w.zero_point, w)
    bits = 4 if w.bits == 4 and w.k % 2 == 0 else 8  # odd rows of 4-bit codes: one code a byte
    if bits == 4:
        packed = w.packed_unsigned if w.packed is not None else (lambda: _pack4(w.codes()))
        data = b.lazy_const((w.rows, w.k // 2), np.uint8, packed, hint)
        zp_data = _pack4(zp)
    else:
        data = b.lazy_const((w.rows, w.k), np.uint8, w.codes, hint)  # u8: the .bin's bytes
        zp_data = zp
    names = [data, b.const(scale, hint=f"{hint}_scale")]
    if np.any(zp != 1 << (bits - 1)):
        names.append(b.const(zp_data, hint=f"{hint}_zero_point"))
    attrs = {"bits": bits, "block_size": w.block, "gather_axis": 0, "quantize_axis": 1}
    _record(ctx, w, f"GatherBlockQuantized {bits}-bit block {w.block}", names)
    return names, attrs, False


def float_weight(ctx: Context, w: FloatWeight, transposed: bool = False) -> tuple[str, str]:
    """``(stored, widened)``: the f16/bf16 initializer (``transposed``: written as its transpose)
    and its Cast to f32."""
    key = (w.layer.id, "float", transposed)
    if key not in ctx.emitted:
        if transposed:
            stored = ctx.b.lazy_const(w.value.shape[::-1], w.value.dtype, lambda: w.value.T, f"{w.layer.name}_t")
        else:
            stored = ctx.b.const(w.value, hint=w.layer.name)
        widened = ctx.b.op("Cast", [stored], {"to": TensorProto.FLOAT})
        ctx.emitted[key] = ([stored, widened], {}, False)
        _record(ctx, w, f"{w.value.dtype.name} initializer + Cast", [stored])
    (stored, widened), _, _ = ctx.emitted[key]
    return stored, widened
