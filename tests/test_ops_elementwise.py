"""Binary element-wise translators (Divide, Power, FloorMod, Mod, bitwise, shifts, ...) against OpenVINO.

The oracle is the OpenVINO CPU plugin, except where that plugin departs from the op spec: integer
Divide ignores ``m_pythondiv`` (openvino#38248) and u32/u64 right shifts fill with the sign bit.
There ortstate is held to the spec, written in numpy, and OpenVINO's reference implementation
(``Node.evaluate``, what constant folding runs) is checked to agree with that where it has a kernel.
"""

import re
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import openvino.opset15 as ops15
import pytest
from oracle import assert_close, check_model, open_session, ov_request, ov_run, single_op

import ortstate
from ortstate.errors import ConversionError

INTS = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]
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


def binary(tmp_path: Path, make, x: np.ndarray, y: np.ndarray, name: str = "op") -> Path:
    """``make(a, b)`` on two Parameters, checked against the OpenVINO CPU plugin."""
    a = ops.parameter(x.shape, x.dtype, name="a")
    b = ops.parameter(y.shape, y.dtype, name="b")
    xml = single_op(tmp_path, make(a, b), [a, b], name)
    check_model(xml, {"a": x, "b": y})
    return xml


def check_spec(tmp_path: Path, make, *arrays: np.ndarray, want: np.ndarray) -> None:
    """ortstate (both forms) on ``make(*params)`` must give ``want``, the op spec written in numpy.

    For where the CPU plugin departs from the spec. OpenVINO's reference implementation must agree
    with ``want`` too, where it has a kernel for the type.
    """
    params = [ops.parameter(a.shape, a.dtype, name=f"in{i}") for i, a in enumerate(arrays)]
    feeds = {f"in{i}": a for i, a in enumerate(arrays)}
    node = make(*params)
    xml = single_op(tmp_path, node, params, "spec")
    for explicit in (False, True):
        got = open_session(xml, explicit).run(None, feeds)[0]
        assert_close(got, want, f"explicit_state={explicit}")
    if node.get_output_partial_shape(0).is_dynamic:
        return
    fed = dict(zip((p.get_name() for p in params), arrays))
    inputs = [v.get_node() for v in node.input_values()]
    values = [fed[n.get_name()] if n.get_type_name() == "Parameter" else getattr(n, "data", None) for n in inputs]
    if any(v is None for v in values):
        return
    out = ov.Tensor(node.get_output_element_type(0), node.get_output_shape(0))
    if node.evaluate([out], [ov.Tensor(np.ascontiguousarray(v)) for v in values]):
        assert_close(out.data, want, "OpenVINO reference implementation")


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
    """Why test_divide holds signed python division to the spec; XPASSes (fails) once OpenVINO fixes the plugin."""
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


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, bool])
def test_not_equal(tmp_path, dtype):
    x = np.array([[1, 0, -2, 3], [0, 0, 1, 1]]).astype(dtype)
    binary(tmp_path, ops.not_equal, x, np.array([1, -2, 3, 1]).astype(dtype))


@pytest.mark.parametrize("dtype", [bool, np.float32, np.int32])
def test_logical_not(tmp_path, dtype):
    x = np.array([[1, 0, -2], [0, 3, 0]]).astype(dtype)
    a = ops.parameter(x.shape, x.dtype, name="a")
    check_model(single_op(tmp_path, ops.logical_not(a), [a]), {"a": x})


@pytest.mark.parametrize("op", ["bitwise_and", "bitwise_or", "bitwise_xor"])
@pytest.mark.parametrize("dtype", [bool, *INTS])
def test_bitwise(tmp_path, op, dtype):
    x = np.array([[-8, 3, 0, 1, -1, 100], [5, -128, 127, 0, 6, 1]]).astype(dtype)
    y = np.array([5, -1, 0, 1, 85, -100]).astype(dtype)
    binary(tmp_path, getattr(ops, op), x, y)


@pytest.mark.parametrize("dtype", [bool, *INTS])
def test_bitwise_not(tmp_path, dtype):
    x = np.array([-8, 3, 0, 1, -1, 127, -128]).astype(dtype)
    a = ops.parameter(x.shape, x.dtype, name="a")
    check_model(single_op(tmp_path, ops.bitwise_not(a), [a]), {"a": x})


def shift_cases(dtype, max_shift: int) -> tuple[np.ndarray, np.ndarray]:
    """Values (negatives when signed, never the top bit when unsigned) and shifts in [0, max_shift]."""
    x = np.array([-8, -7, -1, 1, 7, 100, -100, 5, -128, 127, 0, -3])
    s = np.array([1, 1, 3, 2, 0, max_shift, 2, 5, 7, 1, 4, max_shift - 1])
    if not np.issubdtype(dtype, np.signedinteger):
        x = np.abs(x)
    return x.astype(dtype), s.astype(dtype)


@pytest.mark.parametrize("op", ["bitwise_left_shift", "bitwise_right_shift"])
@pytest.mark.parametrize("dtype", INTS)
def test_shifts(tmp_path, op, dtype):
    # The CPU plugin runs 64-bit shifts in 32 bits: it is the oracle only for results that fit in 32.
    bits = np.iinfo(dtype).bits
    x, s = shift_cases(dtype, bits - 1 if bits <= 32 else 20)
    binary(tmp_path, getattr(ops15, op), x, s)


@pytest.mark.parametrize("op", ["bitwise_left_shift", "bitwise_right_shift"])
@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
def test_shifts_64_bit(tmp_path, op, dtype):
    x, s = shift_cases(dtype, 63)
    check_spec(tmp_path, getattr(ops15, op), x, s, want=x << s if op == "bitwise_left_shift" else x >> s)


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_right_shift_unsigned_top_bit(tmp_path, dtype):
    """Logical, as the reference implementation shifts; the CPU plugin fills with ones here."""
    x = np.array([np.iinfo(dtype).max, np.iinfo(dtype).max - 7, 1 << (np.iinfo(dtype).bits - 1)], dtype)
    s = np.array([1, 3, 4], dtype)
    check_spec(tmp_path, ops15.bitwise_right_shift, x, s, want=x >> s)


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
