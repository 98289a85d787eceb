"""``ortstate.decoders.feeds`` and what the graph tells about feeding (``ortstate.decoders.ir_inputs``):
the feeding rules of optimum-intel decoders, against the conventions the committed references were
fed with."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from oracle import REPO

from ortstate.decoders import DecoderError, FeedRules, InputSpec, ModelConfig, read_config

LLM = REPO / "models" / "llm"
I64, I32, F32 = np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.float32)


def reference(folder: Path) -> dict:
    return json.loads((folder / "reference.json").read_text())


# -- feeding rules ------------------------------------------------------------------------------------
LLAMA_INPUTS = (
    InputSpec("input_ids", I64, ("b", "s")),
    InputSpec("attention_mask", I64, ("b", "s")),
    InputSpec("position_ids", I64, ("b", "s")),
    InputSpec("beam_idx", I32, ("b",)),
)
MAMBA_INPUTS = (
    InputSpec("input_ids", I64, ("b", "s")),
    InputSpec("attention_mask", I64, ("b", "s")),
    InputSpec("cache_position", I64, ("s",)),
    InputSpec("beam_idx", I32, ("b",)),
)


def test_transformer_feeds_full_mask_and_positions() -> None:
    rules = FeedRules.for_model(LLAMA_INPUTS, ModelConfig(model_type="llama"))
    prefill = rules.feeds(np.array([[5, 6, 7], [8, 9, 10]]), past=0)
    assert prefill["input_ids"].dtype == I64 and prefill["input_ids"].shape == (2, 3)
    np.testing.assert_array_equal(prefill["attention_mask"], np.ones((2, 3)))
    np.testing.assert_array_equal(prefill["position_ids"], [[0, 1, 2], [0, 1, 2]])
    assert prefill["beam_idx"].dtype == I32 and prefill["beam_idx"].tolist() == [0, 1]
    step = rules.feeds(np.array([[11], [12]]), past=3)
    np.testing.assert_array_equal(step["attention_mask"], np.ones((2, 4)))
    np.testing.assert_array_equal(step["position_ids"], [[3], [3]])


def test_mamba_feeds_current_mask_and_conv_kernel_cache_position() -> None:
    rules = FeedRules.for_model(MAMBA_INPUTS, ModelConfig(model_type="mamba", conv_kernel=4))
    assert (rules.mask, rules.cache_position) == ("current", "conv_kernel")
    prefill = rules.feeds(np.array([[1, 2, 3, 4, 5]]), past=0)
    assert prefill["cache_position"].tolist() == [0, 1, 2, 3]
    assert prefill["attention_mask"].shape == (1, 5)
    step = rules.feeds(np.array([[6]]), past=5)
    assert step["cache_position"].tolist() == [5]
    assert step["attention_mask"].tolist() == [[1]]


def test_hybrid_ssm_without_cache_position_keeps_current_mask() -> None:
    inputs = (MAMBA_INPUTS[0], MAMBA_INPUTS[1], MAMBA_INPUTS[3])
    rules = FeedRules.for_model(inputs, ModelConfig(model_type="zamba2", conv_kernel=4))
    assert rules.feeds(np.array([[6]]), past=5)["attention_mask"].shape == (1, 1)
    granite = FeedRules.for_model(inputs, ModelConfig(model_type="granitemoehybrid", conv_kernel=4))
    assert granite.feeds(np.array([[6]]), past=5)["attention_mask"].shape == (1, 6)


def test_mrope_position_ids_repeat_per_section() -> None:
    inputs = (LLAMA_INPUTS[0], InputSpec("position_ids", I64, (3, "b", "s")))
    pos = FeedRules.for_model(inputs, ModelConfig()).feeds(np.array([[1, 2]]), past=4)["position_ids"]
    assert pos.shape == (3, 1, 2) and pos.tolist() == [[[4, 5]]] * 3


def test_encoder_decoder_feeds() -> None:
    inputs = (
        InputSpec("encoder_attention_mask", I64, ("b", "e")),
        InputSpec("input_ids", I64, ("b", "s")),
        InputSpec("encoder_hidden_states", F32, ("b", "e", 8)),
        InputSpec("beam_idx", I32, ("b",)),
    )
    rules = FeedRules.for_model(inputs, ModelConfig(model_type="t5"))
    assert rules.needs_encoder
    hidden = np.zeros((1, 6, 8), np.float32)
    feeds = rules.feeds(np.array([[0]]), past=0, context={"encoder_hidden_states": hidden})
    assert feeds["encoder_attention_mask"].shape == (1, 6) and feeds["encoder_attention_mask"].dtype == I64
    with pytest.raises(DecoderError, match=r"^input 'encoder_hidden_states' has no value: run the encoder first$"):
        rules.feeds(np.array([[0]]), past=0)


def test_unknown_input_is_refused() -> None:
    inputs = (LLAMA_INPUTS[0], InputSpec("pixel_values", F32, None))
    with pytest.raises(DecoderError) as info:
        FeedRules.for_model(inputs, ModelConfig())
    assert str(info.value) == (
        "no feeding rule for input(s) pixel_values (inputs: input_ids, pixel_values; known: attention_mask, "
        "beam_idx, cache_position, encoder_attention_mask, encoder_hidden_states, input_ids, inputs_embeds, "
        "position_ids, token_type_ids)"
    )


@pytest.mark.parametrize("folder", sorted(p.parent for p in LLM.glob("*/reference.json")), ids=lambda p: p.name)
def test_rules_agree_with_recorded_conventions(folder: Path) -> None:
    """Our rules, made from input names and config.json alone, are the ones the references were fed with."""
    ref = reference(folder)
    dtypes = {"i64": I64, "i32": I32, "f32": F32}
    inputs = [InputSpec(i["name"], dtypes[i["type"]], None) for i in ref["inputs"]]
    rules = FeedRules.for_model(inputs, read_config(folder))
    assert rules.uses_embeddings == bool(ref["embeddings_ir"])
    assert rules.needs_encoder == bool(ref["encoder"])
    if "attention_mask" in rules.names:
        assert rules.mask == ref["decoding"]["attention_mask"]
    if "cache_position" in rules.names:
        assert rules.cache_position == ref["decoding"]["cache_position"]
        assert rules.conv_kernel == ref["decoding"]["conv_kernel"]


# -- what the graph tells, and what is said when config.json is missing ---------------------------------
def test_cache_position_window_is_read_from_the_graph() -> None:
    from ortstate.decoders.ir_inputs import cache_position_window
    from ortstate.ir import read_ir

    for family, window in [("mamba", 4), ("falcon_mamba", 4), ("llama", None), ("zamba2", None)]:
        assert cache_position_window(read_ir(LLM / family / "openvino_model.xml")) == window, family


def test_rules_from_the_window_alone() -> None:
    """No config.json: cache_position indexing a convolution window marks a mamba-style model."""
    rules = FeedRules.for_model(MAMBA_INPUTS, ModelConfig(), window=4)
    assert (rules.mask, rules.cache_position, rules.conv_kernel) == ("current", "conv_kernel", 4)
    assert rules.notes == (
        "cache_position indexes a 4-wide convolution state in the graph (config.json gives none)",
        "model type unknown: attention_mask covers the current tokens, as mamba models take it",
    )
    assert FeedRules.for_model(MAMBA_INPUTS, ModelConfig(model_type="mamba", conv_kernel=4), window=4).notes == ()
    guess = FeedRules.for_model(LLAMA_INPUTS, ModelConfig())
    assert guess.mask == "full" and guess.notes[0].startswith("model type unknown: attention_mask assumed to cover")


def test_what_a_rule_guessed_and_what_would_help() -> None:
    """Every rule that depends on config.json's model_type (the mask, cache_position: the mamba
    family's differ) is named when there is none, and the remedy says so; a model type, or a
    cache_position the graph shows indexing a window, settles cache_position."""
    family = "mamba-family models, falcon_mamba, mamba, zamba2, need config.json's model_type"
    cases = [
        (LLAMA_INPUTS, ModelConfig(), None, ("attention_mask",)),
        (MAMBA_INPUTS, ModelConfig(), None, ("attention_mask", "cache_position")),
        (MAMBA_INPUTS, ModelConfig(), 4, ("attention_mask",)),
        (MAMBA_INPUTS, ModelConfig(model_type="mamba", conv_kernel=4), None, ()),
        (LLAMA_INPUTS, ModelConfig(model_type="llama"), None, ()),
    ]
    for inputs, config, window, guessed in cases:
        rules = FeedRules.for_model(inputs, config, window=window)
        assert rules.guessed == guessed
        assert rules.remedy == (
            f"the model type is unknown, so how {' and '.join(guessed)} {'are' if len(guessed) > 1 else 'is'} fed "
            "was guessed: put the model's config.json beside the IR"
            if guessed
            else ""
        )
    both = FeedRules.for_model(MAMBA_INPUTS, ModelConfig())
    assert both.notes == (
        f"model type unknown: attention_mask assumed to cover past and current tokens ({family})",
        f"model type unknown: cache_position assumed to count positions ({family})",
    )
