"""RMS norms (as optimum-intel exports them) -> SimplifiedLayerNormalization, against OpenVINO.

The translator must fuse exactly the pattern it can prove, ``x * 1 / sqrt(mean(x^2, -1) + eps)``
(then ``* gamma``), and leave anything else as the element-wise ops it was.
"""

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import openvino.opset13 as ops
import pytest
from oracle import check_model, single_op

import ortstate

RNG = np.random.default_rng(7)
HIDDEN = 16


def rms_model(tmp_path: Path, *, gamma: bool, axis: int = -1, of_other: bool = False, power: float = 2.0) -> Path:
    """Llama's RMSNorm as OpenVINO writes it, with variations the fusion must refuse."""
    x = ops.parameter([-1, -1, HIDDEN], np.float32, name="x")
    y = ops.parameter([-1, -1, HIDDEN], np.float32, name="y")
    f32 = np.float32
    mean = ops.reduce_mean(ops.power(x, np.array([[[power]]], f32)), np.array([axis]), keep_dims=True)
    r = ops.divide(np.array([[[1.0]]], f32), ops.sqrt(ops.add(mean, np.array([[[1e-6]]], f32))))
    out = ops.multiply(y if of_other else x, r)
    if gamma:
        out = ops.multiply(out, RNG.standard_normal((1, 1, HIDDEN)).astype(f32))
    return single_op(tmp_path, out, [x, y], "rms")


@pytest.mark.parametrize(
    "kwargs, fused",
    [
        ({"gamma": False}, True),
        ({"gamma": True}, True),
        ({"gamma": True, "axis": 1}, False),  # not over the last axis
        ({"gamma": False, "of_other": True}, False),  # the norm of x applied to y
        ({"gamma": False, "power": 3.0}, False),
    ],
    ids=["no-gamma", "gamma", "axis-1", "other-tensor", "cube"],
)
def test_rms_norm(tmp_path: Path, kwargs: dict, fused: bool) -> None:
    xml = rms_model(tmp_path, **kwargs)
    feeds = {name: RNG.standard_normal((2, 3, HIDDEN)).astype(np.float32) * 3 for name in ("x", "y")}
    check_model(xml, feeds)
    ortstate.convert(xml, tmp_path / "rms.onnx")
    counts = Counter(n.op_type for n in onnx.load(tmp_path / "rms.onnx").graph.node)
    if fused:
        assert counts == Counter({"SimplifiedLayerNormalization": 1}), counts
    else:
        assert "SimplifiedLayerNormalization" not in counts and counts["Pow"] == 1, counts
