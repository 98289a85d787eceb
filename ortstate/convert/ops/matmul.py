"""MatMul-1."""

from __future__ import annotations

from ..compressed import FloatWeight, QuantizedWeight, float_weight, matmul_quantized, record_expanded
from ..context import Context, Node
from ..dtypes import numpy_type
from ..registry import translator


def _swap_last_two(node: Node, ctx: Context, i: int) -> str:
    """Input ``i`` with its two innermost dims swapped; a 1-D input is left alone (OpenVINO ignores the flag)."""
    rank = node.input_rank(i)
    if rank < 2:
        return node.inputs[i]
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    return ctx.b.op("Transpose", [node.inputs[i]], {"perm": perm})


@translator("MatMul", 1)
def matmul_v1(node: Node, ctx: Context) -> list[str]:
    """MatMul-1 (A, B; ``transpose_a``, ``transpose_b``) -> [Transpose] + MatMul.

    Both follow numpy matmul: 1-D operands become a row (A) or column (B) vector whose added dim is dropped
    from the result, and batch dims broadcast. ONNX MatMul has no transpose flags, so a flagged operand of
    rank >= 2 gets an explicit Transpose of its last two dims, except against a 1-D operand v, where
    A^T v = v A and v B^T = B v need none (onnxruntime 1.31 fuses Transpose(A) @ v into a wrong result).
    A compressed weight B (see ``compressed``) becomes ``MatMulNBits``.
    """
    weight = node.weight(1)
    if isinstance(weight, QuantizedWeight):  # NNCF's int8/int4 weight, kept compressed
        return [matmul_quantized(node, ctx, weight)]
    transpose_a, transpose_b = node.attr_bool("transpose_a", False), node.attr_bool("transpose_b", False)
    rank_a, rank_b = node.input_rank(0), node.input_rank(1)
    if (transpose_a and rank_a >= 2 and rank_b == 1) or (transpose_b and rank_b >= 2 and rank_a == 1):
        return [ctx.b.op("MatMul", [node.inputs[1], node.inputs[0]])]
    a = _swap_last_two(node, ctx, 0) if transpose_a else node.inputs[0]
    b = (_constant_transposed(node, ctx) or _swap_last_two(node, ctx, 1)) if transpose_b else node.inputs[1]
    return [ctx.b.op("MatMul", [a, b])]


def _constant_transposed(node: Node, ctx: Context) -> str | None:
    """B^T of a constant 2-D B (a weight), as an initializer written transposed, else None.

    A Transpose node would do, but ONNX Runtime folds it at load into a copy it owns and keeps
    beside the prepacked copy of MatMul: the weights twice more in memory (and ``[K, N]`` is the
    faster layout for one decode row: ``FusedMatMul`` with ``transB`` measured 1.4x slower).
    """
    weight = node.weight(1)
    if isinstance(weight, FloatWeight):
        return float_weight(ctx, weight, transposed=True)[1] if weight.value.ndim == 2 else None
    value = node.const(1)
    if value is None or value.ndim != 2:
        return None
    dtype = numpy_type(node.onnx_input_type(1))
    name = ctx.b.lazy_const(value.shape[::-1], dtype, lambda: value.T.astype(dtype), f"{node.layer.name}_transposed")
    record_expanded(ctx, node.graph.producer(node.layer, 1)[0], value.size, name)
    return name
