"""``ortstate.decoders.model_dir``: the token ids and model type of a folder's config files, and junk in them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from oracle import REPO

from ortstate.decoders import DecoderError, ModelConfig, read_config

LLM = REPO / "models" / "llm"
MAMBA, T5 = LLM / "mamba", LLM / "t5"


def test_config_token_ids() -> None:
    config = ModelConfig.from_dicts({"eos_token_id": 2, "pad_token_id": 0}, {"eos_token_id": [7, 8]})
    assert config.eos_token_ids == (7, 8) and config.pad_token_id == 0
    vlm = ModelConfig.from_dicts({"model_type": "llava", "text_config": {"model_type": "llama", "eos_token_id": 2}})
    assert vlm.eos_token_ids == (2,) and vlm.model_types == ("llava", "llama")
    assert read_config(T5).decoder_start_token_id == 0 and read_config(MAMBA).conv_kernel == 4


@pytest.mark.parametrize(
    ("config", "generation", "message"),
    [
        ({"eos_token_id": "abc"}, {}, "eos_token_id: expected an integer >= 0 or a list of them, got 'abc'"),
        ({"eos_token_id": [1, "x"]}, {}, "eos_token_id: expected an integer >= 0 or a list of them, got 'x'"),
        ({"eos_token_id": 1.5}, {}, "eos_token_id: expected an integer >= 0 or a list of them, got 1.5"),
        ({"eos_token_id": True}, {}, "eos_token_id: expected an integer >= 0 or a list of them, got True"),
        ({"eos_token_id": -1}, {}, "eos_token_id: expected an integer >= 0 or a list of them, got -1"),
        ({"eos_token_id": 2**70}, {}, f"eos_token_id: expected an integer >= 0 or a list of them, got {2**70}"),
        ({}, {"pad_token_id": {}}, "pad_token_id: expected an integer >= 0, got {}"),
        ({"decoder_start_token_id": [0]}, {}, "decoder_start_token_id: expected an integer >= 0"),
        ({"conv_kernel": "4"}, {}, "conv_kernel: expected an integer >= 1, got '4'"),
        ({"mamba_d_conv": 0}, {}, "mamba_d_conv: expected an integer >= 1, got 0"),
        ({"model_type": 5}, {}, "model_type: expected a string, got 5"),
        ({"text_config": {"eos_token_id": "x"}}, {}, "eos_token_id: expected an integer >= 0"),
        ({"text_config": {"model_type": None}}, {}, "text_config.model_type: expected a string, got None"),
    ],
)
def test_junk_config_values_are_decoder_errors(tmp_path: Path, config: dict, generation: dict, message: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "generation_config.json").write_text(json.dumps(generation))
    with pytest.raises(DecoderError) as info:
        read_config(tmp_path)
    assert str(info.value).startswith(f"{tmp_path}: config.json or generation_config.json: {message}")
