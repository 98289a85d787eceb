"""Ops of the LLM IRs: ScaledDotProductAttention, (Group)Convolution, MVN, Pad and Roll against OpenVINO."""

from collections import Counter
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import openvino as ov
import openvino.opset1 as ops1
import openvino.opset2 as ops2
import openvino.opset13 as ops
import pytest
from openvino.utils.node_factory import _get_node_factory
from oracle import check_model, ov_request, ov_run, single_op
from test_ops_elementwise import check_spec

import ortstate

RNG = np.random.default_rng(3)


def normal(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def param(name: str, shape, dtype=np.float32, dynamic: tuple[int, ...] = ()):  # noqa: ANN201
    """A Parameter whose dims listed in ``dynamic`` are -1."""
    dims = [-1 if i in dynamic else d for i, d in enumerate(shape)]
    return ops.parameter(ov.PartialShape(dims), dtype, name=name)


def onnx_ops(xml: Path) -> Counter:
    return Counter(n.op_type for n in ortstate.convert(xml).graph.node)


def layer_versions(xml: Path, op_type: str) -> set[str]:
    return {e.get("version") for e in ElementTree.parse(xml).iter("layer") if e.get("type") == op_type}


# -- ScaledDotProductAttention-13 ------------------------------------------------------------------------


def attention_mask(kind: str, shape: tuple[int, ...]) -> np.ndarray | None:
    if kind == "bool":
        mask = RNG.random(shape) > 0.4
        mask[..., 0] = True  # a row masked out entirely gives NaN in both runtimes; keep rows meaningful
        return mask
    if kind == "float":
        return np.where(RNG.random(shape) > 0.4, 0, -1e4).astype(np.float32) + normal(*shape)
    return None


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mask", ["none", "bool", "float", "zero"])
@pytest.mark.parametrize("lengths", [(4, 4), (3, 6), (6, 3)], ids=["L=S", "L<S", "L>S"])
def test_sdpa(tmp_path, lengths, mask, causal, scale, dynamic):
    """Batch and head dims, both mask types, the top-left causal mask for L != S, default and given scale."""
    (L, S), E = lengths, 8
    dyn = (0, 2, 3) if dynamic else ()
    q, k, v = (param(n, s, dynamic=dyn) for n, s in (("q", (2, 3, L, E)), ("k", (2, 3, S, E)), ("v", (2, 3, S, 5))))
    feeds = {"q": normal(2, 3, L, E), "k": normal(2, 3, S, E), "v": normal(2, 3, S, 5)}
    params, args = [q, k, v], [q, k, v]
    values = attention_mask(mask, (2, 1, L, S))
    if values is not None:
        m = param("m", values.shape, values.dtype, dynamic=(2, 3) if dynamic else ())
        params.append(m)
        args.append(m)
        feeds["m"] = values
    elif mask == "zero" or scale is not None:
        args.append(ops.constant(np.float32(0)))
    if scale is not None:
        args.append(ops.constant(np.float32(scale)))
    xml = single_op(tmp_path, ops.scaled_dot_product_attention(*args, causal=causal), params)
    assert layer_versions(xml, "ScaledDotProductAttention") == {"opset13"}
    check_model(xml, feeds, rtol=1e-5, atol=1e-5)
    counts = onnx_ops(xml)
    assert counts["Softmax"] == 1 and counts["MatMul"] == 2
    assert counts["Where"] == (1 if causal or mask == "bool" else 0)
    assert counts["Add"] == (1 if mask == "float" and not causal else 0)  # a scalar 0 mask adds nothing


@pytest.mark.parametrize(
    "shapes",
    [
        ((1, 4, 3, 8), (2, 1, 5, 8), (1, 4, 5, 8), (1, 1, 1, 5)),  # numpy-broadcast batch dims, mask row L = 1
        ((4, 3, 8), (4, 5, 8), (4, 5, 6), (3, 5)),  # one batch dim, rank-2 mask
        ((2, 2, 2, 3, 8), (2, 2, 2, 5, 8), (2, 2, 2, 5, 8), (2, 1, 2, 3, 5)),  # three batch dims
    ],
    ids=["broadcast", "rank3", "rank5"],
)
def test_sdpa_batch_dims(tmp_path, shapes):
    params = [param(n, s) for n, s in zip("qkvm", shapes)]
    feeds = {n: normal(*s) for n, s in zip("qkvm", shapes)}
    xml = single_op(tmp_path, ops.scaled_dot_product_attention(*params, causal=False), params)
    check_model(xml, feeds)


def test_sdpa_rejects_gqa_repeat(tmp_path):
    """Why key heads are not repeated for the query heads: OpenVINO itself refuses 2 key heads for 4."""
    q, k, v = param("q", (1, 4, 3, 8)), param("k", (1, 2, 5, 8)), param("v", (1, 2, 5, 8))
    with pytest.raises(RuntimeError, match="Key input shape not compatible"):
        ops.scaled_dot_product_attention(q, k, v, causal=False)


@pytest.mark.parametrize("sink_shape", [(2, 3, 4, 1), (2, 3, 1, 1)])
def test_sdpa_sink(tmp_path, sink_shape):
    """The optional 6th input: a per-row logit that takes part in the softmax and is dropped after it."""
    q, k, v = param("q", (2, 3, 4, 8), dynamic=(2,)), param("k", (2, 3, 6, 8), dynamic=(2,)), param("v", (2, 3, 6, 8))
    mask, sink = param("m", (2, 1, 4, 6), dynamic=(2,)), param("sink", sink_shape)
    scale = ops.constant(np.float32(0.25))
    inputs = [q, k, v, mask, scale, sink]
    node = _get_node_factory("opset13").create("ScaledDotProductAttention", inputs, {"causal": False})
    xml = single_op(tmp_path, node, [q, k, v, mask, sink])
    feeds = {"q": normal(2, 3, 4, 8), "k": normal(2, 3, 6, 8), "v": normal(2, 3, 6, 8)}
    feeds |= {"m": normal(2, 1, 4, 6), "sink": normal(*sink_shape) * 3}
    check_model(xml, feeds)


# -- Convolution-1 / GroupConvolution-1 -------------------------------------------------------------------

CONV_CASES = {
    # name: (data shape, kernel, strides, pads_begin, pads_end, dilations, auto_pad)
    "1d": ((2, 3, 11), (3,), [1], [0], [0], [1], "explicit"),
    "1d-whisper": ((1, 4, 12), (3,), [2], [1], [1], [1], "explicit"),
    "1d-dilated": ((1, 3, 13), (3,), [1], [2], [1], [2], "explicit"),
    "2d": ((2, 3, 9, 10), (3, 2), [2, 1], [1, 0], [0, 1], [1, 1], "explicit"),
    "2d-patches": ((1, 3, 16, 16), (8, 8), [8, 8], [0, 0], [0, 0], [1, 1], "explicit"),
    "2d-dilated": ((1, 2, 11, 12), (3, 3), [1, 2], [0, 0], [0, 0], [2, 1], "explicit"),
    "same_upper": ((1, 3, 10, 9), (4, 3), [2, 2], [0, 0], [0, 0], [1, 1], "same_upper"),
    "same_lower": ((1, 3, 10, 9), (4, 3), [2, 2], [0, 0], [0, 0], [1, 1], "same_lower"),
    "same_upper-dilated": ((1, 3, 11), (2,), [3], [0], [0], [2], "same_upper"),  # odd total padding: 1
    "same_lower-dilated": ((1, 3, 11, 10), (2, 3), [3, 1], [0, 0], [0, 0], [2, 2], "same_lower"),
    "valid": ((1, 3, 10, 9), (3, 3), [2, 2], [5, 5], [5, 5], [1, 1], "valid"),
}


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("case", list(CONV_CASES))
def test_convolution(tmp_path, case, compress):
    shape, kernel, strides, begin, end, dilations, auto_pad = CONV_CASES[case]
    x = param("x", shape, dynamic=(0, len(shape) - 1))
    w = ops.constant(normal(5, shape[1], *kernel))
    xml = single_op(tmp_path, ops.convolution(x, w, strides, begin, end, dilations, auto_pad), [x], compress=compress)
    assert layer_versions(xml, "Convolution") == {"opset1"}
    check_model(xml, {"x": normal(*shape)}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_group_convolution(tmp_path, case):
    """Two groups of 3 input and 2 output channels each."""
    shape, kernel, strides, begin, end, dilations, auto_pad = CONV_CASES[case]
    shape = (shape[0], 6, *shape[2:])
    x = param("x", shape, dynamic=(0,))
    w = ops.constant(normal(2, 2, 3, *kernel))
    node = ops.group_convolution(x, w, strides, begin, end, dilations, auto_pad)
    xml = single_op(tmp_path, node, [x])
    check_model(xml, {"x": normal(*shape)}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("length", [1, 3, 9])
def test_group_convolution_depthwise_causal(tmp_path, length):
    """Mamba's causal conv1d: depthwise weights [C, 1, 1, k], pads k - 1 both sides, dynamic length."""
    x = param("x", (2, 8, length), dynamic=(0, 2))
    w = ops.constant(normal(8, 1, 1, 4))
    xml = single_op(tmp_path, ops.group_convolution(x, w, [1], [3], [3], [1]), [x])
    assert layer_versions(xml, "GroupConvolution") == {"opset1"}
    check_model(xml, {"x": normal(2, 8, length)})
    assert onnx_ops(xml)["Conv"] == 1


# -- MVN-1 / MVN-6 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("eps_mode", ["inside_sqrt", "outside_sqrt"])
@pytest.mark.parametrize("normalize_variance", [True, False])
@pytest.mark.parametrize("axes", [[-1], [1, 2], [0, 2], [2, 1], [0, 1, 2]], ids=str)
def test_mvn6(tmp_path, axes, normalize_variance, eps_mode):
    """A large eps (0.5) so that where it is added shows in the result."""
    x = param("x", (2, 3, 5), dynamic=(0, 1))
    node = ops.mvn(x, ops.constant(np.array(axes, np.int32)), normalize_variance, 0.5, eps_mode)
    xml = single_op(tmp_path, node, [x])
    assert layer_versions(xml, "MVN") == {"opset6"}
    check_model(xml, {"x": normal(2, 3, 5) * 2 + 1}, rtol=1e-5, atol=1e-5)


def test_mvn6_runtime_axes(tmp_path):
    x, axes = param("x", (2, 3, 5)), ops.parameter([1], np.int64, name="axes")
    xml = single_op(tmp_path, ops.mvn(x, axes, True, 1e-5, "inside_sqrt"), [x, axes])
    check_model(xml, {"x": normal(2, 3, 5), "axes": np.array([-2], np.int64)}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("across_channels", [True, False])
@pytest.mark.parametrize("normalize_variance", [True, False])
def test_mvn1(tmp_path, across_channels, normalize_variance):
    x = param("x", (2, 3, 4, 5))
    xml = single_op(tmp_path, ops2.mvn(x, across_channels, normalize_variance, 0.5), [x])
    assert layer_versions(xml, "MVN") == {"opset2"}
    check_model(xml, {"x": normal(2, 3, 4, 5) * 2 + 1}, rtol=1e-5, atol=1e-5)


# -- Pad-1 / Pad-12 ----------------------------------------------------------------------------------------

SPEC_DATA = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
PADS = {  # the spec's examples, then a crop of the whole first axis and a 3-D case
    "positive": ([0, 1], [2, 3]),
    "negative": ([-1, -1], [-1, -1]),
    "mixed": ([2, -1], [-1, 3]),
    "crop-both": ([-1, 2], [1, -2]),
    "zero": ([0, 0], [0, 0]),
}
MODES = ["constant", "edge", "reflect", "symmetric"]


@pytest.mark.parametrize("runtime_pads", [False, True])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("pads", list(PADS))
def test_pad12(tmp_path, pads, mode, runtime_pads):
    begin, end = (np.array(p, np.int64) for p in PADS[pads])
    x = param("x", (3, 4), dynamic=(0,) if runtime_pads else ())
    params, feeds = [x], {"x": SPEC_DATA}
    if runtime_pads:
        b, e = ops.parameter([2], np.int64, name="b"), ops.parameter([2], np.int64, name="e")
        params += [b, e]
        feeds |= {"b": begin, "e": end}
    else:
        b, e = ops.constant(begin), ops.constant(end)
    value = ops.constant(np.float32(-7)) if mode == "constant" else None
    xml = single_op(tmp_path, ops.pad(x, b, e, mode, value), params)
    assert layer_versions(xml, "Pad") == {"opset12"}
    check_model(xml, feeds)


@pytest.mark.parametrize("mode", MODES)
def test_pad12_3d_i32_pads(tmp_path, mode):
    x = param("x", (2, 3, 4), np.int32, dynamic=(2,))
    begin, end = ops.constant(np.array([1, 0, 3], np.int32)), ops.constant(np.array([0, 2, -1], np.int32))
    xml = single_op(tmp_path, ops.pad(x, begin, end, mode), [x])
    check_model(xml, {"x": RNG.integers(-9, 9, (2, 3, 4)).astype(np.int32)})


def test_pad12_bool_runtime(tmp_path):
    """As lfm2's mask padding: bool data, pads from run-time values, a False pad value."""
    x = param("x", (2, 3), bool, dynamic=(0, 1))
    b, e = ops.parameter([2], np.int64, name="b"), ops.parameter([2], np.int64, name="e")
    xml = single_op(tmp_path, ops.pad(x, b, e, "constant", ops.constant(np.bool_(False))), [x, b, e])
    feeds = {"x": np.array([[1, 0, 1], [0, 1, 1]], bool)}
    feeds |= {"b": np.array([0, 2], np.int64), "e": np.array([1, -1], np.int64)}
    check_model(xml, feeds)


@pytest.mark.parametrize("mode", MODES)
def test_pad1(tmp_path, mode):
    x = param("x", (3, 4))
    xml = single_op(tmp_path, ops1.pad(x, [2, 1], [1, 3], mode), [x])
    assert layer_versions(xml, "Pad") == {"opset1"}
    check_model(xml, {"x": SPEC_DATA})


def test_pad_structure(tmp_path):
    """Constant pads become one ONNX Pad; symmetric pads only the padded axes, with one Gather each."""
    x = param("x", (3, 4))
    xml = single_op(tmp_path, ops.pad(x, [0, 1], [2, 3], "constant"), [x], "constant")
    assert onnx_ops(xml)["Pad"] == 1
    xml = single_op(tmp_path, ops.pad(x, [0, 1], [0, 3], "symmetric"), [x], "symmetric")
    assert onnx_ops(xml)["Gather"] == 1 and onnx_ops(xml)["Pad"] == 0


# -- Roll-7 ------------------------------------------------------------------------------------------------

ROLLS = {  # the spec's examples, then negative, oversized and scalar shifts and negative axes
    "one-axis": (1, [0]),
    "two-axes": ([-1, 2], [0, 1]),
    "repeated-axis": ([1, 2, 1], [0, 1, 0]),
    "negative": ([-5], [1]),
    "oversized": ([11, -9], [0, 2]),
    "negative-axes": ([1, -3], [-1, -2]),
    "full-turn": ([4], [0]),
}


@pytest.mark.parametrize("runtime_shift", [False, True])
@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("roll", list(ROLLS))
def test_roll(tmp_path, roll, dynamic, runtime_shift):
    shift, axes = (np.array(v, np.int64) for v in ROLLS[roll])
    x = param("x", (4, 3, 5), dynamic=(0, 1, 2) if dynamic else ())
    params, feeds = [x], {"x": normal(4, 3, 5)}
    if runtime_shift:
        s = ops.parameter(list(shift.shape), np.int64, name="s")
        params.append(s)
        feeds["s"] = shift
    else:
        s = ops.constant(shift)
    xml = single_op(tmp_path, ops.roll(x, s, ops.constant(axes.astype(np.int32))), params)
    assert layer_versions(xml, "Roll") == {"opset7"}
    check_model(xml, feeds)


@pytest.mark.parametrize("runtime_shift", [False, True])
def test_roll_scalar_shift(tmp_path, runtime_shift):
    """A scalar shift rolls every listed axis (the spec; the CPU plugin fails on it, see below)."""
    x = normal(4, 3, 5)
    axes = ops.constant(np.array([0, -1], np.int64))
    if runtime_shift:
        check_spec(tmp_path, lambda d, s: ops.roll(d, s, axes), x, np.array(-2, np.int64), want=np.roll(x, -2, (0, 2)))
    else:
        shift = ops.constant(np.array(-2, np.int64))
        check_spec(tmp_path, lambda d: ops.roll(d, shift, axes), x, want=np.roll(x, -2, (0, 2)))


@pytest.mark.xfail(strict=True, reason="the CPU plugin wants as many shifts as axes, even for a scalar shift")
def test_roll_scalar_shift_cpu_plugin(tmp_path):
    """Why test_roll_scalar_shift holds Roll to the spec; XPASSes (fails) once the CPU plugin follows it."""
    x = param("x", (4, 3, 5))
    node = ops.roll(x, ops.constant(np.array(2, np.int64)), ops.constant(np.array([0, 2], np.int64)))
    xml = single_op(tmp_path, node, [x])
    got = ov_run(ov_request(xml), {"x": np.arange(60, dtype=np.float32).reshape(4, 3, 5)})[0]
    np.testing.assert_array_equal(got, np.roll(np.arange(60, dtype=np.float32).reshape(4, 3, 5), 2, (0, 2)))


def test_roll_like_mamba(tmp_path):
    """Mamba's conv-state update: roll the last axis by -1 on [batch, channels, kernel]."""
    x = param("x", (2, 8, 4), dynamic=(0,))
    xml = single_op(tmp_path, ops.roll(x, ops.constant(np.array([-1])), ops.constant(np.array([-1]))), [x])
    check_model(xml, {"x": normal(2, 8, 4)})
    assert onnx_ops(xml)["Concat"] == 1
