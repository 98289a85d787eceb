"""MatMul-1: ranks 1-4, both transpose flags, batch broadcasting."""

import numpy as np
import openvino.opset13 as ops
import pytest
from oracle import check_model, single_op

import ortstate

RNG = np.random.default_rng(0)

# (A shape, B shape) as numpy matmul sees them after the transpose flags.
SHAPES = [
    ((3,), (3,)),
    ((3,), (3, 4)),
    ((2, 3), (3,)),
    ((5, 2, 3), (3,)),
    ((2, 3), (3, 4)),
    ((5, 2, 3), (3, 4)),
    ((2, 3), (5, 3, 4)),
    ((1, 2, 3), (5, 3, 4)),
    ((2, 1, 2, 3), (3, 3, 4)),
    ((3,), (2, 5, 3, 4)),
    ((2, 5, 2, 3), (2, 5, 3, 4)),
]


def flagged(shape: tuple[int, ...], transpose: bool) -> tuple[int, ...]:
    """The shape to feed so that the transpose flag yields ``shape`` (1-D inputs ignore the flag)."""
    return shape[:-2] + (shape[-1], shape[-2]) if transpose and len(shape) > 1 else shape


@pytest.mark.parametrize(("a_shape", "b_shape"), SHAPES)
@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_matmul(tmp_path, a_shape, b_shape, transpose_a, transpose_b):
    a_in, b_in = flagged(a_shape, transpose_a), flagged(b_shape, transpose_b)
    a = ops.parameter(list(a_in), np.float32, name="a")
    b = ops.parameter(list(b_in), np.float32, name="b")
    xml = single_op(tmp_path, ops.matmul(a, b, transpose_a, transpose_b), [a, b])
    feeds = {"a": RNG.standard_normal(a_in).astype(np.float32), "b": RNG.standard_normal(b_in).astype(np.float32)}
    (want,) = check_model(xml, feeds, rtol=1e-4, atol=1e-5)
    expected = np.matmul(
        np.swapaxes(feeds["a"], -1, -2) if transpose_a and len(a_in) > 1 else feeds["a"],
        np.swapaxes(feeds["b"], -1, -2) if transpose_b and len(b_in) > 1 else feeds["b"],
    )
    np.testing.assert_allclose(want, expected, rtol=1e-4, atol=1e-5)  # the oracle agrees with numpy's rules
    transposes = [n.op_type for n in ortstate.convert(xml).graph.node].count("Transpose")
    both_matrices = len(a_in) > 1 and len(b_in) > 1  # against a 1-D operand the flag needs no Transpose
    assert transposes == (transpose_a and both_matrices) + (transpose_b and both_matrices)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_matmul_integers(tmp_path, dtype):
    a = ops.parameter([2, 3, 4], dtype, name="a")
    b = ops.parameter([2, 5, 4], dtype, name="b")
    xml = single_op(tmp_path, ops.matmul(a, b, False, True), [a, b])
    check_model(
        xml, {"a": RNG.integers(-9, 9, (2, 3, 4)).astype(dtype), "b": RNG.integers(-9, 9, (2, 5, 4)).astype(dtype)}
    )


def test_matmul_constant_weight_dynamic_batch(tmp_path):
    """The LLM projection: x [?, ?, 8] @ W^T with W a constant [6, 8]."""
    x = ops.parameter([-1, -1, 8], np.float32, name="x")
    w = ops.constant(RNG.standard_normal((6, 8)).astype(np.float32))
    xml = single_op(tmp_path, ops.matmul(x, w, False, True), [x])
    check_model(xml, {"x": RNG.standard_normal((2, 3, 8)).astype(np.float32)}, rtol=1e-4)
