"""``passes/batchable/relax.py``: the dims that could be the batch made symbols of their own, and
a recurrent layer's one length expanded to the rows of its batch."""

from __future__ import annotations

import numpy as np
import pytest
from batchable_models import F32, accumulator, dims, run, variable
from onnx import TensorProto, helper, numpy_helper

from ortstate.meta import EXPLICIT, ModelMeta
from ortstate.passes.batchable.relax import relax_batch


def test_static_ones_and_dynamic_dims_become_symbols_and_the_fed_dims_are_returned() -> None:
    model, meta = accumulator()
    model.graph.value_info.append(helper.make_tensor_value_info("y", F32, [1, 4]))
    assert relax_batch(model, meta) == {"x": (1, 4)}  # the state input is the pool's, not fed
    assert [dims(v) for v in model.graph.input] == [["ortstate.pool.0.0", 4], ["ortstate.pool.1.0", 4]]
    assert [dims(v) for v in model.graph.output] == [["ortstate.pool.2.0", 4], ["ortstate.pool.3.0", 4]]
    assert list(model.graph.value_info) == []  # shapes inferred at batch 1 would contradict a batch
    x, h = np.ones((3, 4), np.float32), np.full((3, 4), 2, np.float32)
    y, h_out = run(model, {"x": x, "h_in": h})  # batch 3 now loads and runs
    np.testing.assert_array_equal(y, x + h)
    np.testing.assert_array_equal(h_out, x + h)


def test_an_init_flag_keeps_its_shape() -> None:
    model, _ = accumulator()
    model.graph.input.append(helper.make_tensor_value_info("flag", TensorProto.BOOL, [1]))
    meta = ModelMeta(form=EXPLICIT, variables=(variable(init_flag="flag", init="computed"),))
    assert relax_batch(model, meta) == {"x": (1, 4)}
    assert dims(model.graph.input[2]) == [1]


@pytest.mark.parametrize("layout", [0, 1])
def test_a_recurrent_layers_sequence_lens_is_expanded_to_its_rows(layout: int) -> None:
    """An LSTM of batch 1 given one length (Shape(x)[seq axis]) gets it once per row of X."""
    seq_axis, batch_axis = (0, 1) if layout == 0 else (1, 0)
    x_dims = [5, 1, 3] if layout == 0 else [1, 5, 3]
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.normal(size=(1, 8, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(size=(1, 8, 2)).astype(np.float32), "r"),
    ]
    nodes = [
        helper.make_node("Shape", ["x"], ["len64"], name="len", start=seq_axis, end=seq_axis + 1),
        helper.make_node("Cast", ["len64"], ["lens"], name="cast", to=TensorProto.INT32),
        helper.make_node("LSTM", ["x", "w", "r", "", "lens"], ["", "h"], name="lstm", hidden_size=2, layout=layout),
    ]
    graph = helper.make_graph(
        nodes,
        "lstm",
        [helper.make_tensor_value_info("x", F32, x_dims)],
        [helper.make_tensor_value_info("h", F32, None)],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x1 = rng.normal(size=x_dims).astype(np.float32)
    want = run(model, {"x": x1})[0] if layout == 0 else None  # ONNX Runtime runs layout 0 only
    relax_batch(model, ModelMeta(form=EXPLICIT, variables=()))
    assert [(n.op_type, list(n.input), list(n.output)) for n in model.graph.node] == [
        ("Shape", ["x"], ["len64"]),
        ("Cast", ["len64"], ["lens"]),
        ("Shape", ["x"], ["lstm/pool_rows"]),
        ("Expand", ["lens", "lstm/pool_rows"], ["lstm/pool_lens"]),
        ("LSTM", ["x", "w", "r", "", "lstm/pool_lens"], ["", "h"]),
    ]
    assert [a.i for a in model.graph.node[2].attribute] == [batch_axis + 1, batch_axis]  # end, start
    if want is None:
        return
    (got,) = run(model, {"x": x1})
    np.testing.assert_array_equal(got, want)  # batch 1: the same
    x3 = np.concatenate([x1, x1, x1], axis=batch_axis)
    (three,) = run(model, {"x": x3})  # batch 3 ([directions, batch, hidden]): each row as alone
    assert three.shape == (1, 3, 2)
    for row in range(3):
        np.testing.assert_allclose(three[:, row : row + 1], want, rtol=1e-6)
