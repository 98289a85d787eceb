"""``convert/ops/bitwise.py`` (BitwiseAnd/Or/Xor/Not, BitwiseLeftShift/RightShift) against OpenVINO.

The CPU plugin fills u32/u64 right shifts with the sign bit: there ortstate is held to the op spec,
written in numpy (``check_spec``)
"""

import numpy as np
import openvino.opset13 as ops
import openvino.opset15 as ops15
import pytest
from oracle import binary, check_model, check_spec, single_op

INTS = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


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
