"""The committed optimum-intel LLM IRs (``models/llm/*``) still decode to their stored references.

OpenVINO and numpy only: each IR is compiled with the recorded config, the encoder (if any) re-run on
the stored input, then greedy decoding replayed with the recorded prompt and feeding conventions.
Tokens must match exactly, logits and final states within 1e-4 (states stored as f16: 1e-3 relative).

The references were recorded on one machine and hold on any x86 CPU: the config keeps OpenVINO's CPU
plugin in f32 (no bf16 compute, no f16 or u8 KV cache, no int8 activations: defaults it picks by
CPU), so kernels differ only in f32 summation order; and every greedy choice leads its runner-up by
at least a hundred times the logits' tolerance, so the tokens cannot flip either.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ov = pytest.importorskip("openvino")

LLM_DIR = Path(__file__).resolve().parents[1] / "models" / "llm"
sys.path.insert(0, str(LLM_DIR.parent))

from llm_reference import embedder, greedy, ir_ops, ir_variables, ov_config_for, ports  # noqa: E402

REFERENCES = sorted(LLM_DIR.glob("*/reference.json"))
LOGITS_ATOL = 1e-4


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.parametrize("ref_path", REFERENCES, ids=[p.parent.name for p in REFERENCES])
def test_reference_reproduces(ref_path: Path) -> None:
    folder = ref_path.parent
    ref = _load(ref_path)
    core = ov.Core()
    extra: dict[str, np.ndarray] = {}
    if ref["encoder"]:
        enc_ref = ref["encoder"]
        enc = core.compile_model(folder / enc_ref["ir"], "CPU", ref["ov_config"])
        enc_input = np.load(folder / enc_ref["input_file"])
        feeds = {enc_ref["input_name"]: enc_input}
        feeds.update({name: np.ones_like(enc_input) for name in enc_ref["extra_inputs"]})
        feeds = {p.get_any_name(): feeds[p.get_any_name()].astype(p.get_element_type().to_dtype()) for p in enc.inputs}
        hidden = np.array(enc.create_infer_request().infer(feeds)["last_hidden_state"])
        np.testing.assert_allclose(hidden, np.load(folder / enc_ref["output_file"]), atol=1e-4, rtol=0)
        extra["encoder_hidden_states"] = hidden
        if "encoder_attention_mask" in {i["name"] for i in ref["inputs"]}:
            extra["encoder_attention_mask"] = np.ones_like(enc_input)
    dec = core.compile_model(folder / ref["decoder_ir"], "CPU", ref["ov_config"])
    assert ports(dec, "inputs") == ref["inputs"]
    embed = None
    if ref.get("embeddings_ir"):
        embed = embedder(core.compile_model(folder / ref["embeddings_ir"], "CPU", ref["ov_config"]))
    run = greedy(dec, ref["decoding"], ref["prompt_ids"], len(ref["new_tokens"][0]), extra, embed)
    assert run["tokens"] == ref["new_tokens"]
    np.testing.assert_allclose(run["logits"], np.load(folder / ref["logits_file"]), atol=LOGITS_ATOL, rtol=0)
    stored = np.load(folder / ref["states_file"])
    assert sorted(run["states"]) == sorted(stored.files)
    for name, value in run["states"].items():
        expected = stored[name]
        if expected.dtype == np.float16:  # big states are stored rounded to f16
            np.testing.assert_allclose(value, expected.astype(np.float32), atol=1e-3, rtol=1e-3, err_msg=name)
        else:
            np.testing.assert_allclose(value, expected, atol=1e-4, rtol=0, err_msg=name)


@pytest.mark.parametrize("ref_path", REFERENCES, ids=[p.parent.name for p in REFERENCES])
def test_recorded_structure_matches_ir(ref_path: Path) -> None:
    folder = ref_path.parent
    ref = _load(ref_path)
    for xml, info in ref["irs"].items():
        assert dict(ir_ops(folder / xml)) == info["ops"], xml
        assert ir_variables(folder / xml) == info["variables"], xml
    assert ref["ov_config"] == ov_config_for(ref["weight_format"])  # f32 on any CPU (the module doc)
    logits = np.load(folder / ref["logits_file"])
    ranked = np.sort(logits.reshape(-1, logits.shape[-1]).astype(np.float64), axis=-1)
    assert np.min(ranked[:, -1] - ranked[:, -2]) >= 100 * LOGITS_ATOL  # no near-tie a CPU could flip
    assert sum(p.stat().st_size for p in folder.iterdir()) < 2_500_000


def test_some_references_present() -> None:
    assert REFERENCES, f"no reference.json under {LLM_DIR}"
