"""NonZero-3 against OpenVINO: every element type, scalars, empty and all-zero tensors, NaN and -0.0,
both output types, and DBRX's MoE routing (``torch.where(mask)`` on a top-k one-hot mask)."""

import numpy as np
import openvino.opset3 as ops3
import openvino.opset13 as ops
import pytest
from oracle import check_model, single_op

from ortstate.ir import read_ir

RNG = np.random.default_rng(3)
TYPES = [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64]
TYPES += [np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]


def sparse(shape: tuple[int, ...], dtype) -> np.ndarray:
    """Values with about half of them zero."""
    values = RNG.integers(1, 5, size=shape) * (RNG.random(shape) < 0.5)
    return values.astype(dtype)


@pytest.mark.parametrize("output_type", ["i64", "i32"])
@pytest.mark.parametrize("dtype", TYPES, ids=lambda t: np.dtype(t).name)
def test_non_zero(tmp_path, dtype, output_type):
    x = ops.parameter([3, 4, 2], dtype, name="x")
    xml = single_op(tmp_path, ops3.non_zero(x, output_type), [x])
    assert 'type="NonZero" version="opset3"' in xml.read_text()
    check_model(xml, {"x": sparse((3, 4, 2), dtype)})


@pytest.mark.parametrize(
    "value",
    [
        np.array(5, np.float32),  # a scalar: [1, 1]
        np.array(0, np.float32),  # [1, 0]
        np.zeros((2, 0, 3), np.float32),  # no elements: [3, 0]
        np.zeros((4, 3), np.float32),  # nothing non-zero: [2, 0]
        np.array([np.nan, -0.0, 0.0, np.inf, -1e-30], np.float32),  # NaN counts, -0.0 does not
        np.array([np.nan, -0.0, 0.0, 2.0], np.float64),  # the same through the bool test
    ],
    ids=["scalar", "scalar-zero", "empty", "all-zero", "nan-f32", "nan-f64"],
)
def test_non_zero_edges(tmp_path, value):
    x = ops.parameter(list(value.shape), value.dtype, name="x")
    check_model(single_op(tmp_path, ops3.non_zero(x), [x]), {"x": value})


def test_non_zero_dynamic_shape(tmp_path):
    """Both dims dynamic: the count of non-zero elements changes with the values from run to run."""
    x = ops.parameter([-1, -1], np.int64, name="x")
    xml = single_op(tmp_path, ops3.non_zero(x), [x])
    for shape in [(2, 5), (3, 1), (1, 7)]:
        check_model(xml, {"x": sparse(shape, np.int64)})


def test_moe_routing_like_dbrx(tmp_path):
    """DBRX: expert_mask = one_hot(top_k(router_logits)).permute(2, 1, 0); per expert,
    torch.where(expert_mask[e]) gives the (top-k slot, token) pairs routed to it, and the tokens are
    gathered by them."""
    experts, top_k = 4, 2
    logits = ops.parameter([-1, experts], np.float32, name="router_logits")
    hidden = ops.parameter([-1, 8], np.float32, name="hidden")
    top = ops.topk(logits, ops.constant(np.int64(top_k)), 1, "max", "value", "i64")
    mask = ops.one_hot(
        top.output(1), ops.constant(np.int64(experts)), ops.constant(np.int64(1)), ops.constant(np.int64(0)), -1
    )
    mask = ops.transpose(mask, ops.constant(np.array([2, 1, 0], np.int64)))  # [experts, top_k, tokens]
    outputs = []
    for expert in range(experts):
        where = ops3.non_zero(ops.gather(mask, ops.constant(np.int64(expert)), ops.constant(np.int64(0))))
        tokens = ops.gather(where, ops.constant(np.int64(1)), ops.constant(np.int64(0)))
        outputs.append(ops.gather(hidden, tokens, ops.constant(np.int64(0))))
    xml = single_op(tmp_path, outputs, [logits, hidden])
    assert [layer.type for layer in read_ir(xml).topological()].count("NonZero") == experts
    feeds = {"router_logits": RNG.standard_normal((6, experts)).astype(np.float32)}
    check_model(xml, {**feeds, "hidden": RNG.standard_normal((6, 8)).astype(np.float32)})
