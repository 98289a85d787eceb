"""``passes/offload.py``: initializers out of the protobuf, their values handed back; what ONNX
Runtime gets from them is what the model held."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortstate.passes import offload, offload_initializers, offloads_any


def model(*arrays: np.ndarray) -> onnx.ModelProto:
    """y = x + sum of the initializers w0, w1, ... (all f32 [n])."""
    names = [f"w{i}" for i in range(len(arrays))]
    nodes, last = [], "x"
    for i, name in enumerate(names):
        nodes.append(helper.make_node("Add", [last, name], [f"s{i}"]))
        last = f"s{i}"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    n = arrays[0].size
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])],
        [numpy_helper.from_array(a, name) for a, name in zip(arrays, names)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def run(m: onnx.ModelProto, handed: list[offload.Offloaded], x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    if handed:
        options.add_external_initializers(
            [h.name for h in handed], [ort.OrtValue.ortvalue_from_numpy(h.value) for h in handed]
        )
    session = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_small_models_are_left_alone() -> None:
    m = model(np.ones(4, np.float32))
    assert not offloads_any(m)
    assert offload_initializers(m) == []
    assert m.graph.initializer[0].data_location == TensorProto.DEFAULT


def test_large_inline_initializers_are_handed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past OFFLOAD_ABOVE in all, those of MIN_BYTES or more leave; ONNX Runtime gets them back."""
    monkeypatch.setattr(offload, "OFFLOAD_ABOVE", 100)
    monkeypatch.setattr(offload, "MIN_BYTES", 64)
    big, small = np.arange(32, dtype=np.float32), np.full(32, 0.5, np.float32)
    m = model(big, small[:8].repeat(4))  # 128 + 128 bytes: both leave
    want = run(model(big, small[:8].repeat(4)), [], np.ones(32, np.float32))
    assert offloads_any(m)
    handed = offload_initializers(m)
    assert [(h.name, h.data_type) for h in handed] == [("w0", TensorProto.FLOAT), ("w1", TensorProto.FLOAT)]
    np.testing.assert_array_equal(handed[0].value, big)
    for tensor in m.graph.initializer:
        assert tensor.data_location == TensorProto.EXTERNAL and not tensor.raw_data
        assert {e.key: e.value for e in tensor.external_data} == {
            "location": offload.NOWHERE,
            "offset": "0",
            "length": "128",
        }
    np.testing.assert_array_equal(run(m, handed, np.ones(32, np.float32)), want)


def test_converter_stubs_are_filled_from_the_arrays_given() -> None:
    """A stub (an initializer the converter left empty) takes its value from ``arrays``, made when
    it is a function, and viewed as the initializer's type and shape."""
    m = model(np.zeros(6, np.float32), np.zeros(6, np.float32))
    values = np.arange(6, dtype=np.float32)
    handed = offload_initializers(m, {"w0": values.view(np.uint8), "w1": lambda: values * 2})
    assert [h.name for h in handed] == ["w0", "w1"]
    np.testing.assert_array_equal(handed[0].value, values)
    np.testing.assert_array_equal(handed[1].value, values * 2)
    np.testing.assert_array_equal(run(m, handed, np.ones(6, np.float32)), 1 + values * 3)
