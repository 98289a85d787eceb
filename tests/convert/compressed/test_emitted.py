"""``compressed/emitted.py``: each weight's values written once per use, whatever reads them."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from quantized_weights import quantized

from ortstate.convert.compressed import EmittedWeights, FloatWeight
from ortstate.convert.compressed.emitted import FloatValues
from ortstate.convert.compressed.nbits import NBitsInputs


def test_each_weight_and_use_is_written_once():
    emitted, writes = EmittedWeights(), []

    def write(names):
        def make():
            writes.append(names)
            return NBitsInputs(names, {})

        return make

    w = quantized(np.zeros((1, 16), np.uint8), [[1]], [[8]], bits=8, block=16, name="w")
    first = emitted.matmul_inputs(w, False, write(("nibbles",)))
    assert emitted.matmul_inputs(w, False, write(("again",))) is first
    assert emitted.matmul_inputs(w, True, write(("native",))).names == ("native",)  # another form
    assert emitted.gather_inputs(w, write(("table",))).names == ("table",)  # another use
    assert emitted.gather_inputs(w, write(("again",))).names == ("table",)
    assert writes == [("nibbles",), ("native",), ("table",)]

    f = FloatWeight(SimpleNamespace(name="f", id=3), np.zeros((2, 2), np.float16), "f16 2x2")
    assert emitted.float_values(f, False, lambda: FloatValues("f", "cast")) == FloatValues("f", "cast")
    assert emitted.float_values(f, False, lambda: FloatValues("x", "y")) == FloatValues("f", "cast")
    assert emitted.float_values(f, True, lambda: FloatValues("f_t", "cast_t")).stored == "f_t"


def test_a_split_groups_outputs_are_found_by_matmul():
    emitted = EmittedWeights()
    q, k = SimpleNamespace(id=1), SimpleNamespace(id=2)
    assert emitted.split_output(q) is None
    emitted.add_split_outputs([(q, "q_out"), (k, "k_out")])
    assert (emitted.split_output(q), emitted.split_output(k)) == ("q_out", "k_out")
