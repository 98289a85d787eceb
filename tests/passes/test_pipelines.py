"""``passes/pipelines.py``: the named pipelines in their order, a step that applies only where it
does, the model copied only when a step changes it, and a pass writing its own metadata."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import ortstate
from ortstate.meta import CUSTOM_OP, EXPLICIT, read_meta
from ortstate.passes.pipelines import CONVERT, EXPORT, KV_POOL, LOAD, LOAD_CUSTOM_OP, POOL
from ortstate.passes.pipelines import EXPLICIT as EXPLICIT_PIPELINE

ACC = Path(__file__).resolve().parents[2] / "models/accumulator/model.xml"


def test_each_pipeline_spells_out_its_order() -> None:
    assert {p.name: [s.name for s in p.steps] for p in (CONVERT, EXPLICIT_PIPELINE, LOAD, LOAD_CUSTOM_OP)} == {
        "convert": ["prune", "guard_inits", "cancel_transposes", "fold_static"],
        "explicit": ["to_explicit"],
        "load": ["to_explicit", "share_kv", "group_decode"],
        "load-custom-op": ["fuse_state_ops"],
    }
    assert {p.name: [s.name for s in p.steps] for p in (POOL, KV_POOL, EXPORT)} == {
        "pool": ["to_explicit", "pool_form"],
        "kv-pool": ["to_explicit", "share_kv", "ragged_kv", "slice_last_logits", "prune"],
        "export": ["kv_layout"],
    }


def test_a_pass_writes_its_own_metadata_and_says_what_changed() -> None:
    model = ortstate.convert(ACC)
    meta = read_meta(model)
    assert meta is not None and meta.form == CUSTOM_OP
    ran = EXPLICIT_PIPELINE.run(model, meta)
    assert ran.meta.form == EXPLICIT and read_meta(model) == ran.meta
    assert ran.results["to_explicit"].changed
    session = ortstate.StatefulSession(model)
    x = np.ones((1, 3), np.float32)
    session.run(None, {"x": x})
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], 2 * x)


def test_the_model_is_owned_only_when_a_step_applies() -> None:
    model = ortstate.convert(ACC, explicit_state=True)
    meta = read_meta(model)
    before = model.SerializeToString()
    owned: list[int] = []

    def own():  # noqa: ANN202
        owned.append(1)
        return model

    ran = LOAD.run(model, meta, own=own)  # explicit, no KV cache: no step applies
    assert (owned, ran.results, ran.meta) == ([], {}, meta)
    assert model.SerializeToString() == before
    custom = ortstate.convert(ACC)
    ran = LOAD.run(custom, read_meta(custom), own=lambda: owned.append(1) or custom)
    assert owned == [1] and list(ran.results) == ["to_explicit"] and ran.found("share_kv") is None
