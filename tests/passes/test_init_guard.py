"""``passes/init_guard.py``: computed inits moved behind their flag, on a hand-built custom-op graph
(one init worth guarding, one cheap, one already guarded, one with a flag but no guard yet, a zero
init), node for node; and what :func:`only_for` keeps out (shared values, graph outputs, state ops)."""

from __future__ import annotations

import onnx
import pytest
from graphs import F32, const, value
from onnx import TensorProto, helper

from ortstate.errors import PassError
from ortstate.meta import ASSIGN, CONTRIB_DOMAIN, CUSTOM_OP, READ_VALUE, VARIABLE_ID, ModelMeta, VariableMeta
from ortstate.passes import guard_inits
from ortstate.passes.init_guard import only_for

KEY = "ortstate.request"


def _state(op: str, var_id: str, value_in: str, out: str) -> onnx.NodeProto:
    return helper.make_node(
        op, [value_in, KEY], [out], name=f"{op}_{var_id}", domain=CONTRIB_DOMAIN, **{VARIABLE_ID: var_id}
    )


def _var(var_id: str, init: str = "computed", flag: str | None = None) -> VariableMeta:
    return VariableMeta(var_id, "f32", "float32", [1, 2], init, [1, 2], init_flag=flag, carrier="float32")


def custom_op_graph() -> tuple[onnx.GraphProto, ModelMeta]:
    """x -> shared = Neg(x) (also an output); a: MatMul(Exp(shared), w) -> Cast -> ReadValue;
    b: Reshape(x) -> ReadValue (cheap); c: If(flag_c) already; d: flag_d, init Abs(x); e: zeros."""
    guarded_c = helper.make_node(
        "If",
        ["ortstate.init.c"],
        ["c_init"],
        name="c_guard",
        then_branch=helper.make_graph([helper.make_node("Neg", ["x"], ["c_t"])], "t", [], [value("c_t", [1, 2])]),
        else_branch=helper.make_graph([helper.make_node("Abs", ["x"], ["c_e"])], "e", [], [value("c_e", [1, 2])]),
    )
    nodes = [
        helper.make_node("Neg", ["x"], ["shared"], name="neg"),
        helper.make_node("Exp", ["shared"], ["exp"], name="exp"),
        helper.make_node("MatMul", ["exp", "w"], ["mm"], name="matmul"),
        helper.make_node("Cast", ["mm"], ["a_init"], name="cast", to=F32),
        _state(READ_VALUE, "a", "a_init", "a"),
        helper.make_node("Reshape", ["x", "shape"], ["b_init"], name="reshape"),
        _state(READ_VALUE, "b", "b_init", "b"),
        guarded_c,
        _state(READ_VALUE, "c", "c_init", "c"),
        helper.make_node("Abs", ["x"], ["d_init"], name="abs"),
        _state(READ_VALUE, "d", "d_init", "d"),
        _state(READ_VALUE, "e", "zeros", "e"),
        helper.make_node("Sum", ["a", "b", "c", "d", "e"], ["y"], name="sum"),
        *(_state(ASSIGN, v, "y", f"{v}_token") for v in "abcde"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            value("x", [1, 2]),
            value("ortstate.init.c", [], TensorProto.BOOL),
            value("ortstate.init.d", [], TensorProto.BOOL),
            value(KEY, [], TensorProto.INT64),
        ],
        [value("y", [1, 2]), value("shared", [1, 2])],
        [const("w", [[1.0, 0.0], [0.0, 1.0]]), const("shape", [1, 2]), const("zeros", [[0.0, 0.0]])],
    )
    variables = (
        _var("a"),
        _var("b"),
        _var("c", flag="ortstate.init.c"),
        _var("d", flag="ortstate.init.d"),
        _var("e", "zeros"),
    )
    return graph, ModelMeta(form=CUSTOM_OP, variables=variables, request_input=KEY)


