"""The files beside an exported decoder: ``genai_config.json`` for onnxruntime-genai, and what a
Hugging Face folder holds (``config.json``, ``generation_config.json``, tokenizer files) for optimum.

Values come from the model folder's ``config.json`` and ``generation_config.json`` (transformers'
names, the latter winning for token ids and search settings), and the cache's geometry from the
exported graph itself (:class:`~ortstate.passes.kv_layout.KvCache`), which is what the tool feeds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ExportError
from ..passes.kv_layout import PAST_NAME, PRESENT_NAME, KvCache

__all__ = ["GENAI_CONFIG", "TOKENIZER_FILES", "context_length", "genai_config"]

GENAI_CONFIG = "genai_config.json"
# What transformers' AutoTokenizer and onnxruntime-genai's Tokenizer read from a model folder.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
)
# The model types onnxruntime-genai (0.18) runs as a past/present decoder under their own name (each
# checked by the tests); any other family is written as genai's generic "decoder": the exported graph
# is complete in itself, the type only picks genai's model class. Not "gpt2": genai's gpt2 class
# feeds one combined ``past_%d`` per layer, the layout of older GPT-2 exports.
GENAI_TYPES = frozenset({"gemma2", "llama", "mistral", "phi3", "qwen2", "qwen3"})
GENAI_GENERIC = "decoder"
# config.json keys of one value, in the order transformers' families spell them
_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length")
_HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model")
_HEADS_KEYS = ("num_attention_heads", "n_head", "n_heads")
# generation_config.json search keys genai reads under the same name, with transformers' defaults
_SEARCH_DEFAULTS: dict[str, Any] = {
    "do_sample": False,
    "num_beams": 1,
    "num_return_sequences": 1,
    "temperature": 1.0,
    "top_k": 50,
    "top_p": 1.0,
    "repetition_penalty": 1.0,
    "length_penalty": 1.0,
    "early_stopping": False,
    "min_length": 0,
    "no_repeat_ngram_size": 0,
    "diversity_penalty": 0.0,
}


def context_length(config: Mapping[str, Any], given: int | None = None) -> int:
    """The context length ``genai_config.json`` gives: ``given`` (at most what ``config.json``
    says, when it says), else ``config.json``'s (``max_position_embeddings``, ``n_positions``, ...).

    A model may give none (bloom: ALiBi attention has no position table); genai needs one, to
    bound its ``max_length``. One larger than the model's own is refused: a model with learned
    positions (gpt2) has none past it, and no model was trained past it.

    Raises:
        ExportError: none given and ``config.json`` has none, or ``given`` is no integer >= 1 or
            larger than ``config.json``'s.
    """
    own = next((key for key in _CONTEXT_KEYS if config.get(key) is not None), None)
    limit = _first_int(config, _CONTEXT_KEYS)
    if given is None:
        if limit is None:
            raise ExportError(
                f"config.json gives no context length (one of {', '.join(_CONTEXT_KEYS)}): give one "
                "(--context-length N; context_length=N in Python)"
            )
        return limit
    if type(given) is not int or given < 1:
        raise ExportError(f"context length: expected an integer >= 1, got {given!r}")
    if limit is not None and given > limit:
        raise ExportError(
            f"a context length of {given} exceeds config.json's {own}, {limit} (the positions the model was "
            "made for): give at most that"
        )
    return given


def genai_config(
    config: Mapping[str, Any],
    generation: Mapping[str, Any],
    cache: KvCache,
    *,
    filename: str,
    inputs: tuple[str, ...],
    vocab_size: int | None,
    context: int | None = None,
) -> dict[str, Any]:
    """``genai_config.json`` for the exported decoder ``filename`` with graph ``inputs``.

    Args:
        context: the context length to write (see :func:`context_length`; default: config.json's).

    Raises:
        ExportError: a value genai needs is missing or of the wrong type (naming the key).
    """
    context = context_length(config, context)
    model_type = config.get("model_type")
    decoder = _decoder(config, cache, filename, inputs)
    eos = _token_ids(generation, config, "eos_token_id")
    if not eos:
        raise ExportError(
            "neither generation_config.json nor config.json gives an eos_token_id, which genai_config.json needs "
            "(genai would stop on token 0)"
        )
    pad = _token_ids(generation, config, "pad_token_id")
    bos = _token_ids(generation, config, "bos_token_id")
    model: dict[str, Any] = {
        "type": model_type if model_type in GENAI_TYPES else GENAI_GENERIC,
        "context_length": context,
        "decoder": decoder,
        "eos_token_id": eos[0] if len(eos) == 1 else list(eos),
        "pad_token_id": pad[0] if pad else eos[0],  # genai pads finished rows; transformers does the same
    }
    if bos:
        model["bos_token_id"] = bos[0]
    vocab = vocab_size if vocab_size is not None else _first_int(config, ("vocab_size",))
    if vocab is not None:
        model["vocab_size"] = vocab
    search = _search(generation, context)
    search["past_present_share_buffer"] = cache.shares_buffer
    return {"model": model, "search": search}


def _decoder(config: Mapping[str, Any], cache: KvCache, filename: str, inputs: tuple[str, ...]) -> dict[str, Any]:
    """genai's decoder section: the file, the cache's geometry, the graph's input and output names."""
    decoder: dict[str, Any] = {
        "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
        "filename": filename,
        "head_size": cache.head_size,
        "num_hidden_layers": cache.layers,
        "num_key_value_heads": cache.kv_heads,
        "inputs": {
            **{name: name for name in ("input_ids", "attention_mask", "position_ids") if name in inputs},
            "past_key_names": PAST_NAME.replace("%s", "key"),
            "past_value_names": PAST_NAME.replace("%s", "value"),
        },
        "outputs": {
            "logits": "logits",
            "present_key_names": PRESENT_NAME.replace("%s", "key"),
            "present_value_names": PRESENT_NAME.replace("%s", "value"),
        },
    }
    for key, names in (("hidden_size", _HIDDEN_KEYS), ("num_attention_heads", _HEADS_KEYS)):
        value = _first_int(config, names)
        if value is not None:
            decoder[key] = value
    return decoder


def _search(generation: Mapping[str, Any], context: int) -> dict[str, Any]:
    """genai's search section: ``generation_config.json``'s values, transformers' defaults elsewhere."""
    search: dict[str, Any] = {}
    for key, default in _SEARCH_DEFAULTS.items():
        value = generation.get(key, default)
        if value is None:
            value = default
        if key == "early_stopping" and value == "never":  # transformers' third setting; genai has two
            value = False
        if type(value) is not type(default) and not (isinstance(default, float) and type(value) is int):
            raise ExportError(f"generation_config.json: {key}: expected {type(default).__name__}, got {value!r}")
        search[key] = value
    max_length = generation.get("max_length")
    if max_length is not None and (type(max_length) is not int or max_length < 1):
        raise ExportError(f"generation_config.json: max_length: expected an integer >= 1, got {max_length!r}")
    search["max_length"] = min(max_length, context) if max_length is not None else context
    return search


def _first_int(config: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = config.get(key)
        if value is None:
            continue
        if type(value) is not int or value < 1:
            raise ExportError(f"config.json: {key}: expected an integer >= 1, got {value!r}")
        return value
    return None


def _token_ids(generation: Mapping[str, Any], config: Mapping[str, Any], key: str) -> tuple[int, ...]:
    for source, name in ((generation, "generation_config.json"), (config, "config.json")):
        value = source.get(key)
        if value is None:
            continue
        ids = value if isinstance(value, list) else [value]
        if not ids or not all(type(i) is int and i >= 0 for i in ids):
            raise ExportError(f"{name}: {key}: expected a token id or a list of them, got {value!r}")
        return tuple(ids)
    return ()
