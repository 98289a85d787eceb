"""What translators call for a compressed weight: its nodes and initializers, written once each
(:class:`~.emitted.EmittedWeights`) and recorded for ``inspect``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnx import TensorProto

from ...ir import Layer
from ..weights_report import EXPANDED
from .emitted import FloatValues
from .exact_split import SPLIT8_MAX_ROWS, SPLIT_MAX_ROWS, write_split_group
from .nbits import MS_DOMAIN, NBitsInputs, gather_inputs, matmul_nbits, nibble_inputs, stacked_inputs
from .plan import SplitGroup, split_group
from .recognise import weight_source
from .weights import FloatWeight, QuantizedWeight

if TYPE_CHECKING:
    from ..context import Context, Node

__all__ = ["MIN_EXPANDED", "float_weight", "gather_quantized", "matmul_quantized", "record_expanded"]

# Folded constants of at least this many values are reported when compressed ones expand to f32.
MIN_EXPANDED = 1024


def matmul_quantized(node: Node, ctx: Context, w: QuantizedWeight) -> str:
    """``A @ W^T`` for a quantized ``W [N, K]`` (MatMul's B, either orientation).

    Exact by default, through the split (see ``exact_split``): a few rows of A (decoding) reach the int8
    kernels split exactly, more rows (a prompt) a 4-bit weight's f32-compute kernel. With
    ``int8_activations`` the activations are quantized once, as OpenVINO's default CPU config
    does. An input of unknown rank keeps the f32-compute kernel (the split reshapes by rank).
    """
    int8_act = ctx.options.int8_activations
    dims = node.input_shape(0).dims
    if int8_act or not dims:
        inputs = _matmul_inputs(ctx, w, native8=int8_act and w.bits == 8)
        return matmul_nbits(ctx.b, node.inputs[0], inputs, accuracy_level=4 if int8_act else 0)
    out = ctx.compressed.split_output(node.layer)
    if out is None:
        _write_split_group(node, ctx, split_group(node.graph, node.layer), len(dims))
        out = ctx.compressed.split_output(node.layer)
    assert out is not None  # the group holds every MatMul reading a quantized weight
    return out


def _matmul_inputs(ctx: Context, w: QuantizedWeight, native8: bool) -> NBitsInputs:
    """``w``'s own ``MatMulNBits`` inputs, once per form: 8-bit ones as nibble halves unless
    ``native8``."""

    def write() -> NBitsInputs:
        nibbles = w.bits == 8 and not native8
        inputs = nibble_inputs(ctx.b, w) if nibbles else stacked_inputs(ctx.b, [w], w.bits)
        how = "int8 activations" if ctx.options.int8_activations else "f32 compute"
        what = "int8 as 4-bit high/low nibbles" if nibbles else f"{w.bits}-bit"
        _record(ctx, w, f"MatMulNBits {what} block {w.block}, {how}", inputs.names)
        return inputs

    return ctx.compressed.matmul_inputs(w, native8, write)


def _write_split_group(node: Node, ctx: Context, group: SplitGroup, rank: int) -> None:
    """Every MatMul of ``group``, written as ``node`` (its first translated) is: their outputs go
    to ``ctx.compressed``."""
    fused4, fused8 = _stacked_inputs(ctx, group.weights(4), 4), _stacked_inputs(ctx, group.weights(8), 8)
    outs = write_split_group(ctx.b, group, node.layer.name, node.inputs[0], rank, fused4, fused8)
    ctx.compressed.add_split_outputs(zip(group.ordered, outs))


def _stacked_inputs(ctx: Context, weights: list[QuantizedWeight], bits: int) -> NBitsInputs | None:
    """The stacked inputs of a split group's ``bits``-wide weights, each recorded for ``inspect``;
    None for no weights."""
    if not weights:
        return None
    inputs = stacked_inputs(ctx.b, weights, bits)
    limit = SPLIT_MAX_ROWS if bits == 4 else SPLIT8_MAX_ROWS
    how = f"exact (int8 split up to {limit} rows, f32 beyond)"
    for w in weights:  # the report counts the shared initializers' bytes once, on the first
        _record(ctx, w, f"MatMulNBits {bits}-bit block {w.block}, {how}", inputs.names)
    return inputs


def gather_quantized(node: Node, ctx: Context, w: QuantizedWeight, indices: str) -> str:
    """Rows ``indices`` of a quantized table ``W [rows, k]``, dequantized in f32 (out of range: 0)."""

    def write() -> NBitsInputs:
        inputs = gather_inputs(ctx.b, w)
        _record(ctx, w, f"GatherBlockQuantized {inputs.attrs['bits']}-bit block {w.block}", inputs.names)
        return inputs

    inputs = ctx.compressed.gather_inputs(w, write)
    data, *params = inputs.names
    return ctx.b.op("GatherBlockQuantized", [data, indices, *params], inputs.attrs, domain=MS_DOMAIN)


def float_weight(ctx: Context, w: FloatWeight, transposed: bool = False) -> tuple[str, str]:
    """``(stored, widened)``: the f16/bf16 initializer (``transposed``: written as its transpose)
    and its Cast to f32."""

    def write() -> FloatValues:
        if transposed:
            stored = ctx.b.lazy_const(w.value.shape[::-1], w.value.dtype, lambda: w.value.T, f"{w.layer.name}_t")
        else:
            stored = ctx.b.const(w.value, hint=w.layer.name)
        widened = ctx.b.op("Cast", [stored], {"to": TensorProto.FLOAT})
        _record(ctx, w, f"{w.value.dtype.name} initializer + Cast", [stored])
        return FloatValues(stored, widened)

    values = ctx.compressed.float_values(w, transposed, write)
    return values.stored, values.widened


def record_expanded(ctx: Context, layer: Layer, size: int, name: str) -> None:
    """Report ``name``, ``size`` values that ``layer`` (a chain of constants, not a Const itself)
    folded to, as :data:`EXPANDED` when the chain starts from compressed constants (not f32/f64
    ones) and is large enough to be a weight."""
    if layer.type == "Const" or size < MIN_EXPANDED:
        return
    source = weight_source(ctx.graph, layer)
    if set(source.split("+")) - {"f32", "f64"}:
        ctx.record_weight(layer.name, source, EXPANDED, [name])


def _record(ctx: Context, w: QuantizedWeight | FloatWeight, how: str, names: tuple[str, ...] | list[str]) -> None:
    ctx.record_weight(w.layer.name, w.source, how, list(names))
