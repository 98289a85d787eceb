"""``convert/ops/attention.py`` (ScaledDotProductAttention) against OpenVINO."""

import numpy as np
import openvino.opset13 as ops
import pytest
from openvino.utils.node_factory import _get_node_factory
from oracle import check_model, layer_versions, normal, onnx_ops, param, single_op

RNG = np.random.default_rng(3)


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
