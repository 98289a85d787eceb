"""``passes/fold.py`` (on ``passes/symbolic.py``): what every run computes the same way becomes
initializers, a whole-sequence ``sequence_lens`` goes, and reshapes to the same shape are bypassed;
on hand-built graphs (exact node lists and values, and the same outputs bit for bit in ONNX Runtime
for several shapes) and on the converted recurrent models."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import onnx
import pytest
from graphs import const, model, ops, same_outputs, value
from onnx import TensorProto, helper, numpy_helper

import ortstate
from ortstate.passes import fold_static
from ortstate.passes.dims import Sym
from ortstate.passes.symbolic import analyse

RNG = np.random.default_rng(9)
MODELS = Path(__file__).resolve().parents[2] / "models"
I64 = TensorProto.INT64


def _apply(m: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    after = copy.deepcopy(m)
    return after, fold_static(after.graph)


def _inits(m: onnx.ModelProto) -> dict[str, list]:
    return {t.name: numpy_helper.to_array(t).tolist() for t in m.graph.initializer}


def _x(*shape: int) -> dict[str, np.ndarray]:
    return {"x": RNG.standard_normal(shape).astype(np.float32)}


def test_shapes_with_numbers_fold_and_symbols_stay() -> None:
    """x [?, 3, 4]: Shape(x)[1:] is [3, 4] in every run, Shape(x)[0] is not. The Reshape target
    Concat(Shape(x)[0], 12) stays computed; its second part folds into the Concat's input."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "i12"], ["tail"], name="tail", axis=0),
        helper.make_node("ReduceProd", ["tail"], ["n"], name="prod", keepdims=1),
        helper.make_node("Gather", ["shape", "i0"], ["batch"], name="batch", axis=0),
        helper.make_node("Concat", ["batch", "n"], ["target"], name="target", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape"),
        helper.make_node("Cast", ["tail"], ["tail32"], name="cast", to=TensorProto.INT32),
    ]
    m = model(
        nodes,
        [value("x", ["b", 3, 4])],
        [value("y", ["b", 12]), value("tail32", [2], TensorProto.INT32)],
        [const("i12", np.array([1, 2], np.int64)), const("i0", np.array([0], np.int64))],
    )
    known = analyse(m.graph)
    assert known["shape"].values == (Sym("x", 0), 3, 4) and known["tail"].values == (3, 4)
    after, changed = _apply(m)
    assert [n.name for n in after.graph.node] == ["shape", "prod", "batch", "target", "reshape", "cast"]
    assert _inits(after) == {"i0": [0], "tail": [3, 4]}  # i12 no longer read
    assert changed == 1
    same_outputs(m, after, [_x(1, 3, 4), _x(5, 3, 4)])


