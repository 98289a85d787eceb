"""``compressed/plan.py``: the MatMuls that run as one split group, decided for the whole graph."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops
from oracle import single_op
from quantized_weights import chain

from ortstate.convert.compressed.plan import split_group, split_groups
from ortstate.ir import read_ir


def _weight(rows: int, group: int | None, ov_type: ov.Type, name: str) -> ov.Node:
    high = 16 if ov_type == ov.Type.u4 else 256
    groups = 1 if group is None else 32 // group
    codes = (np.arange(rows * 32) % high).astype(np.uint8).reshape(rows, groups, 32 // groups)
    scale = np.full((rows, groups, 1), 0.5)
    if group is None:
        codes, scale = codes.reshape(rows, 32), scale.reshape(rows, 1)
    return chain(codes, scale, None, ov_type, name)


def test_matmuls_reading_one_input_with_one_block_and_k_are_one_group(tmp_path):
    x = ops.parameter([1, 32], np.float32, name="x")
    y = ops.parameter([1, 32], np.float32, name="y")
    outs = [
        ops.matmul(x, _weight(8, 16, ov.Type.u8, "wv"), False, True, name="v"),  # 8-bit: after the 4-bit ones
        ops.matmul(x, _weight(4, 16, ov.Type.u4, "wq"), False, True, name="q"),
        ops.matmul(x, _weight(2, 16, ov.Type.u4, "wk"), False, True, name="k"),
        ops.matmul(x, _weight(4, None, ov.Type.u4, "wo"), False, True, name="o"),  # per channel: block 32
        ops.matmul(y, _weight(4, 16, ov.Type.u4, "wp"), False, True, name="p"),  # another input
        ops.matmul(x, ops.constant(np.ones((32, 3), np.float32)), False, False, name="plain"),
    ]
    graph = read_ir(single_op(tmp_path, outs, [x, y]))
    groups = split_groups(graph)
    named = {graph.layers[i].name: g for i, g in groups.items()}
    assert sorted(named) == ["k", "o", "p", "q", "v"]  # every MatMul of a quantized weight, no other
    qkv = named["q"]
    assert named["k"] is qkv and named["v"] is qkv
    assert [m.name for m, _ in qkv.members] == ["v", "q", "k"]  # as the input's consumers list them
    assert [m.name for m in qkv.ordered] == ["q", "k", "v"]
    assert [w.rows for w in qkv.weights(4)] == [4, 2] and [w.rows for w in qkv.weights(8)] == [8]
    assert (qkv.block, qkv.k) == (16, 32)
    assert [m.name for m, _ in named["o"].members] == ["o"] and named["o"].block == 32
    assert [m.name for m, _ in named["p"].members] == ["p"]
    q = next(layer for layer in graph.layers.values() if layer.name == "q")
    assert split_group(graph, q) is qkv
