"""``compressed/recognise.py`` (and the weights it reads, ``compressed/weights.py``): which IR
chains are compressed weights, read exactly."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset13 as ops
from oracle import single_op
from quantized_weights import chain

from ortstate.convert.compressed import FloatWeight, QuantizedWeight, plan_weights, weight_source
from ortstate.convert.compressed.pack import pack4
from ortstate.ir import read_ir

CODES = (np.arange(4 * 2 * 16).reshape(4, 2, 16) * 5 % 16).astype(np.uint8)  # [rows, groups, group]
SCALE = np.array([0.5, 0.25, 1.0, 2.0] * 2, np.float16).reshape(4, 2, 1)
ZP = np.array([1, 2, 3, 4, 5, 6, 7, 8], np.uint8).reshape(4, 2, 1)


def _graph(tmp_path, weight, consumer=None):
    x = ops.parameter([1, 32], np.float32, name="x")
    out = consumer(x, weight) if consumer else ops.matmul(x, weight, False, True)
    return read_ir(single_op(tmp_path, out, [x]))


def _by_name(graph, name):
    return next(layer for layer in graph.layers.values() if layer.name == name)


def test_a_grouped_u4_chain_is_one_quantized_weight_in_rows_by_k(tmp_path):
    graph = _graph(tmp_path, chain(CODES, SCALE, ZP, ov.Type.u4, "w"))
    plan = plan_weights(graph)
    (w,) = plan.weights.values()
    assert isinstance(w, QuantizedWeight) and w.layer.name == "w"
    assert (w.bits, w.signed, w.rows, w.k, w.group, w.block, w.blocks) == (4, False, 4, 32, 16, 16, 2)
    assert w.source == "u4 g16 asym 4x32"
    assert w.scale.tolist() == SCALE[:, :, 0].astype(np.float32).tolist()
    assert w.zero_point.tolist() == ZP[:, :, 0].tolist()
    assert w.codes().tolist() == CODES.reshape(4, 32).tolist()
    assert w.packed.tolist() == pack4(CODES.reshape(4, 32)).tolist()  # the .bin's bytes
    # Every layer of the chain is skipped: the MatMul reads the weight compressed.
    chain_layers = {layer.id for layer in graph.layers.values() if layer.type not in ("Parameter", "MatMul", "Result")}
    assert plan.skipped == chain_layers


def test_signed_per_channel_codes_are_offset_into_the_unsigned_form(tmp_path):
    codes = (np.arange(4 * 32).reshape(4, 32) % 256 - 128).astype(np.int8)
    graph = _graph(tmp_path, chain(codes, np.full((4, 1), 0.5), None, ov.Type.i8, "w"))
    (w,) = plan_weights(graph).weights.values()
    assert (w.bits, w.signed, w.group, w.block, w.source) == (8, True, 32, 32, "i8 per-channel sym 4x32")
    assert w.zero_point.tolist() == [[128]] * 4
    assert w.codes().tolist() == (codes.astype(int) + 128).tolist()


def test_a_weight_matmul_does_not_transpose_is_read_transposed(tmp_path):
    codes = (np.arange(32 * 4).reshape(32, 4) % 16).astype(np.uint8)  # [k, rows]
    graph = _graph(
        tmp_path,
        chain(codes, np.full((1, 4), 0.5), None, ov.Type.u4, "w"),
        lambda x, w: ops.matmul(x, w, False, False),
    )
    (w,) = plan_weights(graph).weights.values()
    assert (w.rows, w.k, w.packed) == (4, 32, None)
    assert w.codes().tolist() == codes.T.tolist()


def test_large_f16_constants_stay_f16_small_ones_and_f32_consumers_fold(tmp_path):
    big = ops.convert(ops.constant(np.ones((32, 32), np.float16)), "f32", name="big")
    graph = _graph(tmp_path, big)
    (w,) = plan_weights(graph).weights.values()
    assert isinstance(w, FloatWeight) and (w.layer.name, w.source, w.value.dtype) == ("big", "f16 32x32", np.float16)
    small = ops.convert(ops.constant(np.ones((31, 32), np.float16)), "f32")  # under 1024 values
    assert plan_weights(_graph(tmp_path / "small", small)).weights == {}
    added = _graph(tmp_path / "add", chain(CODES, SCALE, ZP, ov.Type.u4, "w"), lambda x, w: ops.add(x, w))
    assert plan_weights(added).weights == {} and plan_weights(added).skipped == set()


def test_weight_source_names_the_stored_types_of_a_chain(tmp_path):
    graph = _graph(tmp_path, chain(CODES, SCALE, ZP, ov.Type.u4, "w"))
    assert weight_source(graph, _by_name(graph, "w")) == "f16+u4"
