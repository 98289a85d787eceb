"""``passes/batchable/pool_form.py``: the pool's form, the batchable passes in their order, and
the metadata it writes; a model the pool cannot batch is refused naming why."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from batchable_models import accumulator, dims, run

from ortstate.errors import OrtStateError
from ortstate.meta import ModelMeta, read_meta
from ortstate.passes.batchable import pool_form


def test_the_pool_form_batches_rows_apart_and_writes_its_metadata() -> None:
    model, meta = accumulator()
    form = pool_form(model, meta, "m.onnx")
    assert dict(form.dims) == {"x": (1, 4)} and dict(form.flags) == {}
    assert dict(form.axes.states) == {"h": 0}
    assert read_meta(model) == form.meta == meta
    assert [(n.op_type, list(n.input), list(n.output)) for n in model.graph.node] == [
        ("Add", ["x", "h_in"], ["y"]),
        ("Identity", ["y"], ["h_out"]),
    ]
    assert dims(model.graph.input[0]) == ["ortstate.pool.0.0", 4]
    x, h = np.arange(8, dtype=np.float32).reshape(2, 4), np.ones((2, 4), np.float32)
    y, h_out = run(model, {"x": x, "h_in": h})
    np.testing.assert_array_equal(y, x + h)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"shape": None}, "m.onnx: variable 'h' has a dynamic rank; a stream pool needs fixed-size states"),
        (
            {"length_input": "h_len"},
            "m.onnx: variable 'h' is a KV cache (reordered by beam_idx or kept in a larger buffer) that the pool "
            "cannot batch: only caches the converter's fused attention appends to are; generate one stream at a "
            "time with ortstate.generate.Generator",
        ),
    ],
)
def test_a_variable_the_pool_cannot_hold_is_refused_before_anything_changes(change: dict, message: str) -> None:
    model, meta = accumulator()
    meta = ModelMeta(form=meta.form, variables=(dataclasses.replace(meta.variables[0], **change),))
    before = model.SerializeToString()
    with pytest.raises(OrtStateError) as caught:
        pool_form(model, meta, "m.onnx")
    assert str(caught.value) == message
    assert model.SerializeToString() == before


def test_a_pinned_batch_is_refused_naming_the_layer() -> None:
    model, meta = accumulator(pin=True)
    with pytest.raises(OrtStateError, match=r"lost at layer 'r' \(id 3, Reshape-1\)"):
        pool_form(model, meta, "m.onnx")
