"""``convert/ops/rnn_cells.py`` (LSTMCell, GRUCell, RNNCell) against OpenVINO."""

from __future__ import annotations

import re

import numpy as np
import openvino.opset1 as ops1
import openvino.opset3 as ops3
import openvino.opset4 as ops4
import pytest
from openvino.utils.node_factory import NodeFactory
from oracle import RNN_ALT_ACTIVATIONS, RNN_GATES, RNN_INPUT, check_model, normal, onnx_ops, single_op

import ortstate


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
    rows = RNN_GATES[family] * hidden
    feeds = {"X": normal(batch, RNN_INPUT, scale=1.0), "H0": normal(batch, hidden, scale=0.5)}
    if family == "lstm":
        feeds["C0"] = normal(batch, hidden, scale=0.5)
    inputs = [ops4.parameter(v.shape, np.float32, name=k) for k, v in feeds.items()]
    wrb = {
        "W": normal(rows, RNN_INPUT, scale=0.5),
        "R": normal(rows, hidden, scale=0.5),
        "B": normal(rows + hidden * lbr, scale=0.5),
    }
    if params:
        feeds.update(wrb)
        weights = [ops4.parameter(v.shape, np.float32, name=k) for k in wrb for v in [wrb[k]]]
        all_params = inputs + weights
    else:
        weights = [ops4.constant(v) for v in wrb.values()]
        all_params = inputs
    names, alpha, beta = RNN_ALT_ACTIVATIONS[family] if activations else (None, None, None)
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
    counts = onnx_ops(xml)
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
    x = ops1.parameter([1, RNN_INPUT], np.float32, name="X")
    h = ops1.parameter([1, hidden], np.float32, name="H0")
    c = ops1.parameter([1, hidden], np.float32, name="C0")
    p = attrs.pop("P", np.zeros(3 * hidden, np.float32))
    consts = [
        ops1.constant(v).output(0)
        for v in (normal(8, RNN_INPUT, scale=0.5), normal(8, hidden, scale=0.5), normal(8, scale=0.5), p)
    ]
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
    check_model(
        xml,
        {"X": normal(1, RNN_INPUT, scale=0.5), "H0": normal(1, 2, scale=0.5), "C0": normal(1, 2, scale=0.5)},
        rtol=1e-4,
        atol=1e-4,
    )


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