def _costly(var: VariableMeta, moved) -> bool:
    return any(node.op_type == "MatMul" for node in moved)


def _branch(node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    return next(a.g for a in node.attribute if a.name == name)


def test_guards_what_is_worth_it_and_what_has_a_flag() -> None:
    graph, meta = custom_op_graph()
    meta = guard_inits(graph, meta, _costly)
    assert [v.init_flag for v in meta.variables] == [
        "ortstate.init.a",
        None,
        "ortstate.init.c",
        "ortstate.init.d",
        None,
    ]
    assert [i.name for i in graph.input] == ["x", "ortstate.init.a", "ortstate.init.c", "ortstate.init.d", KEY]
    assert [n.name for n in graph.node] == [
        "neg", "a_guard", "ReadValue_a", "reshape", "ReadValue_b", "c_guard", "ReadValue_c", "d_guard",
        "ReadValue_d", "ReadValue_e", "sum", *(f"Assign_{v}" for v in "abcde"),
    ]  # fmt: skip
    guard_a, guard_d = graph.node[1], graph.node[7]
    assert list(guard_a.input) == ["ortstate.init.a"] and list(graph.node[2].input) == [guard_a.output[0], KEY]
    then_a = _branch(guard_a, "then_branch")
    assert [n.name for n in then_a.node] == ["exp", "matmul", "cast", "a_init_identity"]  # the shared Neg stays out
    assert list(then_a.node[-1].input) == ["a_init"] and [o.name for o in then_a.output] == ["a_init_1"]
    skip_a = _branch(guard_a, "else_branch")
    assert [list(t.dims) for t in skip_a.initializer] == [[0, 0]] and skip_a.output[0].type.tensor_type.elem_type == F32
    assert [n.op_type for n in _branch(guard_d, "then_branch").node] == ["Abs", "Identity"]
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid(CONTRIB_DOMAIN, 1)]
    onnx.checker.check_model(helper.make_model(graph, opset_imports=opsets))


def test_guarding_again_changes_nothing() -> None:
    graph, meta = custom_op_graph()
    meta = guard_inits(graph, meta, _costly)
    before = graph.SerializeToString()
    assert guard_inits(graph, meta, lambda var, moved: True).variables[1].init_flag == "ortstate.init.b"
    graph, meta = custom_op_graph()
    meta = guard_inits(graph, meta, _costly)
    assert guard_inits(graph, meta, _costly) == meta and graph.SerializeToString() == before


def test_only_for_leaves_out_shared_values_outputs_and_state_ops() -> None:
    graph, _ = custom_op_graph()
    names = [n.name for n in graph.node]
    assert [names[i] for i in only_for(graph, names.index("ReadValue_a"))] == ["exp", "matmul", "cast"]
    assert [names[i] for i in only_for(graph, names.index("ReadValue_b"))] == ["reshape"]
    assert only_for(graph, names.index("ReadValue_e")) == []
    # an init computed from another variable's value: that ReadValue stays out, even read by it alone
    graph.node.insert(names.index("sum"), helper.make_node("Relu", ["e"], ["f_init"], name="relu"))
    graph.node.insert(names.index("sum") + 1, _state(READ_VALUE, "f", "f_init", "f"))
    names = [n.name for n in graph.node]
    assert [names[i] for i in only_for(graph, names.index("ReadValue_f"))] == ["relu"]
    graph.node[names.index("sum")].input.remove("e")  # e's value now feeds f's init alone
    assert [names[i] for i in only_for(graph, names.index("ReadValue_f"))] == ["relu"]


def test_a_variable_without_its_read_is_refused_unchanged() -> None:
    graph, meta = custom_op_graph()
    del graph.node[4]  # ReadValue_a
    before = graph.SerializeToString()
    with pytest.raises(PassError, match=r"^variable 'a': 0 ReadValue nodes, expected one$"):
        guard_inits(graph, meta, _costly)
    assert graph.SerializeToString() == before
