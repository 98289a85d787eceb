"""``convert/rnn_layout.py``: gate orders and bias layouts between OpenVINO and ONNX recurrent ops."""

from __future__ import annotations

import numpy as np

from ortstate.convert.rnn_layout import GRU, LSTM, gate_order, onnx_bias_array, reorder_gates


def test_gate_orders():
    assert gate_order(LSTM.ov_gates, LSTM.onnx_gates) == [1, 3, 0, 2]  # f i c o -> i o f c
    assert gate_order(GRU.ov_gates, GRU.onnx_gates) == [0, 1, 2]
    rows = np.repeat(np.array(list("fico")), 2)[None]  # [1, 4 * hidden 2]
    assert "".join(reorder_gates(rows, LSTM, axis=1)[0, ::2]) == "iofc"


def test_gru_linear_before_reset_bias_split():
    b = np.arange(8, dtype=np.float32)[None]  # hidden 2: [z z r r wh wh rh rh]
    assert onnx_bias_array(b, GRU, True).tolist() == [[0, 1, 2, 3, 4, 5, 0, 0, 0, 0, 6, 7]]
    assert onnx_bias_array(b[:, :6], GRU, False).tolist() == [[0, 1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0]]
