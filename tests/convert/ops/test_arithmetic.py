"""``convert/ops/arithmetic.py`` (Add, Subtract, Multiply, Maximum, Minimum, Divide, Power,
SquaredDifference, FloorMod, Mod) against OpenVINO.

The oracle is the OpenVINO CPU plugin, except where that plugin departs from the op spec: integer
Divide ignores ``m_pythondiv`` (openvino#38248). There ortstate is held to the spec, written in numpy,
and OpenVINO's reference implementation (``Node.evaluate``, what constant folding runs) is checked to
agree with that where it has a kernel (``check_spec``).
"""

import re

import numpy as np
import openvino.opset13 as ops
import pytest
from oracle import binary, check_model, check_spec, ov_request, ov_run, single_op

import ortstate
from ortstate.errors import ConversionError

SIGNED = [np.int8, np.int16, np.int32, np.int64]


def dividends(dtype) -> tuple[np.ndarray, np.ndarray]:
    """Dividend/divisor pairs covering every sign combination, exact and inexact, and zero dividends."""
    x = np.array([7, -7, 7, -7, 6, -6, 0, 0, 5, -1, 1, 9], np.float64)
    y = np.array([2, 2, -2, -2, -3, 3, 3, -3, -3, 4, -4, 9], np.float64)
    if np.issubdtype(dtype, np.floating):
        x = x + np.array([0.5, -0.5, 0.25, 0, 0, 0, 0, 0, 0.75, 0, 0, 0])
    elif not np.issubdtype(dtype, np.signedinteger):
        x, y = np.abs(x) * 3, np.abs(y)
    return x.astype(dtype), y.astype(dtype)


def with_python_div(flag: bool):  # noqa: ANN201
    def make(a, b):
        node = ops.divide(a, b)
        node.set_attribute("m_pythondiv", flag)
        return node

    return make


@pytest.mark.parametrize("python_div", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, *SIGNED, np.uint8, np.uint32])
def test_divide(tmp_path, dtype, python_div):
    x, y = dividends(dtype)
    make = with_python_div(python_div)
    if python_div and dtype in SIGNED:
        check_spec(tmp_path, make, x, y, want=x // y)
        xml = tmp_path / "spec.xml"
    else:
        xml = binary(tmp_path, make, x, y)
    assert f'm_pythondiv="{str(python_div).lower()}"' in xml.read_text()


@pytest.mark.xfail(strict=True, reason="openvino#38248: the CPU plugin truncates integer Divide despite m_pythondiv")
def test_divide_cpu_plugin_floors(tmp_path):
    """Why test_divide holds signed python division to the spec; XPASSes (fails) once OpenVINO fixes the plugin.

    The same on every x86 CPU: the plugin's integer Divide divides in f32 and rounds toward zero in
    the one emitter its SSE4.1, AVX2 and AVX-512 kernels share, and its reference kernel divides with
    C++'s truncating ``/``."""
    a = ops.parameter([2], np.int32, name="a")
    b = ops.parameter([2], np.int32, name="b")
    xml = single_op(tmp_path, ops.divide(a, b), [a, b])
    got = ov_run(ov_request(xml), {"a": np.array([-7, 7], np.int32), "b": np.array([2, -2], np.int32)})[0]
    np.testing.assert_array_equal(got, [-4, -4])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.int8, np.uint8, np.int16])
def test_power(tmp_path, dtype):
    signed = not np.issubdtype(dtype, np.unsignedinteger)
    x = np.array([-3, -2, -1, 0, 1, 2, 3, 2, 1, 4] if signed else [0, 1, 2, 3, 3, 5, 2, 1, 0, 3], dtype)
    y = np.array([3, 2, 3, 2, 5, 0, 1, 4, 0, 2], dtype)
    if np.issubdtype(dtype, np.floating):
        x, y = np.abs(x) + 0.5, y - 1.5
    binary(tmp_path, ops.power, x, y)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16])
def test_power_saturates(tmp_path, dtype):
    """Narrow integers are raised in int32 and saturate when cast back, as the CPU plugin does."""
    x = np.array([4, 2, 3, 100] if dtype == np.uint8 else [4, -3, 3, -100], dtype)
    binary(tmp_path, ops.power, x, np.array([5, 5, 6, 2], dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.int16, np.uint16, np.int8, np.uint8])
def test_squared_difference(tmp_path, dtype):
    x = np.array([[3, -2, 0, 5], [1, 1, -7, 0]]).astype(dtype)
    y = np.array([4, -3, 0, 2]).astype(dtype)
    if dtype in (np.int8, np.uint8):  # the CPU plugin returns garbage for 8-bit SquaredDifference
        check_spec(tmp_path, ops.squared_difference, x, y, want=(x - y) * (x - y))
    else:
        binary(tmp_path, ops.squared_difference, x, y)


@pytest.mark.parametrize("op", ["floor_mod", "mod"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.int8, np.uint8, np.uint16])
def test_remainders(tmp_path, op, dtype):
    x, y = dividends(dtype)
    binary(tmp_path, getattr(ops, op), x, y)
    if dtype in (np.float32, np.int32):  # the CPU plugin agrees with the spec: pin that it is the spec
        spec = np.mod if op == "floor_mod" else np.fmod  # the divisor's sign (Python %) / the dividend's (C fmod)
        check_spec(tmp_path, getattr(ops, op), x, y, want=spec(x, y))


BROADCASTING = ["divide", "power", "floor_mod", "mod", "not_equal", "bitwise_and", "squared_difference"]


@pytest.mark.parametrize("op", BROADCASTING)
def test_auto_broadcast(tmp_path, op):
    x = np.array([[5, 6, 7], [1, 2, 3]], np.int32)
    y = np.array([[2, 3, 1], [1, 2, 2]], np.int32)
    binary(tmp_path, lambda a, b: getattr(ops, op)(a, b, auto_broadcast="none"), x, y)
    a = ops.parameter([2, 3], np.int32, name="a")
    b = ops.parameter([2, 3], np.int32, name="b")
    xml = single_op(tmp_path, getattr(ops, op)(a, b, auto_broadcast="pdpd", name="bad"), [a, b], "pdpd")
    layer = re.search(r'<layer id="(\d+)" name="bad" type="(\w+)" version="opset(\d+)"', xml.read_text())
    assert layer is not None
    layer_id, op_type, version = layer.groups()
    with pytest.raises(ConversionError) as err:
        ortstate.convert(xml)
    assert str(err.value) == (
        f"{xml}: layer 'bad' (id {layer_id}, {op_type}-{version}): "
        "auto_broadcast=pdpd is not supported (expected numpy or none)"
    )


RNG = np.random.default_rng(0)


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "maximum", "minimum"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_arithmetic(tmp_path, op, dtype):
    a = ops.parameter([2, 3], dtype, name="a")
    b = ops.parameter([1, 3], dtype, name="b")
    xml = single_op(tmp_path, getattr(ops, op)(a, b), [a, b])
    check_model(xml, {"a": (RNG.random((2, 3)) * 10).astype(dtype), "b": (RNG.random((1, 3)) * 10).astype(dtype)})
