"""The exact int8 split: a split group's MatMuls on the int8 kernels, with OpenVINO's f32 result.

- At most :data:`SPLIT_MAX_ROWS` rows of the activations: they are split once
  (:func:`int8_grid_parts`) and the kernels run at ``accuracy_level`` 4 on the three parts, summed.
- More rows: 4-bit weights at ``accuracy_level`` 0 on the activations (the same initializer: ONNX
  Runtime prepacks a 4-bit weight once for each kernel). 8-bit weights are split up to
  :data:`SPLIT8_MAX_ROWS` rows (ONNX Runtime has no fast f32-compute 8-bit kernel, and their 4-bit
  nibble form would be a second copy of the weight in the file) and dequantized to f32 in the run
  beyond (:func:`~.nbits.dequantized_matmul`). Each bit width has its own ``If`` on the row count.

The split's ~20 small values live in the ``If``'s branches: in the main graph, 24 layers of them
made ONNX Runtime's allocation planner (quadratic in a graph's values) take 9.7 s instead of 3.3 s
to load the real-size int4 model. A 1-D activation (one row) needs no ``If``.

One ``MatMulNBits`` over a group's stacked weights: ONNX Runtime 1.31 ran q/k/v as one kernel in
0.18 ms instead of 0.28 ms, gate/up in 1.19 instead of 1.38 (a 3-row split, 2 threads: 7 ms a
token over 24 layers).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
from onnx import TensorProto

from ...meta import split_rows_name
from ..builder import GraphBuilder
from .nbits import NBitsInputs, dequantized_matmul, matmul_nbits
from .plan import SplitGroup
from .weights import QuantizedWeight

__all__ = ["SPLIT8_MAX_ROWS", "SPLIT_MAX_ROWS", "int8_grid_parts", "write_split_group"]

# Up to this many rows of A take the exact int8 split (three kernel rows each), more a 4-bit
# weight's f32-compute kernel. ONNX Runtime 1.31, AVX2, a 4864x896 4-bit weight, 2 threads
# (``benchmarks/weights_kernels.py``): the int8 kernel takes ~225 us for 3 rows and ~46 us for each
# further row, the f32 one ~360 us for 1 row and ~75 us for each further row: they cross at 3.
# Written as an initializer the runtime sets to the CPU's own crossing as it loads
# (:func:`~ortstate.meta.split_rows_name`, :mod:`ortstate.runtime.split_rows`: 12 with AVX-512 VNNI).
SPLIT_MAX_ROWS = 3

# Up to this many rows of A, 8-bit weights take the exact split; more rows dequantize the weight to
# f32 in the run for one f32 MatMul. The split costs three int8 kernel rows per row of A and
# ``3 x rows x N`` f32 of partial results; the f32 way one pass over the weight and an ``N x K`` f32
# temporary. ONNX Runtime 1.31, 2 threads, AVX-512, a 151936 x 896 LM head: the split ~2.3 ms a row,
# the f32 way ~280 ms + ~1.4 ms a row; they cross near 300 rows, where the split's partials also
# outgrow the f32 copy of the weight (at 4,000 rows they held 7 GB).
SPLIT8_MAX_ROWS = 256

# The activations' split: three parts, the first two exactly on int8 grids.
_PARTS = 3
_TINY = np.float32(1e-30)  # the scale of an all-zero block (any positive value keeps 0 / s finite)


def write_split_group(
    b: GraphBuilder,
    group: SplitGroup,
    name: str,
    x: str,
    rank: int,
    fused4: NBitsInputs | None,
    fused8: NBitsInputs | None,
) -> list[str]:
    """The outputs of ``group``'s MatMuls (in :attr:`SplitGroup.ordered` order) on activations
    ``x`` of ``rank``, from its 4-bit and 8-bit weights' stacked inputs (None: no such weights);
    ``name`` (the MatMul writing the group) names the ``If`` branches."""
    writer = _SplitWriter(b, group, name, x, rank, b.const(np.array([-2], np.int64), hint="axis_m2"))
    results = []
    if fused4 is not None:
        f32 = partial(matmul_nbits, a=x, inputs=fused4, accuracy_level=0)
        split = writer.by_rows(fused4, f32, SPLIT_MAX_ROWS, "int4", set_at_load=True)
        results += _split_rows(b, split, group.weights(4))
    if fused8 is not None:
        f32 = partial(dequantized_matmul, consts=b, a=x, inputs=fused8)
        results += _split_rows(b, writer.by_rows(fused8, f32, SPLIT8_MAX_ROWS, "int8"), group.weights(8))
    return results


@dataclass(frozen=True)
class _SplitWriter:
    b: GraphBuilder  # the graph the group is written in (and its constants)
    group: SplitGroup
    name: str
    x: str
    rank: int
    axis: str  # -2: the parts' axis

    def split(self, graph: GraphBuilder, fused: NBitsInputs) -> str:
        """The int8 kernel on the activations' three parts, their rows summed."""
        parts = int8_grid_parts(self.x, self.rank, self.group.block, self.group.k, graph, self.b)
        rows = matmul_nbits(graph, parts, fused, accuracy_level=4)
        return graph.op("ReduceSum", [rows, self.axis], {"keepdims": 0})

    def by_rows(
        self, fused: NBitsInputs, many: Callable[[GraphBuilder], str], limit: int, what: str, set_at_load: bool = False
    ) -> str:
        """One ``If`` on the row count: the split up to ``limit`` rows (then), ``many(graph)`` beyond.
        ``set_at_load``: ``limit`` goes in the graph's :func:`~ortstate.meta.split_rows_name`
        initializer for the activations' ``K``, which the runtime sets to this CPU's value."""
        b = self.b
        if self.rank == 1:
            return self.split(b, fused)
        branches = {}
        for attr, few in (("then_branch", True), ("else_branch", False)):
            sub = b.sub(f"{self.name}/{what}_{'few' if few else 'many'}_rows")
            sub.add_output(self.split(sub, fused) if few else many(sub), TensorProto.FLOAT, None)
            branches[attr] = sub.graph()
        k, values = self.group.k, np.array(limit * self.group.k, np.int64)
        # split_rows_name's: met by no node ONNX Runtime could fold before the runtime sets it
        limit_values = (b.named_const(split_rows_name(k), values) if set_at_load else None) or b.const(
            values, hint="split_max_values"
        )
        return b.op("If", [b.op("LessOrEqual", [b.op("Size", [self.x]), limit_values])], branches)


def _split_rows(b: GraphBuilder, out: str, weights: list[QuantizedWeight]) -> list[str]:
    """The result of a stacked ``MatMulNBits`` cut back into each weight's columns."""
    if len(weights) == 1:
        return [out]
    sizes = b.const(np.array([w.rows for w in weights], np.int64), hint="split_sizes")
    return b.op("Split", [out, sizes], {"axis": -1}, outputs=len(weights))


def int8_grid_parts(x: str, rank: int, block: int, k: int, b: GraphBuilder, consts: GraphBuilder) -> str:
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
    unpacked block). ``tests/convert/compressed/test_weights.py`` pins the result to f32 accuracy on
    heavy-tailed activations: if a later ONNX Runtime quantizes differently, it fails, not drifts.
    """
    blocks = -(-k // block)
    pad = blocks * block - k
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
        zero = consts.const(np.array([0], np.int64), hint="zero")
        k_end = consts.const(np.array([k], np.int64), hint="k")
        rows = b.op("Slice", [rows, zero, k_end, last])
    return rows
