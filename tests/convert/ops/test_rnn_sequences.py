"""``convert/ops/rnn_sequences.py`` (LSTMSequence, GRUSequence, RNNSequence) against OpenVINO."""

from __future__ import annotations

import numpy as np
import onnx
import openvino as ov
import openvino.opset5 as ops5
import pytest
from oracle import (
    RNN_ALT_ACTIVATIONS,
    RNN_FAMILIES,
    RNN_GATES,
    RNN_INPUT,
    check_model,
    normal,
    onnx_ops,
    open_session,
    single_op,
)

import ortstate


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
    rows = RNN_GATES[kind] * hidden
    feeds = {"X": normal(batch, seq, RNN_INPUT, scale=1.0), "H0": normal(batch, num_dir, hidden, scale=0.5)}
    if kind == "lstm":
        feeds["C0"] = normal(batch, num_dir, hidden, scale=0.5)
    short = np.array([seq - i % seq for i in range(batch)])
    inputs = [ops5.parameter(v.shape, dtype, name=k) for k, v in feeds.items()]
    if lengths in ("full", "const"):
        seq_lengths = ops5.constant(np.full(batch, seq, np.int32) if lengths == "full" else short.astype(np.int32))
    else:
        feeds["L"] = short.astype(np.int32 if lengths == "i32" else np.int64)
        seq_lengths = ops5.parameter([batch], feeds["L"].dtype, name="L")
        inputs.append(seq_lengths)
    wrb = {
        "W": normal(num_dir, rows, RNN_INPUT, scale=0.5),
        "R": normal(num_dir, rows, hidden, scale=0.5),
        "B": normal(num_dir, rows + hidden * lbr, scale=0.5),
    }
    if params:
        feeds.update(wrb)
        weights = [ops5.parameter(v.shape, dtype, name=k) for k, v in wrb.items()]
        inputs += weights
    else:
        weights = [ops5.constant(v.astype(dtype)) for v in wrb.values()]
    feeds = {k: v.astype(dtype) if v.dtype == np.float32 else v for k, v in feeds.items()}
    names, alpha, beta = RNN_ALT_ACTIVATIONS[kind] if activations else (None, None, None)
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
    counts = onnx_ops(xml)
    assert counts[kind.upper()] == 1
    assert counts["Split"] == counts["Concat"] == counts["ConstantOfShape"] == 0
    # One Transpose per layout change (X, H0, C0 in; Y, Ho, Co out), but none where it only moves
    # axes of size 1 (passes/fold.py): H0, C0, Ho, Co with one direction and batch 1, X and Y with
    # batch 1 and one step.
    states = 2 if kind == "lstm" else 1
    layouts = 2 + 2 * states
    unit = (2 * states if batch == 1 and direction != "bidirectional" else 0) + (2 if batch == seq == 1 else 0)
    assert counts["Transpose"] == layouts - unit


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
    assert onnx_ops(xml)["Cast"] == (1 if lengths == "i64" else 0)


def test_full_constant_lengths_are_omitted(tmp_path):
    xml, _ = _sequence(tmp_path, "lstm")
    (lstm,) = [n for n in ortstate.convert(xml).graph.node if n.op_type == "LSTM"]
    assert lstm.input[4] == ""


@pytest.mark.parametrize(("kind", "lbr"), KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_sequence_weights_as_inputs(tmp_path, kind, lbr, direction):
    xml, feeds = _sequence(tmp_path, kind, batch=3, seq=5, direction=direction, lbr=lbr, lengths="i32", params=True)
    check_model(xml, feeds, rtol=1e-4, atol=1e-4)
    counts = onnx_ops(xml)
    assert counts["Split"] == {"lstm": 3, "gru": 0, "rnn": 0}[kind] + lbr  # W, R, B reordered; lbr B split


def test_sequence_f16_model(tmp_path):
    xml, feeds = _sequence(tmp_path, "lstm", batch=3, seq=5, direction="bidirectional", lengths="i32", dtype=np.float16)
    outputs = check_model(xml, feeds, rtol=1e-2, atol=1e-2)
    assert outputs[0].dtype == np.float16


def _hardsigmoid_model(tmp_path, kind: str, names: list[str], alpha: list[float], beta: list[float], direction: str):
    """A sequence with hardsigmoid in it, saved with its own names (OpenVINO's CPU plugin cannot run it)."""
    xml, feeds = _sequence(tmp_path, kind, batch=2, seq=3, direction=direction)
    text = xml.read_text()
    default = ", ".join(RNN_FAMILIES[kind].activations)
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
