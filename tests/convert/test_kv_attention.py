"""A decoder's attention over a KV variable: which layers take ONNX Runtime's fused
GroupQueryAttention (the graph decides, never a model's name), and that either way every form
steps exactly as OpenVINO does: prefill, decode, a batch continuing with several rows (the case the
kernel refuses, run by the composition in the same graph), beam reorders, padding, resets."""

from __future__ import annotations

import numpy as np
import pytest
from attention_models import HIDDEN, Spec, save_layer
from oracle import RESET, check_steps

import ortstate
from ortstate.convert import read_attention_report
from ortstate.passes.walk import nodes

FUSED = "GroupQueryAttention"
SPECS = {
    "gqa-bool-mask": (Spec(), FUSED),
    "mha": (Spec(heads=4, kv_heads=4), FUSED),
    "float-mask": (Spec(mask="float"), FUSED),
    "sliding-window": (Spec(mask="window"), FUSED),
    "no-mask-scale": (Spec(mask="none", scale=0.3), FUSED),
    "scale": (Spec(scale=0.5), FUSED),
    "head-size-12": (Spec(size=12), "head size 12 is not a multiple of 8"),
    "causal-attribute": (Spec(mask="none", causal=True), "causal attribute"),
    "sink-per-head": (Spec(sink="heads"), FUSED),  # gpt-oss: the kernel's head_sink
    "sink-per-head-no-mask": (Spec(mask="none", sink="heads"), FUSED),
    "sink-computed": (Spec(sink="computed"), "attention sinks computed at run time"),
}
RNG = np.random.default_rng(3)


def _x(batch: int, seq: int) -> np.ndarray:
    return RNG.standard_normal((batch, seq, HIDDEN)).astype(np.float32)


def _steps() -> list:
    ones = lambda b, t: np.ones((b, t), np.int64)  # noqa: E731
    arange = lambda b: np.arange(b, dtype=np.int32)  # noqa: E731
    padded = ones(2, 3)
    padded[1, 1] = 0  # a pad in the middle of the second row: no query row is masked entirely
    steps = [{"x": _x(2, 3), "attention_mask": padded, "beam_idx": arange(2)}]
    total = 3
    for beam in ([0, 1], [0, 1], [1, 0], [0, 0]):  # decode; then beams swapped and one row repeated
        total += 1
        mask = np.concatenate([padded, ones(2, total - 3)], axis=1)
        steps.append({"x": _x(2, 1), "attention_mask": mask, "beam_idx": np.array(beam, np.int32)})
    total += 2  # a batch of 2 continuing with 2 rows: the composition's case
    steps.append(
        {"x": _x(2, 2), "attention_mask": np.concatenate([padded, ones(2, total - 3)], 1), "beam_idx": arange(2)}
    )
    steps += [RESET, {"x": _x(1, 4), "attention_mask": ones(1, 4), "beam_idx": arange(1)}]
    for total in (5, 6):
        steps.append({"x": _x(1, 1), "attention_mask": ones(1, total), "beam_idx": arange(1)})
    steps.append({"x": _x(1, 3), "attention_mask": ones(1, 9), "beam_idx": arange(1)})  # batch 1, 3 rows more
    # one stream grows into four beams, as a beam search's first step does
    steps.append({"x": _x(4, 1), "attention_mask": ones(4, 10), "beam_idx": np.zeros(4, np.int32)})
    return steps


@pytest.mark.parametrize("name", list(SPECS))
def test_attention_runs_as_the_graph_allows_and_matches_openvino(tmp_path, name: str) -> None:
    spec, expected = SPECS[name]
    xml = save_layer(tmp_path, spec)
    for explicit in (False, True):
        model = ortstate.convert(xml, explicit_state=explicit)
        (row,) = read_attention_report(model) or [None]
        assert row is not None
        ops = {node.op_type for node in nodes(model.graph)}
        if expected == FUSED:
            assert (row["as"], FUSED in ops) == (FUSED, True), row
        else:
            assert row["as"] == "composed" and row["why"].startswith(expected), row
            assert FUSED not in ops
    check_steps(xml, _steps(), rtol=1e-5, atol=1e-5)


def test_beam_reorder_is_left_to_the_runtime(tmp_path) -> None:
    """The fused layer's graph gathers no cache by beam_idx: the variables say the runtime does."""
    model = ortstate.convert(save_layer(tmp_path, Spec()), explicit_state=True)
    meta = ortstate.meta.read_meta(model)
    assert meta is not None and {v.reorder for v in meta.variables} == {"beam_idx"}
    readers = [n.op_type for n in nodes(model.graph) if "beam_idx" in n.input]
    assert readers == []
