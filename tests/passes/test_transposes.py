"""``passes/transposes.py``: Transposes that undo each other go, on hand-built graphs (exact node lists,
and the same outputs bit for bit in ONNX Runtime) and on the converted recurrent models."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import onnx
import pytest
from graphs import const, model, ops, same_outputs, value
from onnx import helper

import ortstate
from ortstate.passes import cancel_transposes

RNG = np.random.default_rng(8)
MODELS = Path(__file__).resolve().parents[2] / "models"


def _t(src: str, dst: str, perm: list[int], name: str = "") -> onnx.NodeProto:
    return helper.make_node("Transpose", [src], [dst], name=name or dst, perm=perm)


def _apply(m: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    after = copy.deepcopy(m)
    return after, cancel_transposes(after.graph)


def _summary(m: onnx.ModelProto) -> list[tuple[str, list[str], list[int] | None]]:
    """(op, inputs, perm) per node, in order."""
    return [
        (n.op_type, list(n.input), next((list(a.ints) for a in n.attribute if a.name == "perm"), None))
        for n in m.graph.node
    ]


def _feed(**shapes: tuple[int, ...]) -> dict[str, np.ndarray]:
    return {name: RNG.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


def test_a_transpose_and_its_inverse_cancel() -> None:
    m = model(
        [_t("x", "a", [1, 0, 2]), _t("a", "b", [1, 0, 2]), helper.make_node("Relu", ["b"], ["y"], name="relu")],
        [value("x", [2, 3, 4])],
        [value("y", [2, 3, 4])],
    )
    after, removed = _apply(m)
    assert removed == 2
    assert _summary(after) == [("Relu", ["x"], None)]
    same_outputs(m, after, [_feed(x=(2, 3, 4))])


def test_two_transposes_compose_into_one() -> None:
    m = model(
        [_t("x", "a", [1, 0, 2]), _t("a", "y", [0, 2, 1])],
        [value("x", [2, 3, 4])],
        [value("y", [3, 4, 2])],
    )
    after, removed = _apply(m)
    assert removed == 1
    assert _summary(after) == [("Transpose", ["x"], [1, 2, 0])]
    same_outputs(m, after, [_feed(x=(2, 3, 4))])


def test_an_output_keeps_its_name_and_a_shared_transpose_stays() -> None:
    """y = T(T(x)) is x: an Identity makes y; the first Transpose also feeds z, so it stays."""
    m = model(
        [_t("x", "a", [1, 0]), _t("a", "y", [1, 0]), helper.make_node("Neg", ["a"], ["z"], name="neg")],
        [value("x", [2, 3])],
        [value("y", [2, 3]), value("z", [3, 2])],
    )
    after, removed = _apply(m)
    assert removed == 1
    assert _summary(after) == [("Transpose", ["x"], [1, 0]), ("Identity", ["x"], None), ("Neg", ["a"], None)]
    same_outputs(m, after, [_feed(x=(2, 3))])


def test_a_recurrent_layer_between_layouts() -> None:
    """What the converter writes between two LSTM layers, reduced to its layout ops: Y [seq, 1, batch,
    hidden] -> [batch, 1, seq, hidden] -> Squeeze(1) -> [seq, batch, hidden] for the next layer; the
    last states [1, batch, hidden] of two layers, each made batch-major, concatenated on axis 1 and
    made [layers, batch, hidden] again. Left: one Squeeze, one Concat on axis 0."""
    nodes = [
        _t("y", "yt", [2, 1, 0, 3]),
        helper.make_node("Squeeze", ["yt", "one"], ["sq"], name="squeeze"),
        _t("sq", "next_x", [1, 0, 2]),
        _t("h0", "h0t", [1, 0, 2]),
        _t("h1", "h1t", [1, 0, 2]),
        helper.make_node("Concat", ["h0t", "h1t"], ["hb"], name="concat", axis=1),
        _t("hb", "h", [1, 0, 2]),
    ]
    m = model(
        nodes,
        [value("y", [5, 1, 2, 4]), value("h0", [1, 2, 4]), value("h1", [1, 2, 4])],
        [value("next_x", [5, 2, 4]), value("h", [2, 2, 4])],
        [const("one", np.array([1], np.int64))],
    )
    after, removed = _apply(m)
    assert removed == 5 and ops(after) == {"Squeeze": 1, "Concat": 1, "Identity": 2}
    squeeze = next(n for n in after.graph.node if n.op_type == "Squeeze")
    axes = next(t for t in after.graph.initializer if t.name == squeeze.input[1])
    assert squeeze.input[0] == "y" and onnx.numpy_helper.to_array(axes).tolist() == [1]
    concat = next(n for n in after.graph.node if n.op_type == "Concat")
    assert list(concat.input) == ["h0", "h1"] and concat.attribute[0].i == 0
    assert [t.name for t in after.graph.initializer] == ["one", squeeze.input[1]]
    same_outputs(m, after, [_feed(y=(5, 1, 2, 4), h0=(1, 2, 4), h1=(1, 2, 4))])


def test_through_unsqueeze_and_elementwise_ops() -> None:
    """T(x) -> Unsqueeze(axes 0) -> Sigmoid -> T: the Transposes meet below them and compose."""
    nodes = [
        _t("x", "a", [1, 0]),
        helper.make_node("Unsqueeze", ["a", "zero"], ["u"], name="unsqueeze"),
        helper.make_node("Sigmoid", ["u"], ["s"], name="sigmoid"),
        _t("s", "y", [0, 2, 1]),
    ]
    m = model(nodes, [value("x", [2, 3])], [value("y", [1, 2, 3])], [const("zero", np.array([0], np.int64))])
    after, removed = _apply(m)
    assert ops(after) == {"Unsqueeze": 1, "Sigmoid": 1, "Transpose": 1} and removed == 1
    same_outputs(m, after, [_feed(x=(2, 3))])


def test_left_alone_where_nothing_cancels() -> None:
    """A Transpose whose reader's output goes anywhere but into a Transpose is not moved; axes
    computed at run time are not reasoned about."""
    nodes = [
        _t("x", "a", [2, 1, 0]),
        helper.make_node("Squeeze", ["a", "one"], ["y"], name="squeeze"),
        _t("x", "b", [2, 1, 0]),
        helper.make_node("Squeeze", ["b", "axes"], ["c"], name="squeeze_fed"),
        _t("c", "z", [1, 0]),
    ]
    m = model(
        nodes,
        [value("x", [3, 1, 4]), value("axes", [1], onnx.TensorProto.INT64)],
        [value("y", [4, 3]), value("z", [3, 4])],
        [const("one", np.array([1], np.int64))],
    )
    after, removed = _apply(m)
    assert removed == 0 and _summary(after) == _summary(m)


def test_inside_a_subgraph_and_read_by_one() -> None:
    """A pair in an If branch cancels; a Transpose the branch reads from the outer graph stays."""
    branch = helper.make_graph(
        [_t("outer", "i1", [1, 0]), _t("i1", "i2", [1, 0]), helper.make_node("Neg", ["i2"], ["r"], name="neg")],
        "then",
        [],
        [value("r", [3, 2])],
    )
    other = helper.make_graph(
        [helper.make_node("Identity", ["outer"], ["e"], name="id")], "else", [], [value("e", [3, 2])]
    )
    nodes = [
        _t("x", "outer", [1, 0], name="kept"),
        helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch, else_branch=other),
    ]
    m = model(nodes, [value("x", [2, 3]), value("cond", [], onnx.TensorProto.BOOL)], [value("y", [3, 2])])
    after, removed = _apply(m)
    assert removed == 2
    assert [n.name for n in after.graph.node] == ["kept", "if"]
    branches = {a.name: a.g for a in after.graph.node[1].attribute}
    assert [(n.op_type, list(n.input)) for n in branches["then_branch"].node] == [("Neg", ["outer"])]
    for cond in (True, False):
        same_outputs(m, after, [{**_feed(x=(2, 3)), "cond": np.array(cond)}])


@pytest.mark.parametrize("name", ["lstm_2l_dynbatch", "lstm_2l_f16", "gru_2l", "rnn_2l_relu", "lstm_1l"])
def test_converted_recurrent_models_keep_the_transposes_a_native_export_has(name: str) -> None:
    """18 Transposes in a 2-layer LSTM as converted before these passes: now X's and Y's only (none
    where the layout is sequence-major already), in both forms; OpenVINO still agrees
    (tests/test_models_recurrent.py)."""
    want = {"gru_2l": 0}.get(name, 2)
    for explicit in (False, True):
        converted = ortstate.convert(MODELS / name / "model.xml", explicit_state=explicit)
        assert ops(converted)["Transpose"] == want, (name, explicit)
