"""``ortstate.decoders.inputs``: one description of a model's inputs, read from its IR or from a
session of it, and random values that fit it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from oracle import REPO, open_session

from ortstate.decoders import InputSpec, concrete_shape, input_specs, random_inputs
from ortstate.errors import DecoderError, InputError, OrtStateError
from ortstate.ir import read_ir
from ortstate.runtime import numpy_dtype

MODELS = REPO / "models"
F32, I32, I64 = np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.int64)


@pytest.mark.parametrize("explicit", [False, True], ids=["custom-op", "explicit"])
@pytest.mark.parametrize("name", ["accumulator", "counter_i64", "kv_cache_toy", "lstm_2l_dynbatch"])
def test_an_ir_and_its_session_describe_the_same_inputs(name: str, explicit: bool) -> None:
    xml = MODELS / name / "model.xml"
    from_ir = input_specs(read_ir(xml))
    from_session = input_specs(open_session(xml, explicit).get_inputs())
    assert [(s.name, s.dtype, s.rank, s.axis) for s in from_session] == [
        (s.name, s.dtype, s.rank, s.axis) for s in from_ir
    ]
    for ir, session in zip(from_ir, from_session):
        assert ir.dims is not None and session.dims is not None
        for a, b in zip(ir.dims, session.dims):
            assert a == b if a is not None else not isinstance(b, int), (ir, session)


def test_the_inputs_of_an_ir() -> None:
    assert input_specs(read_ir(MODELS / "kv_cache_toy" / "model.xml")) == [
        InputSpec("input", F32, (None, None, 8)),
        InputSpec("beam_idx", I32, (None,)),
    ]


def test_a_parameter_is_read_by_its_declared_type_not_its_port(tmp_path: Path) -> None:
    """A port's ``precision`` is optional in the IR; the Parameter's ``element_type`` is not."""
    folder = MODELS / "kv_cache_toy"
    xml = tmp_path / "model.xml"
    xml.write_text((folder / "model.xml").read_text().replace(' precision="FP32" names="input"', ' names="input"'))
    (tmp_path / "model.bin").write_bytes((folder / "model.bin").read_bytes())
    graph = read_ir(xml)
    assert graph.parameters[0].outputs[0].element_type is None
    assert input_specs(graph)[0] == InputSpec("input", F32, (None, None, 8))


# Every element type ONNX Runtime names, and what numpy holds it as (None: no numpy dtype).
ONNX_TYPES = {
    TensorProto.FLOAT: "float32", TensorProto.DOUBLE: "float64", TensorProto.FLOAT16: "float16",
    TensorProto.BOOL: "bool", TensorProto.INT8: "int8", TensorProto.INT16: "int16", TensorProto.INT32: "int32",
    TensorProto.INT64: "int64", TensorProto.UINT8: "uint8", TensorProto.UINT16: "uint16",
    TensorProto.UINT32: "uint32", TensorProto.UINT64: "uint64", TensorProto.BFLOAT16: None,
    TensorProto.STRING: None,
}  # fmt: skip


def _identity_session(elem_type: int) -> ort.InferenceSession:
    name = TensorProto.DataType.Name(elem_type).lower()
    graph = helper.make_graph(
        [helper.make_node("Identity", [name], ["y"])],
        "g",
        [helper.make_tensor_value_info(name, elem_type, ["batch", 3])],
        [helper.make_tensor_value_info("y", elem_type, ["batch", 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("elem_type", list(ONNX_TYPES), ids=lambda t: TensorProto.DataType.Name(t))
def test_a_session_input_of_each_type(elem_type: int) -> None:
    """As the runtime reads the types of what it runs (:func:`ortstate.runtime.numpy_dtype`)."""
    arg = _identity_session(elem_type).get_inputs()[0]
    want = ONNX_TYPES[elem_type]
    assert (numpy_dtype(arg.type) or None) == (None if want is None else np.dtype(want))
    if want is None:
        with pytest.raises(DecoderError) as info:
            input_specs([arg])
        assert str(info.value) == f"input '{arg.name}': unsupported type {arg.type}"
        with pytest.raises(InputError):
            input_specs([arg], error=InputError)
    else:
        assert input_specs([arg]) == [InputSpec(arg.name, np.dtype(want), ("batch", 3))]


def test_concrete_shapes_put_the_batch_on_the_batch_axis() -> None:
    dims = (None, 3, None)
    assert concrete_shape(InputSpec("x", F32, dims), 5, 4) == (5, 3, 4)
    assert concrete_shape(InputSpec("x", F32, dims, axis=2), 5, 4) == (4, 3, 5)
    assert concrete_shape(InputSpec("x", F32, dims, axis=None), 5, 4) == (4, 3, 4)
    assert concrete_shape(InputSpec("x", F32, ("b", 3)), 5, 4, override=(7, 3)) == (7, 3)
    with pytest.raises(InputError, match=r"^input 'x': shape \[7, 2\] does not fit \[\?,3,\?\]$"):
        concrete_shape(InputSpec("x", F32, dims), 5, 4, override=(7, 2), error=InputError)


def test_shown_dims() -> None:
    assert InputSpec("x", F32, (None, "s", 8)).shown() == "[?,?,8]"
    assert InputSpec("x", F32, (1, None)).shown() == "[1,?]"
    assert InputSpec("x", F32, None).shown() == "[...]"


def test_random_inputs_follow_the_specs() -> None:
    specs = input_specs(read_ir(MODELS / "kv_cache_toy" / "model.xml"))
    feeds = random_inputs(specs, np.random.default_rng(0), batch=3, shapes={"input": (3, 5, 8)})
    assert feeds["input"].shape == (3, 5, 8) and feeds["input"].dtype == np.float32
    assert feeds["beam_idx"].shape == (3,) and feeds["beam_idx"].dtype == np.int32
    assert set(feeds["beam_idx"].tolist()) <= {0, 1, 2}
    assert random_inputs(specs[1:], np.random.default_rng(0), batch=2)["beam_idx"].shape == (2,)
    assert random_inputs(specs[:1], np.random.default_rng(0), batch=2, dim=6)["input"].shape == (2, 6, 8)
    flags = random_inputs([InputSpec("m", np.dtype(bool), (2, 64))], np.random.default_rng(0))["m"]
    assert flags.dtype == np.bool_ and flags.any() and not flags.all()
    scaled = random_inputs([InputSpec("f", F32, (4096,))], np.random.default_rng(0), scale=0.5)["f"]
    assert 0.45 < float(scaled.std()) < 0.55
    with pytest.raises(OrtStateError, match=r"input 'r' has a dynamic rank: give a shape \(--shape r=D0,D1,...\)"):
        random_inputs([InputSpec("r", F32, None)], np.random.default_rng(0), error=InputError)


def test_stream_pool_inputs_are_the_same_specs() -> None:
    """The stream pool describes its inputs with the one :class:`InputSpec`: 1 on the batch axis."""
    import ortstate

    specs = ortstate.StreamPool(MODELS / "lstm_2l_dynbatch" / "model.xml").layout.inputs
    assert all(type(s) is InputSpec for s in specs)
    assert [(s.name, s.dims, s.axis, s.rows) for s in specs] == [("x", (1, None, 8), 0, False)]
