"""``runtime/ort_adapter.py``: the onnxruntime and onnxruntime-extensions internals ortstate relies on
are still there and still behave as relied on. A failure here means a new release of either package
moved them: update the adapter (and only it), then these tests."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import onnxruntime_extensions
from isolated import outcome, run_isolated
from onnx import TensorProto, helper
from oracle import REPO

import ortstate
from ortstate.runtime.ort_adapter import PYOP_DTYPES, FastBinding, FastRun, has_fast_path, raw_binding, raw_session

DEMO = REPO / "ortstate" / "_demo" / "char_lstm.xml"


def _adder() -> ort.InferenceSession:
    """A plain one-node session: y = x + 1 (f32 [2, 3])."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"])],
        "adder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [onnx.numpy_helper.from_array(np.ones((), np.float32), "one")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_floor_runs_through_onnxruntimes_own_session_object():
    """The floor and the explicit form's fast path skip the Python wrapper: if onnxruntime renames
    its internals, this says so (the code would still run, slower, through the wrapper)."""
    model = ortstate.convert(DEMO, explicit_state=True)
    session = ort.InferenceSession(model.SerializeToString())
    assert raw_session(session) is not session and hasattr(raw_session(session), "run_with_iobinding")
    binding = session.io_binding()
    assert raw_binding(binding) is not binding


def test_fast_run_gives_what_the_public_api_gives() -> None:
    """``FastRun.run`` and ``run_bound`` on onnxruntime's own objects answer as ``InferenceSession.run``."""
    session = _adder()
    assert has_fast_path(session)
    fast = FastRun(session)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    want = session.run(["y"], {"x": x})[0]
    np.testing.assert_array_equal(fast.run(["y"], {"x": x}, ort.RunOptions())[0], want)
    binding, raw = fast.binding()
    y = np.empty((2, 3), np.float32)
    binding.bind_cpu_input("x", x)
    binding.bind_output("y", "cpu", 0, np.float32, [2, 3], y.ctypes.data)
    fast.run_bound(raw, ort.RunOptions())
    np.testing.assert_array_equal(y, want)


def test_onnxruntime_extensions_internals_are_where_the_adapter_reaches() -> None:
    """Python ops are registered through ``_ocos.Opdef.create``, typed by ``PyCustomOpDef.dt_*`` and
    called through the hook ``PyCustomOpDef.install_hooker`` replaces (the default: ``_on_pyop_invocation``)."""
    ocos = onnxruntime_extensions._ocos
    assert callable(ocos.Opdef.create) and callable(ocos._on_pyop_invocation)
    assert callable(onnxruntime_extensions.PyCustomOpDef.install_hooker)
    codes = [getattr(onnxruntime_extensions.PyCustomOpDef, n) for n in ("dt_float", "dt_int64", "dt_bool", "dt_string")]
    assert len(set(codes)) == 4 and set(PYOP_DTYPES.values()) >= set(codes[:3])


PROBE = """
import numpy as np, onnx, onnxruntime as ort
from onnx import TensorProto, helper
from ortstate.meta import CONTRIB_DOMAIN
from ortstate.runtime.ort_adapter import custom_op_library, register_pyop

def body(feed, tag):  # hands back a transposed (non-contiguous) view, a 0-d int64 and a bool
    (x,) = feed
    return x.T, np.array(len(tag) + x.shape[0], np.int64), x.T > 2

register_pyop(body, "AdapterProbe", [np.float32], [np.float32, np.int64, np.bool_], "tag")
node = helper.make_node("AdapterProbe", ["x"], ["t", "n", "b"], domain=CONTRIB_DOMAIN, tag="abc")
graph = helper.make_graph(
    [node], "probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
    [helper.make_tensor_value_info("t", TensorProto.FLOAT, None),
     helper.make_tensor_value_info("n", TensorProto.INT64, None),
     helper.make_tensor_value_info("b", TensorProto.BOOL, None)],
)
opsets = [helper.make_opsetid("", 17), helper.make_opsetid(CONTRIB_DOMAIN, 1)]
model = helper.make_model(graph, opset_imports=opsets, ir_version=9)
options = ort.SessionOptions()
options.register_custom_ops_library(custom_op_library())
session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
x = np.arange(6, dtype=np.float32).reshape(2, 3)
t, n, b = session.run(None, {"x": x})
assert t.dtype == np.float32 and t.tolist() == x.T.tolist(), t
assert n.dtype == np.int64 and n.shape == () and int(n) == 5, (n, n.shape)
assert b.dtype == np.bool_ and b.tolist() == (x.T > 2).tolist(), b
print("probe ok")
"""


def test_python_op_outputs_cross_through_the_hook() -> None:
    """A Python op registered through the adapter runs in a session, and its outputs (a non-contiguous
    view, a 0-d array, a bool array) arrive with the shape, type and values the op gave. In a fresh
    interpreter: ops must be registered before any session exists."""
    proc = run_isolated(PROBE, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "probe ok", outcome(proc)


ENVIRONMENT = """
import os
os.environ.pop("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", None)
import ortstate
session = ortstate.StatefulSession("models/accumulator/model.xml", form="custom-op")
print(os.environ.get("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "unset"))
"""


def test_importing_the_runtime_leaves_the_environment_as_it_was() -> None:
    """onnxruntime-extensions switches protobuf to pure Python for every process started after it is
    imported (``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python``); ortstate puts the environment back,
    so the processes a user starts run protobuf as they would have."""
    proc = run_isolated(ENVIRONMENT, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "unset", outcome(proc)


def test_fast_binding_binds_arrays_and_allocated_outputs_on_onnxruntimes_own_binding() -> None:
    """``FastBinding`` reaches onnxruntime's own binding object (``bind_input(name, array)``,
    ``bind_output(name, OrtDevice._get_c_device())``, ``get_outputs()``) where the release has it,
    and gives what the public IOBinding gives: each run's output a fresh array, earlier ones kept."""
    session = _adder()
    fast = FastRun(session)
    io = FastBinding(fast)
    assert io.raw is not io.binding and callable(ort.OrtDevice.make("cpu", 0)._get_c_device)
    results = []
    for k in range(2):
        x = np.full((2, 3), k, np.float32)
        io.bind_array("x", x)
        io.bind_allocated_output("y")
        fast.run_bound(io.raw, ort.RunOptions())
        results.append(io.outputs()[0].numpy())
    np.testing.assert_array_equal(results[0], np.ones((2, 3), np.float32))  # not overwritten by the second run
    np.testing.assert_array_equal(results[1], np.full((2, 3), 2, np.float32))
