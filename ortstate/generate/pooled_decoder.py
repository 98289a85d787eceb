"""A decoder-only LLM folder's decoder in a :class:`~ortstate.streams.KvPool`, for
:meth:`~.continuous.ContinuousBatcher.from_dir`: converted here (or loaded as converted before),
with its feeding rules, its search defaults, its eos tokens, its vocabulary and the context its
config allows."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import onnxruntime as ort

from ..decoders import FeedRules, ModelFiles, find_model_files, input_specs, read_config
from ..decoders.ir_inputs import cache_position_window
from ..errors import GenerationError
from ..ir import read_ir
from ..streams.kv.pool import DEFAULT_MAX_CONTEXT, KvPool
from .decoder_source import converted_decoder, thread_options
from .options import file_defaults

__all__ = ["PooledDecoder", "pool_decoder"]


@dataclass
class PooledDecoder:
    """What :func:`pool_decoder` makes of a folder: the pool and how to generate on it."""

    pool: KvPool
    rules: FeedRules
    search_defaults: dict[str, Any]
    eos_token_ids: Sequence[int]
    vocab_size: int | None


def pool_decoder(
    model_dir: str | os.PathLike[str],
    *,
    slots: int,
    kv_cache_bytes: int | None,
    max_context: int | None,
    threads: int | None,
    int8_activations: bool,
    sess_options: ort.SessionOptions | None,
    model: str | os.PathLike[str] | None,
) -> PooledDecoder:
    """The folder's decoder pooled (the arguments as :meth:`~.continuous.ContinuousBatcher.from_dir`'s).

    Raises:
        GenerationError, and any conversion or pool error (all ``OrtStateError``).
    """
    files = find_model_files(model_dir)
    if files.encoder or files.embeddings:
        raise GenerationError(f"{files.folder}: ContinuousBatcher takes decoder-only LLMs (token ids in)")
    config = read_config(files.folder)
    if max_context is not None and config.max_context is not None and max_context > config.max_context:
        raise GenerationError(
            f"max_context {max_context} is over the model's context of {config.max_context} positions "
            f"({files.folder / 'config.json'}): positions past it are ones the model was not made for"
        )
    defaults = file_defaults(dict(config.search_defaults))
    graph = read_ir(files.decoder)  # what it tells about feeding it (its weights are not read)
    window = cache_position_window(graph)
    source = _decoder_source(files, graph, model, int8_activations)
    del graph
    options = _session_options(sess_options, threads)
    context = max_context or config.max_context or DEFAULT_MAX_CONTEXT
    pool = KvPool(source, slots, kv_cache_bytes=kv_cache_bytes, max_context=context, sess_options=options)
    rules = FeedRules.for_model(input_specs(pool.inputs), config, window=window)
    logits = next((o for o in pool.loaded.outputs if o.name == "logits"), None)
    vocab = logits.shape[-1] if logits is not None and logits.shape else None
    return PooledDecoder(pool, rules, defaults, config.eos_token_ids, vocab if isinstance(vocab, int) else None)


def _decoder_source(files: ModelFiles, graph: Any, model: str | os.PathLike[str] | None, int8_activations: bool) -> Any:
    """What the pool loads: ``model`` (converted before), else the folder's decoder converted here."""
    if model is not None:
        if int8_activations:
            raise GenerationError("int8_activations is chosen when converting: convert the model with it instead")
        return model
    return converted_decoder(files, graph, int8_activations, explicit_state=True)


def _session_options(sess_options: ort.SessionOptions | None, threads: int | None) -> ort.SessionOptions | None:
    """``sess_options``, else ONNX Runtime's quiet options on ``threads`` intra-op threads if given."""
    return sess_options if sess_options is not None else thread_options(threads)
