"""LSTMSequence-5, GRUSequence-5, RNNSequence-5 -> ONNX LSTM / GRU / RNN.

OpenVINO is batch-major: X [batch, seq, input], H0/C0 [batch, num_dir, hidden], Y [batch, num_dir, seq,
hidden], Ho/Co [batch, num_dir, hidden]. ONNX (layout=0; ONNX Runtime rejects layout=1) is sequence-major:
X [seq, batch, input], initial_h/c and Y_h/c [num_dir, batch, hidden], Y [seq, num_dir, batch, hidden].
W/R/B keep ``num_dir`` first on both sides; gate orders and the bias split are in :mod:`.rnn_layout`.
"""

from __future__ import annotations

from ..context import Context, Node
from ..registry import translator
from ..rnn_layout import GRU, LSTM, RNN, Family, Float, bias, recurrent_attrs, sequence_lens, transpose, weights

_DIRECTIONS = ("forward", "reverse", "bidirectional")


def _sequence(node: Node, ctx: Context, family: Family, *, lbr: bool = False) -> list[str]:
    """One OpenVINO sequence op as one ONNX recurrent node between batch-major <-> sequence-major Transposes.

    OpenVINO inputs: X, H0, [C0,] seq_lengths, W, R, B. ONNX inputs: X, W, R, B, sequence_lens,
    initial_h[, initial_c]. Outputs Y, Ho[, Co] on both sides.
    """
    lstm = family is LSTM
    hidden = node.attr_int("hidden_size")
    direction = node.attr_choice("direction", _DIRECTIONS)
    num_dir = 2 if direction == "bidirectional" else 1
    attrs = recurrent_attrs(node, family, hidden, direction)
    if lbr:
        attrs["linear_before_reset"] = 1
    b = ctx.b
    fl = Float(node, b)
    seq = 3 if lstm else 2  # OpenVINO input index of seq_lengths; W, R, B follow it
    states = [transpose(b, fl.into(node.inputs[i]), [1, 0, 2]) for i in range(1, seq)]
    inputs = [
        transpose(b, fl.into(node.inputs[0]), [1, 0, 2]),
        weights(node, fl, seq + 1, "W", family, hidden, num_dir, cell=False),
        weights(node, fl, seq + 2, "R", family, hidden, num_dir, cell=False),
        bias(node, fl, seq + 3, family, hidden, num_dir, cell=False, lbr=lbr),
        sequence_lens(node, b, seq),
        *states,
    ]
    outs = b.op(family.onnx_op, inputs, attrs, outputs=1 + len(states))
    y = transpose(b, outs[0], [2, 1, 0, 3])
    return [fl.out(v) for v in [y, *(transpose(b, s, [1, 0, 2]) for s in outs[1:])]]


@translator("LSTMSequence", 5)
def lstm_sequence_v5(node: Node, ctx: Context) -> list[str]:
    """LSTMSequence-5: gates ``fico`` (OpenVINO) -> ``iofc`` (ONNX); outputs Y, Ho, Co."""
    return _sequence(node, ctx, LSTM)


@translator("GRUSequence", 5)
def gru_sequence_v5(node: Node, ctx: Context) -> list[str]:
    """GRUSequence-5: gates ``zrh`` on both sides; ``linear_before_reset`` B [4*hidden] split into Wb/Rb."""
    return _sequence(node, ctx, GRU, lbr=node.attr_bool("linear_before_reset", False))


@translator("RNNSequence", 5)
def rnn_sequence_v5(node: Node, ctx: Context) -> list[str]:
    """RNNSequence-5: one gate; outputs Y, Ho."""
    return _sequence(node, ctx, RNN)
