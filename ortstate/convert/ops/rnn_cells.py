"""LSTMCell-1/-4, GRUCell-3, RNNCell-1 -> one-step forward ONNX LSTM / GRU / RNN.

OpenVINO X [batch, input], H0/C0 [batch, hidden], W [gates*hidden, input], R [gates*hidden, hidden],
B [gates*hidden] become ONNX X [1, batch, input], initial_h/c [1, batch, hidden], W [1, gates*hidden, input],
R [1, gates*hidden, hidden], B [1, 2*gates*hidden] (see :mod:`.rnn_layout`); ONNX Y_h/Y_c [1, batch, hidden]
lose their leading axis to give Ho/Co [batch, hidden].
"""

from __future__ import annotations

import numpy as np

from ..context import Context, Node
from ..registry import translator
from ..rnn_layout import GRU, LSTM, RNN, Family, Float, bias, recurrent_attrs, weights


def _cell(node: Node, ctx: Context, family: Family, *, lbr: bool = False) -> list[str]:
    """OpenVINO inputs X, H0, [C0,] W, R[, B]; outputs Ho[, Co]. ONNX's Y (equal to Y_h here) is not asked for."""
    lstm = family is LSTM
    hidden = node.attr_int("hidden_size")
    attrs = recurrent_attrs(node, family, hidden, "forward")
    if lbr:
        attrs["linear_before_reset"] = 1
    b = ctx.b
    fl = Float(node, b)
    axis0 = b.const(np.array([0], np.int64))
    w = 3 if lstm else 2  # OpenVINO input index of W; R and B follow it
    x, *states = (b.op("Unsqueeze", [fl.into(node.inputs[i]), axis0]) for i in range(w))
    inputs = [
        x,
        weights(node, fl, w, "W", family, hidden, 1, cell=True),
        weights(node, fl, w + 1, "R", family, hidden, 1, cell=True),
        bias(node, fl, w + 2, family, hidden, 1, cell=True, lbr=lbr),
        "",  # sequence_lens
        *states,
    ]
    names = [b.names.fresh(f"{b.hint}:{family.onnx_op}:{out}") for out in ("Y_h", "Y_c")[: len(states)]]
    b.op(family.onnx_op, inputs, attrs, names=["", *names])
    return [fl.out(b.op("Squeeze", [v, axis0])) for v in names]


@translator("LSTMCell", 1)
def lstm_cell_v1(node: Node, ctx: Context) -> list[str]:
    """LSTMCell-1 (IR ``opset1``): as LSTMCell-4 when its extras are at their neutral values.

    OpenVINO's CPU plugin ignores ``weights_format``, ``input_forget`` and peepholes (input 6), so a model
    relying on them has no reference behaviour to reproduce; those are refused rather than guessed.
    """
    fmt = node.attr("weights_format", "fico").strip().lower()
    if fmt != "fico":
        raise node.error(f"attribute 'weights_format' expected fico, got {fmt!r}")
    if node.attr_bool("input_forget", False):
        raise node.error("attribute 'input_forget' expected false, got true (coupled gates are not supported)")
    if len(node.inputs) > 6:
        peepholes = node.const(6)
        if peepholes is None or np.any(np.asarray(peepholes) != 0):
            raise node.error("input 6 (peepholes) expected a constant of zeros (peepholes are not supported)")
    return _cell(node, ctx, LSTM)


@translator("LSTMCell", 4)
def lstm_cell_v4(node: Node, ctx: Context) -> list[str]:
    """LSTMCell-4: gates ``fico`` (OpenVINO) -> ``iofc`` (ONNX); outputs Ho, Co."""
    return _cell(node, ctx, LSTM)


@translator("GRUCell", 3)
def gru_cell_v3(node: Node, ctx: Context) -> list[str]:
    """GRUCell-3: gates ``zrh`` on both sides; ``linear_before_reset`` B [4*hidden] split into Wb/Rb."""
    return _cell(node, ctx, GRU, lbr=node.attr_bool("linear_before_reset", False))


@translator("RNNCell", 1)
def rnn_cell_v1(node: Node, ctx: Context) -> list[str]:
    """RNNCell-1 (IR ``opset1``; the Python API has it in ``opset3``): one gate; output Ho."""
    return _cell(node, ctx, RNN)
