"""``compressed/emit.py``: what translators call for a compressed weight, written once, recorded
for ``inspect``."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from oracle import single_op
from quantized_weights import chain

from ortstate.convert.builder import GraphBuilder
from ortstate.convert.compressed import (
    CompressedInput,
    float_weight,
    gather_quantized,
    matmul_quantized,
    plan_weights,
    record_expanded,
)
from ortstate.convert.compressed.plan import split_group
from ortstate.convert.context import Context, ConvertOptions
from ortstate.convert.weights_report import EXPANDED
from ortstate.ir import read_ir

CODES = (np.arange(4 * 2 * 16).reshape(4, 2, 16) % 16).astype(np.uint8)
SCALE = np.full((4, 2, 1), 0.5)


def _u4(name: str) -> ov.Node:
    return chain(CODES, SCALE, None, ov.Type.u4, name)


def _context(tmp_path, outs, params, int8_activations=False):
    graph = read_ir(single_op(tmp_path, outs, params))
    return Context(graph, GraphBuilder("g"), options=ConvertOptions(int8_activations)), graph


def _layer(graph, name):
    return next(layer for layer in graph.layers.values() if layer.name == name)


def _records(ctx):
    return [(r.layer, r.source, r.how, r.initializers) for r in ctx.weights]


def _node(ctx, graph, name):
    layer = _layer(graph, name)
    weight = graph.producer(layer, 1)[0]
    return ctx.node(layer, [graph.producer(layer, 0)[0].name, CompressedInput(weight)])


def test_a_split_group_is_written_by_its_first_matmul_and_read_by_the_others(tmp_path):
    x = ops.parameter([1, 32], np.float32, name="x")
    outs = [ops.matmul(x, _u4(f"w{n}"), False, True, name=n) for n in ("q", "k")]
    ctx, graph = _context(tmp_path, outs, [x])
    weights = plan_weights(graph).weights
    q, k = _node(ctx, graph, "q"), _node(ctx, graph, "k")
    out_q = matmul_quantized(q, ctx, weights[_layer(graph, "wq").id])
    written = [n.op_type for n in ctx.b.nodes]
    assert written == ["Size", "LessOrEqual", "If", "Split"]
    out_k = matmul_quantized(k, ctx, weights[_layer(graph, "wk").id])
    assert [n.op_type for n in ctx.b.nodes] == written  # nothing more
    order = [m.name for m in split_group(graph, q.layer).ordered]  # as the input's consumers list them
    assert {"q": out_q, "k": out_k} == dict(zip(order, ctx.b.nodes[-1].output))
    how = "MatMulNBits 4-bit block 16, exact (int8 split up to 3 rows, f32 beyond)"
    data = f"w{order[0]}+1"
    names = [data, f"{data}_scale", f"{data}_zero_point"]  # u4 codes: zero point 0, not the default 8
    assert _records(ctx) == [(f"w{n}", "u4 g16 sym 4x32", how, names) for n in order]


@pytest.mark.parametrize(
    ("int8_activations", "level", "how"), [(False, 0, "f32 compute"), (True, 4, "int8 activations")]
)
def test_an_input_of_unknown_rank_or_int8_activations_take_one_matmulnbits(tmp_path, int8_activations, level, how):
    x = ops.parameter(ov.PartialShape.dynamic(), np.float32, name="x")
    ctx, graph = _context(tmp_path, ops.matmul(x, _u4("w"), False, True, name="mm"), [x], int8_activations)
    (weight,) = plan_weights(graph).weights.values()
    matmul_quantized(_node(ctx, graph, "mm"), ctx, weight)
    (node,) = ctx.b.nodes
    assert (node.op_type, list(node.input)) == ("MatMulNBits", ["x", "w", "w_scale", "w_zero_point"])
    assert next(a.i for a in node.attribute if a.name == "accuracy_level") == level
    names = ["w", "w_scale", "w_zero_point"]
    assert _records(ctx) == [("w", "u4 g16 sym 4x32", f"MatMulNBits 4-bit block 16, {how}", names)]


def test_a_table_read_twice_is_written_once(tmp_path):
    i = ops.parameter([2], np.int64, name="i")
    table = _u4("table")
    gathers = [ops.gather(table, i, ops.constant(np.int64(0)), name=f"g{n}") for n in range(2)]
    ctx, graph = _context(tmp_path, gathers, [i])
    (weight,) = plan_weights(graph).weights.values()
    for name in ("g0", "g1"):
        gather_quantized(ctx.node(_layer(graph, name), []), ctx, weight, "i")
    assert [(n.op_type, list(n.input)) for n in ctx.b.nodes] == [
        ("GatherBlockQuantized", ["table", "i", "table_scale", "table_zero_point"])
    ] * 2
    names = ["table", "table_scale", "table_zero_point"]
    assert _records(ctx) == [("table", "u4 g16 sym 4x32", "GatherBlockQuantized 4-bit block 16", names)]


def test_an_f16_weight_is_written_once_per_orientation_and_widened_by_a_cast(tmp_path):
    value = np.arange(32 * 32).reshape(32, 32).astype(np.float16)
    x = ops.parameter([1, 32], np.float32, name="x")
    ctx, graph = _context(tmp_path, ops.matmul(x, ops.convert(ops.constant(value), "f32", name="f"), False, True), [x])
    (weight,) = plan_weights(graph).weights.values()
    stored, widened = float_weight(ctx, weight)
    assert float_weight(ctx, weight) == (stored, widened)
    stored_t, _ = float_weight(ctx, weight, transposed=True)
    assert (stored, stored_t) == ("f", "f_t")
    assert [(n.op_type, list(n.input)) for n in ctx.b.nodes] == [("Cast", ["f"]), ("Cast", ["f_t"])]
    values = {t.name: t for t in ctx.b.initializers}
    assert list(values["f_t"].dims) == [32, 32] and values["f_t"].raw_data == value.T.tobytes()
    assert [r[2] for r in _records(ctx)] == ["float16 initializer + Cast"] * 2


def test_only_large_chains_of_compressed_constants_are_reported_expanded(tmp_path):
    x = ops.parameter([4, 32], np.float32, name="x")
    f32 = ops.multiply(ops.constant(np.ones((4, 32), np.float32)), ops.constant(np.float32(2)), name="f32")
    ctx, graph = _context(tmp_path, [ops.add(x, _u4("w")), ops.add(x, f32)], [x])
    record_expanded(ctx, _layer(graph, "w"), 128, "small")  # under 1024 values
    record_expanded(ctx, _layer(graph, "f32"), 4096, "f32_folded")  # f32 constants: nothing expanded
    record_expanded(ctx, _layer(graph, "w"), 4096, "big")
    assert _records(ctx) == [("w", "f16+u4", EXPANDED, ["big"])]