def test_a_fully_static_chain_becomes_one_initializer() -> None:
    """x [2, 3]: Cast(Expand(Gather(Shape(x), 1), [4])) is [3, 3, 3, 3] int32; Reshape(x, Shape(x))
    is x; ConstantOfShape(Shape(x)) folds to zeros; outputs keep their producers."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "i1"], ["cols"], name="cols", axis=0),
        helper.make_node("Expand", ["cols", "four"], ["many"], name="expand"),
        helper.make_node("Cast", ["many"], ["many32"], name="cast", to=TensorProto.INT32),
        helper.make_node("Add", ["many32", "many32"], ["y"], name="add"),
        helper.make_node("Reshape", ["x", "shape"], ["same"], name="reshape"),
        helper.make_node(
            "ConstantOfShape", ["shape"], ["zeros"], name="zeros", value=const("v", np.array([7], np.int64))
        ),
        helper.make_node("Cast", ["zeros"], ["zf"], name="cast_zeros", to=TensorProto.FLOAT),
        helper.make_node("Add", ["same", "zf"], ["z"], name="add_z"),
    ]
    m = model(
        nodes,
        [value("x", [2, 3])],
        [value("y", [4], TensorProto.INT32), value("z", [2, 3])],
        [const("i1", np.array(1, np.int64)), const("four", np.array([4], np.int64))],
    )
    after, _ = _apply(m)
    assert [n.name for n in after.graph.node] == ["add", "cast_zeros", "add_z"]
    assert _inits(after) == {"many32": [3, 3, 3, 3], "zeros": [[7, 7, 7], [7, 7, 7]]}
    assert after.graph.node[2].input[0] == "x"  # the Reshape to x's own shape is bypassed
    same_outputs(m, after, [_x(2, 3)])


def _lstm(lens_nodes: list[onnx.NodeProto], lens: str, lens_inputs: list = (), seq: int | str = "s") -> onnx.ModelProto:  # type: ignore[assignment]
    """x [batch?, seq, 3] batch-first -> Transpose -> LSTM(hidden 4, sequence_lens=lens) -> Y_h, Y_c."""
    w = RNG.standard_normal((1, 16, 3)).astype(np.float32)
    r = RNG.standard_normal((1, 16, 4)).astype(np.float32)
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], name="t", perm=[1, 0, 2]),
        *lens_nodes,
        helper.make_node("LSTM", ["xt", "w", "r", "", lens], ["y", "h", "c"], name="lstm", hidden_size=4),
    ]
    inputs = [value("x", ["b", seq, 3]), *lens_inputs]
    outputs = [value("h", [1, "b", 4]), value("c", [1, "b", 4])]
    return model(nodes, inputs, outputs, [const("w", w), const("r", r)])


def _shape_of_x() -> list[onnx.NodeProto]:
    return [
        helper.make_node("Shape", ["x"], ["sx"], name="shape"),
        helper.make_node("Cast", ["sx"], ["sx32"], name="cast", to=TensorProto.INT32),
        helper.make_node("Gather", ["sx32", "i1"], ["seq"], name="seq", axis=0),
        helper.make_node("Gather", ["sx", "i0"], ["batch"], name="batch", axis=0),
        helper.make_node("Expand", ["seq", "batch"], ["lens"], name="expand"),
    ]


def _whole(seq: int | str) -> onnx.ModelProto:
    """sequence_lens = Expand(seq, [batch]), as the converter writes OpenVINO's PyTorch frontend's."""
    m = _lstm(_shape_of_x(), "lens", seq=seq)
    m.graph.initializer.extend([const("i1", np.array([1], np.int64)), const("i0", np.array([0], np.int64))])
    return m


def test_a_whole_sequence_sequence_lens_goes_where_a_step_is_known() -> None:
    """x [?, 5, 3]: every row runs the whole sequence of 5 steps, as without sequence_lens. Dropped,
    with the nodes computing it."""
    m = _whole(5)
    after, _ = _apply(m)
    assert ops(after) == {"Transpose": 1, "LSTM": 1}
    assert list(after.graph.node[1].input) == ["xt", "w", "r", "", ""]
    same_outputs(m, after, [_x(1, 5, 3), _x(3, 5, 3)])


def test_a_whole_sequence_sequence_lens_of_any_length_is_made_leaner() -> None:
    """x [?, ?, 3]: a sequence of 0 steps needs it (ONNX Runtime leaves Y_h/Y_c uninitialised without
    it, zeros with it, as OpenVINO): made again as Expand(Cast(Shape(x)[1:2]), Shape(x)[0:1])."""
    m = _whole("s")
    after, _ = _apply(m)
    assert ops(after) == {"Transpose": 1, "Shape": 2, "Cast": 1, "Expand": 1, "LSTM": 1}
    shapes = [{a.name: a.i for a in n.attribute} for n in after.graph.node if n.op_type == "Shape"]
    assert sorted(shapes, key=lambda a: a["start"]) == [{"start": 0, "end": 1}, {"start": 1, "end": 2}]
    assert all(n.input[0] == "x" for n in after.graph.node if n.op_type == "Shape")
    again, changed = _apply(after)
    assert changed == 0 and _inits(again) == _inits(after)  # already as lean as it gets
    same_outputs(m, after, [_x(1, 1, 3), _x(3, 5, 3), _x(2, 0, 3)])


@pytest.mark.parametrize(
    "case",
    ["batch_for_seq", "not_expanded_to_batch", "fed"],
)
def test_a_sequence_lens_not_known_to_be_the_whole_sequence_stays(case: str) -> None:
    base = _shape_of_x()[:4]
    cast_batch = helper.make_node("Cast", ["batch"], ["batch32"], name="cast_b", to=TensorProto.INT32)
    lens_inputs: list = []
    if case == "batch_for_seq":  # each row's length is the batch size
        extra = [cast_batch, helper.make_node("Expand", ["batch32", "batch"], ["lens"], name="expand")]
    elif case == "not_expanded_to_batch":  # seq in one row whatever the batch: ONNX Runtime refuses batch 2
        extra = [helper.make_node("Identity", ["seq"], ["lens"], name="id")]
    else:
        base, extra, lens_inputs = [], [], [value("lens", ["b"], TensorProto.INT32)]
    m = _lstm([*base, *extra], "lens", lens_inputs)
    if base:
        m.graph.initializer.extend([const("i1", np.array([1], np.int64)), const("i0", np.array([0], np.int64))])
    after, _ = _apply(m)
    assert next(n for n in after.graph.node if n.op_type == "LSTM").input[4] == "lens"


def test_reshape_with_a_copied_dim_of_an_unknown_shape_stays() -> None:
    """Reshape(v, [0, -1]) where v's shape is not known: its output's first dim is not 0 (a zero
    copies the input's dim), so the Shape of it must not fold."""
    nodes = [
        helper.make_node("NonZero", ["x"], ["nz"], name="nonzero"),
        helper.make_node("Reshape", ["nz", "target"], ["r"], name="reshape"),
        helper.make_node("Shape", ["r"], ["y"], name="shape"),
        helper.make_node("Identity", ["y"], ["out"], name="out"),
    ]
    m = model(nodes, [value("x", [2, 3])], [value("out", [2], I64)], [const("target", np.array([0, -1], np.int64))])
    after, changed = _apply(m)
    assert changed == 0 and ops(after) == ops(m)
    same_outputs(m, after, [_x(2, 3)])


def test_outputs_inputs_and_state_ops_stay() -> None:
    """A static graph output is still made by its node; a state op (custom domain) is kept though
    nothing reads it, and its init value folds; the Transpose of axes of size 1 only is bypassed."""
    nodes = [
        helper.make_node("Shape", ["x"], ["y"], name="shape_out"),
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("ConstantOfShape", ["s"], ["init"], name="zeros", value=const("v", np.array([0], np.int64))),
        helper.make_node(
            "ReadValue", ["init", "key"], ["read"], name="read", domain="ai.onnx.contrib", variable_id="v"
        ),
        helper.make_node("Transpose", ["x"], ["xt"], name="t", perm=[1, 0, 2]),
        helper.make_node("Neg", ["xt"], ["z"], name="neg"),
    ]
    m = model(nodes, [value("x", [1, 1, 3]), value("key", [], I64)], [value("y", [3], I64), value("z", [1, 1, 3])])
    after, _ = _apply(m)
    assert [n.name for n in after.graph.node] == ["shape_out", "read", "neg"]
    assert after.graph.node[1].input[0] == "init" and _inits(after) == {"init": [[[0, 0, 0]]]}
    assert after.graph.node[2].input[0] == "x"


@pytest.mark.parametrize(
    ("name", "lens_ops"),
    [
        ("lstm_2l_dynbatch", {"Shape": 2, "Cast": 1, "Expand": 1}),  # x [?, ?, 8]
        ("lstm_2l_f16", {"Shape": 1, "Cast": 1}),  # x [1, ?, 8]
        ("gru_1l", {"Shape": 1, "Cast": 1}),
        ("rnn_2l_relu", {"Shape": 1, "Cast": 1}),
    ],
)
def test_converted_recurrent_models_compute_their_lengths_in_the_fewest_nodes(name: str, lens_ops: dict) -> None:
    """The converter's sequence_lens (Broadcast(ShapeOf(x)[1], ShapeOf(x)[0]): Shape, Cast, two
    Gathers, Cast, Expand) is made from x in two nodes, four with a dynamic batch, shared by the
    layers, in both forms; OpenVINO still agrees (tests/test_models_recurrent.py, through a chunk of
    0 steps in tests/runtime/test_run_hardening.py)."""
    for explicit in (False, True):
        counts = ops(ortstate.convert(MODELS / name / "model.xml", explicit_state=explicit))
        assert {op: counts[op] for op in ("Shape", "Cast", "Expand", "Gather") if counts[op]} == lens_ops
