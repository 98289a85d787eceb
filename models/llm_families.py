"""Tiny random configs of the LLM families exported by ``make_llm_models.py``.

Each entry: the ``transformers`` config class and its keyword arguments, the venv (transformers pin)
that can export it with optimum-intel 2.2, the export task, the weight format, and how the decoder is
fed (see ``llm_reference.py``). Sizes stay tiny (hidden 64, 2 layers, vocab 256) so every folder is
well under 1 MB in fp32; ``tie_word_embeddings=False`` keeps greedy decoding from echoing the prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# transformers pins (optimum-intel 2.2's MIN/MAX_TRANSFORMERS_VERSION per architecture)
PINS = {"main": "5.5.4", "52": "5.2.0", "457": "4.57.6", "50": "5.0.0"}
VENVS = {"main": ".venv-llm", "52": ".venv-llm-52", "457": ".venv-llm-457", "50": ".venv-llm-50"}

VOCAB = 256
COMMON: dict[str, Any] = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "tie_word_embeddings": False,
    "initializer_range": 0.1,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}


@dataclass(frozen=True)
class Family:
    name: str
    config_class: str
    config: dict[str, Any]
    pin: str = "main"
    kind: str = "decoder"  # decoder | whisper | t5
    task: str = "text-generation-with-past"
    weight_format: str = "fp32"
    export_args: tuple[str, ...] = ()
    decoding: dict[str, Any] = field(default_factory=dict)
    model_class: str = "AutoModelForCausalLM"


def _common(**overrides: Any) -> dict[str, Any]:
    return {**COMMON, **overrides}


_LLAMA = _common()
_MAMBA_DECODING = {"attention_mask": "current", "cache_position": "conv_kernel"}
# mamba and falcon_mamba: the same tiny state-space config (each family gets a copy of its own)
_MAMBA = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "state_size": 8,
    "num_hidden_layers": 2,
    "expand": 2,
    "conv_kernel": 4,
    "time_step_rank": 8,
    "tie_word_embeddings": False,
    "initializer_range": 0.1,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}
_HYBRID_DECODING = {"attention_mask": "full", "cache_position": "conv_kernel"}

FAMILIES: list[Family] = [
    Family("llama", "LlamaConfig", _LLAMA),
    Family(
        "gpt2",
        "GPT2Config",
        {
            "vocab_size": VOCAB,
            "n_embd": 64,
            "n_layer": 2,
            "n_head": 4,
            "n_inner": 128,
            "n_positions": 128,
            "tie_word_embeddings": False,
            "initializer_range": 0.1,
            "bos_token_id": 1,
            "eos_token_id": 2,
        },
    ),
    Family("qwen2", "Qwen2Config", _common()),
    Family("llama_fp16", "LlamaConfig", _LLAMA, weight_format="fp16"),
    Family("llama_int8", "LlamaConfig", _LLAMA, weight_format="int8"),
    Family(
        "llama_int4", "LlamaConfig", _LLAMA, weight_format="int4", export_args=("--group-size", "16", "--ratio", "1.0")
    ),
    Family(
        "whisper",
        "WhisperConfig",
        {
            # optimum's dummy audio is 3000 frames, so the encoder keeps Whisper's 1500 positions
            "vocab_size": VOCAB,
            "num_mel_bins": 16,
            "d_model": 32,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "encoder_attention_heads": 2,
            "decoder_attention_heads": 2,
            "encoder_ffn_dim": 64,
            "decoder_ffn_dim": 64,
            "max_source_positions": 1500,
            "max_target_positions": 64,
            "pad_token_id": 0,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "decoder_start_token_id": 1,
            "suppress_tokens": [],
            "begin_suppress_tokens": [],
            "tie_word_embeddings": False,
            "init_std": 0.1,
        },
        kind="whisper",
        task="automatic-speech-recognition-with-past",
        model_class="AutoModelForSpeechSeq2Seq",
    ),
    Family(
        "t5",
        "T5Config",
        {
            "vocab_size": VOCAB,
            "d_model": 64,
            "d_kv": 16,
            "d_ff": 128,
            "num_layers": 2,
            "num_decoder_layers": 2,
            "num_heads": 4,
            "relative_attention_num_buckets": 8,
            "relative_attention_max_distance": 32,
            "decoder_start_token_id": 0,
            "pad_token_id": 0,
            "eos_token_id": 1,
            "tie_word_embeddings": False,
            "initializer_factor": 1.0,
        },
        pin="457",  # transformers 5 always ties T5's lm_head to the embeddings (echoes the last token)
        kind="t5",
        task="text2text-generation-with-past",
        model_class="AutoModelForSeq2SeqLM",
    ),
    Family("mixtral", "MixtralConfig", _common(num_local_experts=4, num_experts_per_tok=2)),
    Family(
        "dbrx",  # its MoE routes tokens with torch.where(mask): NonZero-3 in the IR
        "DbrxConfig",
        {
            "vocab_size": VOCAB,
            "d_model": 64,
            "n_heads": 4,
            "n_layers": 2,
            "max_seq_len": 128,
            "tie_word_embeddings": False,
            "initializer_range": 0.1,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 0,
            "attn_config": {"kv_n_heads": 2, "clip_qkv": 8.0, "rope_theta": 10000.0},
            "ffn_config": {"ffn_hidden_size": 128, "moe_num_experts": 4, "moe_top_k": 2},
        },
        pin="457",
    ),
    Family("phi3", "Phi3Config", _common(pad_token_id=0)),
    Family("mistral", "MistralConfig", _common(sliding_window=4)),  # window < prompt + new tokens
    Family("qwen3", "Qwen3Config", _common(head_dim=16)),
    Family("gemma2", "Gemma2Config", _common(head_dim=16, query_pre_attn_scalar=16, sliding_window=4), pin="457"),
    Family(
        "mamba",
        "MambaConfig",
        dict(_MAMBA),
        pin="52",
        decoding={**_MAMBA_DECODING, "conv_kernel": 4},
    ),
    Family(
        "falcon_mamba",
        "FalconMambaConfig",
        dict(_MAMBA),
        pin="52",
        decoding={**_MAMBA_DECODING, "conv_kernel": 4},
    ),
    Family(
        "lfm2",
        "Lfm2Config",
        _common(
            layer_types=["conv", "full_attention"],
            conv_L_cache=3,
            block_auto_adjust_ff_dim=False,
            full_attn_idxs=None,
        ),
        pin="52",
        decoding={**_HYBRID_DECODING, "conv_kernel": 3},
    ),
    Family(
        "zamba2",
        "Zamba2Config",
        _common(
            mamba_d_state=8,
            mamba_d_conv=4,
            mamba_expand=2,
            mamba_ngroups=1,
            n_mamba_heads=8,
            chunk_size=16,
            layers_block_type=["mamba", "hybrid"],
            num_mem_blocks=1,
            use_shared_attention_adapter=False,
            use_mem_rope=True,
            adapter_rank=8,
            num_key_value_heads=4,  # optimum's dummy cache assumes no GQA
        ),
        pin="457",
        decoding={**_MAMBA_DECODING, "conv_kernel": 4},
    ),
    Family(
        "granitemoehybrid",
        "GraniteMoeHybridConfig",
        _common(
            layer_types=["mamba", "attention"],
            mamba_d_state=8,
            mamba_d_conv=4,
            mamba_expand=2,
            mamba_n_groups=1,
            mamba_n_heads=8,
            mamba_d_head=16,
            mamba_chunk_size=16,
            num_local_experts=4,
            num_experts_per_tok=2,
            shared_intermediate_size=128,
            position_embedding_type="rope",
        ),
        decoding={**_HYBRID_DECODING, "conv_kernel": 4},
    ),
    Family(
        "qwen3_next",
        "Qwen3NextConfig",
        _common(
            head_dim=16,
            layer_types=["linear_attention", "full_attention"],
            full_attention_interval=2,
            linear_conv_kernel_dim=4,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
            shared_expert_intermediate_size=64,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        ),
        pin="457",
        decoding={**_HYBRID_DECODING, "conv_kernel": 4},
    ),
    Family(
        "qwen3_5",
        "Qwen3_5TextConfig",
        _common(
            head_dim=16,
            layer_types=["linear_attention", "full_attention"],
            full_attention_interval=2,
            linear_conv_kernel_dim=4,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
        ),
        pin="52",
        decoding={**_HYBRID_DECODING, "conv_kernel": 4},
    ),
]

# Families the stream pool refused at first (found by the survey in docs/models.md): gpt-oss's
# attention sinks (now GroupQueryAttention's head_sink); XGLM's and GPT-NeoX-Japanese's eager
# attention (batched MatMul/Softmax, no ScaledDotProductAttention: the pool copies their caches;
# gpt_neox_japanese also takes no position_ids); Gemma 3n's cross-layer KV sharing (its last two
# layers attend over the first two layers' caches: two kernels read one cache, so it is copied).
FAMILIES += [
    Family(
        "gpt_oss",
        "GptOssConfig",
        _common(
            head_dim=16,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=4,  # window < prompt + new tokens
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
    ),
    Family(
        "xglm",
        "XGLMConfig",
        {
            "vocab_size": VOCAB,
            "d_model": 64,
            "ffn_dim": 128,
            "num_layers": 2,
            "attention_heads": 4,
            "max_position_embeddings": 128,
            "tie_word_embeddings": False,
            "init_std": 0.1,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 0,
        },
    ),
    Family(
        "gpt_neox_japanese",
        "GPTNeoXJapaneseConfig",
        {
            "vocab_size": VOCAB,
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "intermediate_multiple_size": 2,
            "max_position_embeddings": 128,
            "attention_dropout": 0.0,
            "tie_word_embeddings": False,
            "initializer_range": 0.1,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 0,
        },
    ),
    Family(
        "gemma3n_text",
        "Gemma3nTextConfig",
        _common(
            head_dim=16,
            num_hidden_layers=4,
            layer_types=["sliding_attention", "full_attention"] * 2,
            num_kv_shared_layers=2,
            sliding_window=4,
            hidden_size_per_layer_input=16,
            vocab_size_per_layer_input=VOCAB,
            laurel_rank=8,
            altup_num_inputs=4,
            activation_sparsity_pattern=[0.0] * 4,
        ),
        pin="50",  # optimum-intel 2.2 exports gemma3n with transformers 5.0 exactly
    ),
]

# A VLM's language model (inputs_embeds instead of input_ids); the text-only prompt goes through the
# exported text-embeddings IR. Text vocab 257 keeps the image token (256) out of the random prompts.
FAMILIES.append(
    Family(
        "llava",
        "LlavaConfig",
        {
            "text_config": {**_common(vocab_size=VOCAB + 1), "model_type": "llama"},
            "vision_config": {
                "model_type": "clip_vision_model",
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "image_size": 16,
                "patch_size": 8,
                "projection_dim": 32,
            },
            "image_token_index": VOCAB,
            "vision_feature_layer": -1,
            "tie_word_embeddings": False,
        },
        kind="vlm",
        task="image-text-to-text",
        model_class="AutoModelForImageTextToText",
    )
)

BY_NAME = {f.name: f for f in FAMILIES}
