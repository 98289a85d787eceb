"""LSTM/GRU/RNN sequences and cells against OpenVINO, over attributes, shapes and weight forms."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import onnx
import openvino as ov
import openvino.opset1 as ops1
import openvino.opset3 as ops3
import openvino.opset4 as ops4
import openvino.opset5 as ops5
import pytest
from openvino.utils.node_factory import NodeFactory
from oracle import check_model, open_session, single_op

import ortstate
from ortstate.convert.rnn_layout import GRU, LSTM, RNN, gate_order, onnx_bias_array, reorder_gates

RNG = np.random.default_rng(0)
INPUT = 3
FAMILIES = {"lstm": LSTM, "gru": GRU, "rnn": RNN}
GATES = {kind: family.gates for kind, family in FAMILIES.items()}
ALT_ACTIVATIONS = {  # non-default functions OpenVINO's CPU plugin runs (it has no hardsigmoid: tested apart)
    "lstm": (["tanh", "relu", "sigmoid"], [], []),
    "gru": (["tanh", "relu"], [], []),
    "rnn": (["relu"], [], []),
}


def _rand(*shape: int, scale: float = 0.5) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _op_counts(xml) -> Counter:  # noqa: ANN001
    return Counter(n.op_type for n in ortstate.convert(xml).graph.node)


def _sequence(
    tmp_path,  # noqa: ANN001
    kind: str,
    *,
    batch: int = 2,
    seq: int = 4,
    hidden: int = 5,
    direction: str = "forward",
    clip: float = 0.0,
    activations: bool = False,
    lbr: bool = False,
    lengths: str = "full",
    params: bool = False,
    compress: bool = False,
    dtype: type = np.float32,
):  # noqa: ANN202
    """A one-op sequence model and its feeds. ``lengths``: full (constant), const (constant, some
    rows shorter), i32/i64 (a Parameter, some rows shorter). ``params``: W, R, B are Parameters."""
    num_dir = 2 if direction == "bidirectional" else 1
    rows = GATES[kind] * hidden
    feeds = {"X": _rand(batch, seq, INPUT, scale=1.0), "H0": _rand(batch, num_dir, hidden)}
    if kind == "lstm":
        feeds["C0"] = _rand(batch, num_dir, hidden)
    short = np.array([seq - i % seq for i in range(batch)])
    inputs = [ops5.parameter(v.shape, dtype, name=k) for k, v in feeds.items()]
    if lengths in ("full", "const"):
        seq_lengths = ops5.constant(np.full(batch, seq, np.int32) if lengths == "full" else short.astype(np.int32))
    else:
        feeds["L"] = short.astype(np.int32 if lengths == "i32" else np.int64)
        seq_lengths = ops5.parameter([batch], feeds["L"].dtype, name="L")
        inputs.append(seq_lengths)
    wrb = {
        "W": _rand(num_dir, rows, INPUT),
        "R": _rand(num_dir, rows, hidden),
        "B": _rand(num_dir, rows + hidden * lbr),
    }
    if params:
        feeds.update(wrb)
        weights = [ops5.parameter(v.shape, dtype, name=k) for k, v in wrb.items()]
        inputs += weights
    else:
        weights = [ops5.constant(v.astype(dtype)) for v in wrb.values()]
    feeds = {k: v.astype(dtype) if v.dtype == np.float32 else v for k, v in feeds.items()}
    names, alpha, beta = ALT_ACTIVATIONS[kind] if activations else (None, None, None)
    extra = {"activations": names, "activations_alpha": alpha, "activations_beta": beta, "clip": clip}
    args = [inputs[0], inputs[1]] + ([inputs[2]] if kind == "lstm" else []) + [seq_lengths, *weights]
    if kind == "lstm":
        node = ops5.lstm_sequence(*args, hidden, direction, **extra)
    elif kind == "gru":
        node = ops5.gru_sequence(*args, hidden, direction, **extra, linear_before_reset=lbr)
    else:
        node = ops5.rnn_sequence(*args, hidden, direction, **extra)
    return single_op(tmp_path, node, inputs, compress=compress), feeds


KINDS = [("lstm", False), ("gru", False), ("gru", True), ("rnn", False)]
KIND_IDS = ["lstm", "gru", "gru-lbr", "rnn"]


@pytest.mark.parametrize(("kind", "lbr"), KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("seq", [1, 5])
def test_sequence_shapes(tmp_path, kind, lbr, direction, batch, seq):
    hidden = 4 if batch == 1 else 7
    xml, feeds = _sequence(tmp_path, kind, batch=batch, seq=seq, hidden=hidden, direction=direction, lbr=lbr)
    check_model(xml, feeds, rtol=1e-4, atol=1e-4)
    # Constant weights are reordered at conversion time: one recurrent node, no run-time reshuffling.
    counts = _op_counts(xml)
    assert counts[kind.upper()] == 1
    assert counts["Split"] == counts["Concat"] == counts["ConstantOfShape"] == 0
    assert counts["Transpose"] == (6 if kind == "lstm" else 4)


@pytest.mark.parametrize(("kind", "lbr"), KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("clip", [0.0, 0.7])
@pytest.mark.parametrize("activations", [False, True], ids=["default-act", "alt-act"])
def test_sequence_attributes(tmp_path, kind, lbr, direction, clip, activations):
    xml, feeds = _sequence(tmp_path, kind, direction=direction, clip=clip, activations=activations, lbr=lbr)
    check_model(xml, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("kind", "lbr"), KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_sequence_f16_compressed(tmp_path, kind, lbr, direction):
    xml, feeds = _sequence(tmp_path, kind, batch=3, seq=5, direction=direction, lbr=lbr, compress=True)
    assert 'element_type="f16"' in xml.read_text()
    check_model(xml, feeds, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(("kind", "lbr"), KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("lengths", ["const", "i32", "i64"])
def test_sequence_lengths(tmp_path, kind, lbr, direction, lengths):
    xml, feeds = _sequence(tmp_path, kind, batch=3, seq=5, direction=direction, lbr=lbr, lengths=lengths)
    check_model(xml, feeds, rtol=1e-4, atol=1e-4)
    assert _op_counts(xml)["Cast"] == (1 if lengths == "i64" else 0)


def test_full_constant_lengths_are_omitted(tmp_path):
    xml, _ = _sequence(tmp_path, "lstm")
    (lstm,) = [n for n in ortstate.convert(xml).graph.node if n.op_type == "LSTM"]
    assert lstm.input[4] == ""


@pytest.mark.parametrize(("kind", "lbr"), KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_sequence_weights_as_inputs(tmp_path, kind, lbr, direction):
    xml, feeds = _sequence(tmp_path, kind, batch=3, seq=5, direction=direction, lbr=lbr, lengths="i32", params=True)
    check_model(xml, feeds, rtol=1e-4, atol=1e-4)
    counts = _op_counts(xml)
    assert counts["Split"] == {"lstm": 3, "gru": 0, "rnn": 0}[kind] + lbr  # W, R, B reordered; lbr B split


def test_sequence_f16_model(tmp_path):
    xml, feeds = _sequence(tmp_path, "lstm", batch=3, seq=5, direction="bidirectional", lengths="i32", dtype=np.float16)
    outputs = check_model(xml, feeds, rtol=1e-2, atol=1e-2)
    assert outputs[0].dtype == np.float16


# -- cells --------------------------------------------------------------------------------------


def _cell(
    tmp_path,
    kind: str,
    *,
    batch: int = 2,
    hidden: int = 5,
    clip: float = 0.0,
    activations: bool = False,
    lbr: bool = False,
    params: bool = False,
    compress: bool = False,
):  # noqa: ANN202
    """A one-op cell model and its feeds; ``kind`` lstm1 / lstm4 / gru / rnn."""
    family = kind.rstrip("14")
    rows = GATES[family] * hidden
    feeds = {"X": _rand(batch, INPUT, scale=1.0), "H0": _rand(batch, hidden)}
    if family == "lstm":
        feeds["C0"] = _rand(batch, hidden)
    inputs = [ops4.parameter(v.shape, np.float32, name=k) for k, v in feeds.items()]
    wrb = {"W": _rand(rows, INPUT), "R": _rand(rows, hidden), "B": _rand(rows + hidden * lbr)}
    if params:
        feeds.update(wrb)
        weights = [ops4.parameter(v.shape, np.float32, name=k) for k in wrb for v in [wrb[k]]]
        all_params = inputs + weights
    else:
        weights = [ops4.constant(v) for v in wrb.values()]
        all_params = inputs
    names, alpha, beta = ALT_ACTIVATIONS[family] if activations else (None, None, None)
    if kind == "rnn":
        names, alpha, beta = names or ["tanh"], alpha or [], beta or []
    extra = {"activations": names, "activations_alpha": alpha, "activations_beta": beta, "clip": clip}
    make = {"lstm1": ops1.lstm_cell, "lstm4": ops4.lstm_cell, "gru": ops3.gru_cell, "rnn": ops3.rnn_cell}[kind]
    more = {"linear_before_reset": lbr} if family == "gru" else {}
    node = make(*inputs, *weights, hidden, **extra, **more)
    return single_op(tmp_path, node, all_params, compress=compress), feeds


CELLS = [("lstm1", False), ("lstm4", False), ("gru", False), ("gru", True), ("rnn", False)]
CELL_IDS = ["lstm1", "lstm4", "gru", "gru-lbr", "rnn"]
CELL_VERSION = {"lstm1": "opset1", "lstm4": "opset4", "gru": "opset3", "rnn": "opset1"}


@pytest.mark.parametrize(("kind", "lbr"), CELLS, ids=CELL_IDS)
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("hidden", [1, 6])
def test_cell_shapes(tmp_path, kind, lbr, batch, hidden):
    xml, feeds = _cell(tmp_path, kind, batch=batch, hidden=hidden, lbr=lbr)
    assert re.search(rf'type="\w+Cell" version="{CELL_VERSION[kind]}"', xml.read_text())
    check_model(xml, feeds, rtol=1e-4, atol=1e-4)
    counts = _op_counts(xml)
    assert counts[kind.rstrip("14").upper()] == 1
    assert counts["Split"] == counts["Concat"] == counts["Transpose"] == 0


@pytest.mark.parametrize(("kind", "lbr"), CELLS, ids=CELL_IDS)
@pytest.mark.parametrize("clip", [0.0, 0.7])
@pytest.mark.parametrize("activations", [False, True], ids=["default-act", "alt-act"])
def test_cell_attributes(tmp_path, kind, lbr, clip, activations):
    xml, feeds = _cell(tmp_path, kind, clip=clip, activations=activations, lbr=lbr)
    check_model(xml, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("kind", "lbr"), CELLS, ids=CELL_IDS)
@pytest.mark.parametrize("form", ["f16-compressed", "inputs"])
def test_cell_weight_forms(tmp_path, kind, lbr, form):
    compress = form == "f16-compressed"
    xml, feeds = _cell(tmp_path, kind, batch=3, lbr=lbr, compress=compress, params=not compress)
    tol = 1e-3 if compress else 1e-4
    check_model(xml, feeds, rtol=tol, atol=tol)


def _lstm_cell_v1(tmp_path, **attrs):  # noqa: ANN202
    hidden = 2
    x = ops1.parameter([1, INPUT], np.float32, name="X")
    h = ops1.parameter([1, hidden], np.float32, name="H0")
    c = ops1.parameter([1, hidden], np.float32, name="C0")
    p = attrs.pop("P", np.zeros(3 * hidden, np.float32))
    consts = [ops1.constant(v).output(0) for v in (_rand(8, INPUT), _rand(8, hidden), _rand(8), p)]
    base = {
        "hidden_size": hidden,
        "weights_format": "fico",
        "input_forget": False,
        "clip": 0.0,
        "activations": ["sigmoid", "tanh", "tanh"],
        "activations_alpha": [],
        "activations_beta": [],
    }
    node = NodeFactory("opset1").create("LSTMCell", [x.output(0), h.output(0), c.output(0), *consts], base | attrs)
    xml = single_op(tmp_path, node, [x, h, c], name="cell")
    # ov.save_model writes the peepholes Const but drops its edge (port 6); older IRs carried it.
    text = xml.read_text()
    cell = re.search(r'<layer id="(\d+)" [^>]*type="LSTMCell"', text)
    const = re.findall(r'<layer id="(\d+)" [^>]*type="Const"', text)[-1]
    start = text.index("</input>", cell.end())
    text = text[:start] + f'<port id="6" precision="FP32"><dim>{3 * hidden}</dim></port>' + text[start:]
    edge = f'<edge from-layer="{const}" from-port="0" to-layer="{cell[1]}" to-port="6" />'
    xml.write_text(text.replace("</edges>", edge + "</edges>"))
    return xml


def test_lstm_cell_v1_zero_peepholes(tmp_path):
    xml = _lstm_cell_v1(tmp_path)
    check_model(xml, {"X": _rand(1, INPUT), "H0": _rand(1, 2), "C0": _rand(1, 2)}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        ({"weights_format": "ifco"}, "attribute 'weights_format' expected fico, got 'ifco'"),
        ({"input_forget": True}, "attribute 'input_forget' expected false, got true (coupled gates are not supported)"),
        (
            {"P": np.ones(6, np.float32)},
            "input 6 (peepholes) expected a constant of zeros (peepholes are not supported)",
        ),
    ],
)
def test_lstm_cell_v1_unsupported(tmp_path, attrs, message):
    xml = _lstm_cell_v1(tmp_path, **attrs)
    layer = re.search(r'<layer id="(\d+)" name="([^"]+)" type="LSTMCell"', xml.read_text())
    where = f"{xml}: layer '{layer[2]}' (id {layer[1]}, LSTMCell-1)"
    with pytest.raises(ortstate.ConversionError) as info:
        ortstate.convert(xml)
    assert str(info.value) == f"{where}: {message}"


def _hardsigmoid_model(tmp_path, kind: str, names: list[str], alpha: list[float], beta: list[float], direction: str):
    """A sequence with hardsigmoid in it, saved with its own names (OpenVINO's CPU plugin cannot run it)."""
    xml, feeds = _sequence(tmp_path, kind, batch=2, seq=3, direction=direction)
    text = xml.read_text()
    default = ", ".join(FAMILIES[kind].activations)
    attrs = (
        f'activations="{", ".join(names)}" activations_alpha="{", ".join(map(str, alpha))}" '
        + f'activations_beta="{", ".join(map(str, beta))}"'
    )
    xml.write_text(text.replace(f'activations="{default}" activations_alpha="" activations_beta=""', attrs, 1))
    assert attrs in xml.read_text()
    return xml, feeds


def test_hardsigmoid_against_numpy(tmp_path):
    """RNN: H_t = hardsigmoid(X_t W^T + H_{t-1} R^T + B), alpha/beta from the IR's positions."""
    xml, feeds = _hardsigmoid_model(tmp_path, "rnn", ["hardsigmoid"], [0.3], [0.4], "forward")
    (seq_op,) = [op for op in ov.Core().read_model(xml).get_ops() if op.get_type_name() == "RNNSequence"]
    w, r, b = (seq_op.input_value(i).get_node().get_data()[0] for i in (3, 4, 5))
    h = feeds["H0"][:, 0]
    ys = []
    for t in range(feeds["X"].shape[1]):
        h = np.clip(0.3 * (feeds["X"][:, t] @ w.T + h @ r.T + b) + 0.4, 0, 1)
        ys.append(h)
    y, ho = open_session(xml).run(None, feeds)
    np.testing.assert_allclose(y[:, 0], np.stack(ys, 1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ho[:, 0], h, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("kind", "names", "alpha", "beta", "want"),
    [
        ("gru", ["relu", "hardsigmoid"], [0.0, 0.25], [0.0, 0.6], (["Relu", "HardSigmoid"], [0.25], [0.6])),
        (
            "lstm",
            ["hardsigmoid", "tanh", "hardsigmoid"],
            [0.3],
            [],
            (["HardSigmoid", "Tanh", "HardSigmoid"], [0.3, 0.2], [0.5, 0.5]),
        ),
    ],
)
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_activation_alpha_beta_by_position(tmp_path, kind, names, alpha, beta, want, direction):
    """OpenVINO indexes alphas by activation position (defaults 0.2/0.5); ONNX consumes them in order."""
    xml, _ = _hardsigmoid_model(tmp_path, kind, names, alpha, beta, direction)
    (node,) = [n for n in ortstate.convert(xml).graph.node if n.op_type == kind.upper()]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    repeat = 2 if direction == "bidirectional" else 1
    assert [a.decode() for a in attrs["activations"]] == want[0] * repeat
    np.testing.assert_allclose(attrs["activation_alpha"], want[1] * repeat)
    np.testing.assert_allclose(attrs["activation_beta"], want[2] * repeat)


def test_f64_is_refused(tmp_path):
    xml, _ = _sequence(tmp_path, "gru", dtype=np.float64)
    with pytest.raises(
        ortstate.ConversionError, match=r"X element type f64 is not supported \(expected f32, bf16 or f16\)$"
    ):
        ortstate.convert(xml)


def test_unknown_activation_is_refused(tmp_path):
    xml, _ = _sequence(tmp_path, "rnn")
    text = xml.read_text()
    xml.write_text(text.replace('activations="tanh"', 'activations="softsign"'))
    with pytest.raises(
        ortstate.ConversionError,
        match=r"activation 'softsign' is not supported \(expected one of "
        r"sigmoid, tanh, relu, hardsigmoid\)$",
    ):
        ortstate.convert(xml)


# -- layout helpers -----------------------------------------------------------------------------


def test_gate_orders():
    assert gate_order(LSTM.ov_gates, LSTM.onnx_gates) == [1, 3, 0, 2]  # f i c o -> i o f c
    assert gate_order(GRU.ov_gates, GRU.onnx_gates) == [0, 1, 2]
    rows = np.repeat(np.array(list("fico")), 2)[None]  # [1, 4 * hidden 2]
    assert "".join(reorder_gates(rows, LSTM, axis=1)[0, ::2]) == "iofc"


def test_gru_linear_before_reset_bias_split():
    b = np.arange(8, dtype=np.float32)[None]  # hidden 2: [z z r r wh wh rh rh]
    assert onnx_bias_array(b, GRU, True).tolist() == [[0, 1, 2, 3, 4, 5, 0, 0, 0, 0, 6, 7]]
    assert onnx_bias_array(b[:, :6], GRU, False).tolist() == [[0, 1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0]]
