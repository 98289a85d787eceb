"""What an optimum-intel export folder holds: which IRs play which part, and the token ids of its config.

optimum-intel names the IRs of a folder by their part, so the file names tell the parts apart:
``openvino_model.xml`` (a decoder-only LLM), ``openvino_language_model.xml`` with
``openvino_text_embeddings_model.xml`` (the language half of a VLM, fed ``inputs_embeds``), and
``openvino_encoder_model.xml`` with ``openvino_decoder_model.xml`` (Whisper, T5). The token ids come
from ``generation_config.json`` first and ``config.json`` second (a VLM keeps them in ``text_config``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DecoderError, OrtStateError

__all__ = ["CONTEXT_KEYS", "ModelConfig", "ModelFiles", "find_model_files", "read_config", "read_json_object"]

DECODER_ONLY = "openvino_model.xml"
LANGUAGE_MODEL = "openvino_language_model.xml"
TEXT_EMBEDDINGS = "openvino_text_embeddings_model.xml"
ENCODER = "openvino_encoder_model.xml"
DECODER = "openvino_decoder_model.xml"
# generation_config.json keys giving a search parameter's default (transformers' names)
SEARCH_KEYS = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "length_penalty", "early_stopping")
# config.json keys giving the positions a model was made for, in the order transformers' families spell them
# (whisper's decoder: max_target_positions); a VLM gives its language model's in text_config
CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "max_sequence_length",
    "max_target_positions",
)


@dataclass(frozen=True)
class ModelFiles:
    """The IRs of one model folder.

    Attributes:
        decoder: the stateful IR generating tokens.
        encoder: the encoder IR of an encoder-decoder (Whisper, T5), else None.
        embeddings: the text-embeddings IR turning ids into ``inputs_embeds`` (VLMs), else None.
    """

    folder: Path
    decoder: Path
    encoder: Path | None = None
    embeddings: Path | None = None


def find_model_files(folder: str | os.PathLike[str]) -> ModelFiles:
    """Locate the IRs of an optimum-intel export folder.

    Raises:
        DecoderError: the folder does not exist or holds none of the known IR layouts.
    """
    root = Path(folder)
    if not root.is_dir():
        raise DecoderError(f"{root}: not a directory")

    def present(name: str) -> Path | None:
        path = root / name
        return path if path.is_file() else None

    encoder, decoder = present(ENCODER), present(DECODER)
    if encoder is not None and decoder is not None:
        return ModelFiles(root, decoder, encoder=encoder)
    language = present(LANGUAGE_MODEL)
    if language is not None:
        return ModelFiles(root, language, embeddings=present(TEXT_EMBEDDINGS))
    single = present(DECODER_ONLY)
    if single is not None:
        return ModelFiles(root, single)
    known = f"{DECODER_ONLY}, {LANGUAGE_MODEL}, or {ENCODER} with {DECODER}"
    raise DecoderError(f"{root}: no OpenVINO IR to generate with (expected {known})")


@dataclass(frozen=True)
class ModelConfig:
    """What generation needs from ``config.json`` / ``generation_config.json``.

    Attributes:
        model_type: ``config.json``'s ``model_type`` ("" when unknown).
        text_model_type: the language model's type inside a VLM (``text_config.model_type``), else "".
        eos_token_ids: generation stops when a row produces one of these.
        pad_token_id: fed for rows that already stopped (batch > 1).
        decoder_start_token_id: an encoder-decoder's first decoder token.
        conv_kernel: the SSM convolution width of mamba-family models (``conv_kernel`` / ``mamba_d_conv``).
        search_defaults: ``generation_config.json``'s search values (temperature, top_k, top_p,
            repetition_penalty, length_penalty, early_stopping) as (key, value) pairs, unchecked
            (:func:`~ortstate.generate.options.file_defaults` checks them).
        requested: what ``generation_config.json`` switches on that ortstate leaves off unless asked
            (``do_sample=true``, ``num_beams=4``).
        max_context: the positions the model was made for (``config.json``'s
            ``max_position_embeddings``, ``n_positions``, ... see :data:`CONTEXT_KEYS`), None when it
            names none (an SSM, T5's relative positions): a prompt and its new tokens must fit in it.
    """

    model_type: str = ""
    text_model_type: str = ""
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None
    decoder_start_token_id: int | None = None
    conv_kernel: int | None = None
    search_defaults: tuple[tuple[str, Any], ...] = ()
    requested: tuple[str, ...] = ()
    max_context: int | None = None

    @property
    def model_types(self) -> tuple[str, ...]:
        return tuple(t for t in (self.model_type, self.text_model_type) if t)

    @classmethod
    def from_dicts(cls, config: Mapping[str, Any], generation: Mapping[str, Any] | None = None) -> ModelConfig:
        """Build from parsed ``config.json`` and ``generation_config.json`` (the latter wins).

        Raises:
            DecoderError: a value generation uses is of the wrong type or out of range (naming
                the key).
        """
        text = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else {}
        sources = [generation or {}, config, text]

        def first(*keys: str) -> tuple[str, Any]:
            for source in sources:
                for key in keys:
                    if source.get(key) is not None:
                        return key, source[key]
            return keys[0], None

        key, eos = first("eos_token_id")
        eos_ids = tuple(
            _integer(e, key, either=" or a list of them")
            for e in (eos if isinstance(eos, list) else [] if eos is None else [eos])
        )
        pad, start = first("pad_token_id"), first("decoder_start_token_id")
        kernel = first("conv_kernel", "mamba_d_conv")
        context = next(((k, s[k]) for s in (config, text) for k in CONTEXT_KEYS if s.get(k) is not None), None)
        generation = generation or {}
        search = tuple((k, generation[k]) for k in SEARCH_KEYS if generation.get(k) is not None)
        requested = []
        if generation.get("do_sample") is True:
            requested.append("do_sample=true")
        beams = generation.get("num_beams")
        if isinstance(beams, int) and not isinstance(beams, bool) and beams > 1:
            requested.append(f"num_beams={beams}")
        return cls(
            model_type=_text(config.get("model_type", ""), "model_type"),
            text_model_type=_text(text.get("model_type", ""), "text_config.model_type"),
            eos_token_ids=eos_ids,
            pad_token_id=None if pad[1] is None else _integer(pad[1], pad[0]),
            decoder_start_token_id=None if start[1] is None else _integer(start[1], start[0]),
            conv_kernel=None if kernel[1] is None else _integer(kernel[1], kernel[0], lo=1),
            search_defaults=search,
            requested=tuple(requested),
            max_context=None if context is None else _integer(context[1], context[0], lo=1),
        )


_MAX_ID = 2**63 - 1  # token ids are int64 in the model


def _integer(value: Any, key: str, lo: int = 0, either: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= _MAX_ID:
        raise DecoderError(f"{key}: expected an integer >= {lo}{either}, got {value!r}")
    return value


def _text(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise DecoderError(f"{key}: expected a string, got {value!r}")
    return value


def read_json_object(path: Path, error: type[OrtStateError] = DecoderError) -> dict[str, Any]:
    """``path`` (a ``config.json``-like file) as a JSON object; {} when there is no such file.

    Raises:
        ``error``: the file is not a readable JSON object.
    """
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{path}: not a readable JSON file ({' '.join(str(exc).split())})") from None
    if not isinstance(value, dict):
        raise error(f"{path}: expected a JSON object")
    return value


def read_config(folder: str | os.PathLike[str]) -> ModelConfig:
    """The folder's :class:`ModelConfig`; missing files give an empty config (no eos, no model type).

    Raises:
        DecoderError: a file is not a JSON object, or a value it gives is of the wrong type.
    """
    root = Path(folder)
    config = read_json_object(root / "config.json")
    generation = read_json_object(root / "generation_config.json")
    try:
        return ModelConfig.from_dicts(config, generation)
    except DecoderError as exc:
        raise DecoderError(f"{root}: config.json or generation_config.json: {exc}") from None
