"""``export``: an optimum-intel folder of a decoder-only LLM, as a folder another tool loads as it is.

The decoder IR is converted, made explicit (:func:`~ortstate.passes.to_explicit`) and laid out as
ONNX LLM tools expect (:func:`~ortstate.passes.kv_layout.kv_layout`: ``past_key_values.N.*`` in,
``present.N.*`` out, an empty past on the first step, no ``beam_idx``), with compressed weights
kept compressed (``MatMulNBits``, ``GatherBlockQuantized``; above 64 MB in ``model.onnx.data``).
Beside it go the files the tool reads:

- ``genai``: ``genai_config.json`` and the tokenizer files as genai reads them, once genai's tokenizer
  is seen to encode as they do (onnxruntime-genai's ``og.Model(OUT)``; see :mod:`.tokenizer_files`);
- ``optimum``: ``config.json``, ``generation_config.json`` and the tokenizer files (optimum's
  ``ORTModelForCausalLM.from_pretrained(OUT)``).

A folder without tokenizer files still exports (generation from token ids needs none), with a notice;
so does one whose tokenizer genai reads otherwise (the tokenizer is left out).
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from ..convert import Built, build, save_model
from ..convert.context import ConvertOptions
from ..decoders import DecoderError, ModelFiles, find_model_files, read_json_object
from ..errors import ExportError, PassError
from ..ir import Graph, read_ir
from ..meta import read_meta, shown_id
from ..output_files import OutputFiles, check_folder, make_folder, remove_folders
from ..passes.kv_layout import KvCache
from ..passes.pipelines import EXPORT
from . import configs
from .configs import GENAI_CONFIG, genai_config
from .tokenizer_files import TokenizerFiles, tokenizer_files

__all__ = ["LAYOUTS", "MODEL_FILE", "Exported", "export"]

GENAI = "genai"
OPTIMUM = "optimum"
LAYOUTS = (GENAI, OPTIMUM)
MODEL_FILE = "model.onnx"
_HF_CONFIGS = ("config.json", "generation_config.json")
_DECODER_IR = "openvino_model.xml"  # optimum-intel's name for a decoder-only LLM (a VLM's is another)


@dataclass(frozen=True)
class Exported:
    """What :func:`export` wrote.

    Attributes:
        folder: the output folder.
        files: the files written there (the model's data file included), sorted.
        family: ``config.json``'s ``model_type`` ("" when unknown).
        cache: the KV cache's geometry as the tool feeds it.
        notices: what a user should know (no tokenizer files, say), one line each; each is also
            issued as an :class:`ExportNotice` warning.
    """

    folder: Path
    files: tuple[str, ...]
    family: str
    cache: KvCache
    notices: tuple[str, ...]


def export(
    model_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    layout: str = GENAI,
    int8_activations: bool = False,
    context_length: int | None = None,
) -> Exported:
    """Export the decoder-only LLM of optimum-intel folder ``model_dir`` into ``out_dir`` (created
    if missing; files of the same names are replaced) for ``layout`` (``genai`` or ``optimum``).

    Args:
        int8_activations: compressed weights compute on int8-quantized activations (as
            :func:`ortstate.convert`): faster, logits move ~1e-2.
        context_length: the genai layout's context length (``genai_config.json``'s
            ``context_length``, and the bound of its ``max_length``), for a model whose
            ``config.json`` gives none (bloom: ALiBi, no ``max_position_embeddings``), or a smaller
            one; at most ``config.json``'s own. Default: ``config.json``'s.

    Raises:
        ExportError: an unknown layout; ``out_dir`` is ``model_dir``; the folder holds no decoder-only
            LLM; its family keeps state other than KV caches (mamba and hybrid SSM models) or is an
            encoder-decoder (Whisper, T5) or a vision-language model; a config file is malformed;
            the genai layout gets no context length (neither ``context_length`` nor ``config.json``
            gives one) or one larger than ``config.json``'s; ``context_length`` with the optimum layout;
            a tokenizer file cannot be read, or the genai layout's ``tokenizer_config.json`` is no JSON object.
        IRError, UnsupportedOpsError, ConversionError: the IR cannot be converted.
        OutputFileError: ``out_dir`` or a file in it cannot be written (a file in the way, no
            permission, a full disk; checked before converting as far as it can be). Every file is
            written to a temporary file first and all replace their targets together once all are
            written, so a failed export leaves the folder as it was (and removes it if it made it).
    """
    plan = _plan(Path(model_dir), Path(out_dir), layout, context_length)
    check_folder(plan.out)  # before converting: a big model takes minutes
    graph, built, cache = _convert(plan, int8_activations)
    _check_empty_inits(graph, plan.source, plan.named, layout)
    # before anything is written: a config it cannot make leaves no half folder
    settings = _genai_settings(plan, built.model, cache) if layout == GENAI else None
    tokenizer = tokenizer_files(plan.source, settings)
    written = _write(plan, built, settings, tokenizer)
    for notice in tokenizer.notices:
        warnings.warn(notice, ExportNotice, stacklevel=2)
    return Exported(plan.out, tuple(sorted(written)), plan.family, cache, tokenizer.notices)


class ExportNotice(UserWarning):
    """Something about an export a user should know (it went through): a folder without tokenizer
    files, or a tokenizer left out or not checked, say. ``Exported.notices`` holds the same lines."""


@dataclass(frozen=True)
class _Plan:
    """What :func:`export` reads and writes, decided (and checked) before anything is converted.

    Attributes:
        named: how messages name the model (its family, else "the model").
    """

    source: Path
    out: Path
    layout: str
    files: ModelFiles
    config: dict[str, Any]
    generation: dict[str, Any]
    family: str
    named: str
    context_length: int | None


def _plan(source: Path, out: Path, layout: str, context_length: int | None) -> _Plan:
    """Check the arguments and the folder, and read its configs (see :func:`export`'s Raises)."""
    if layout not in LAYOUTS:
        raise ExportError(f"unknown layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    try:
        files = find_model_files(source)
    except DecoderError as exc:
        raise ExportError(str(exc)) from None
    config = read_json_object(source / "config.json", ExportError)
    generation = read_json_object(source / "generation_config.json", ExportError)
    family = config.get("model_type") if isinstance(config.get("model_type"), str) else ""
    if context_length is not None and layout != GENAI:
        raise ExportError(f"a context length applies to the {GENAI} layout only ({layout} reads config.json)")
    if context_length is not None:  # a bad value, at once; against config.json's once the family is known
        configs.context_length({}, context_length)
    named = family or "the model"
    if files.encoder is not None:
        raise ExportError(
            f"{source}: {named} is an encoder-decoder: its decoder's state holds cross-attention K/V computed "
            f"from the encoder's output, which the {layout} layout of a decoder-only LLM cannot carry"
        )
    if files.embeddings is not None or files.decoder.name != _DECODER_IR:
        raise ExportError(
            f"{source}: {named} is a vision-language model: its language model takes inputs_embeds from "
            f"separate embedding models, not input_ids; the {layout} layout is for decoder-only LLMs"
        )
    if out.resolve() == source.resolve():
        raise ExportError(f"{out}: the output folder must not be the model folder")
    return _Plan(source, out, layout, files, config, generation, family, named, context_length)


def _convert(plan: _Plan, int8_activations: bool) -> tuple[Graph, Built, KvCache]:
    """The decoder converted to the explicit form and laid out as the tools feed it."""
    decoder = plan.files.decoder
    graph = read_ir(decoder)
    built = build(graph, explicit_state=True, options=ConvertOptions(int8_activations))
    model = built.model
    names = [i.name for i in model.graph.input]
    if "input_ids" not in names or "logits" not in [o.name for o in model.graph.output]:
        raise ExportError(f"{decoder}: a decoder-only LLM takes input_ids and gives logits")
    meta = read_meta(model)
    if meta is None:
        raise ExportError(f"{decoder}: the model has no state: there is no KV cache to lay out")
    try:
        cache = EXPORT.run(model, meta).found("kv_layout")
    except PassError as exc:
        raise ExportError(
            f"{plan.source}: {plan.named} cannot be exported for {plan.layout}: {exc} (onnxruntime-genai and "
            "optimum carry nothing but past/present KV caches between steps)"
        ) from None
    return graph, built, cache


def _genai_settings(plan: _Plan, model: onnx.ModelProto, cache: KvCache) -> dict[str, Any]:
    """``genai_config.json``'s content."""
    try:
        return genai_config(
            plan.config,
            plan.generation,
            cache,
            filename=MODEL_FILE,
            inputs=tuple(i.name for i in model.graph.input),
            vocab_size=_vocab(model),
            context=plan.context_length,
        )
    except ExportError as exc:
        raise ExportError(f"{plan.source}: {exc}") from None


def _write(plan: _Plan, built: Built, settings: dict[str, Any] | None, tokenizer: TokenizerFiles) -> list[str]:
    """Write the folder, all files together; the files written."""
    source, out = plan.source, plan.out
    made = make_folder(out)
    written = [MODEL_FILE]
    try:
        with OutputFiles() as staged:  # all replace their targets once all are written
            save_model(built.model, built.arrays, out / MODEL_FILE, staged)
            if _uses_data_file(built.model):
                written.append(MODEL_FILE + ".data")
            if settings is not None:
                text = json.dumps(settings, indent=2) + "\n"
                staged.write(out / GENAI_CONFIG, lambda f: f.write(text.encode("utf-8")))
                written.append(GENAI_CONFIG)
            else:
                for name in _HF_CONFIGS:
                    if (source / name).is_file():
                        _copy(source / name, out / name, staged)
                        written.append(name)
            for name, data in tokenizer.files.items():
                staged.write(out / name, lambda f, data=data: f.write(data))
            written.extend(tokenizer.files)
    except BaseException:
        remove_folders(made)
        raise
    return written


def _check_empty_inits(graph: Graph, source: Path, named: str, layout: str) -> None:
    """Each KV cache starts as the empty past the tool feeds: OpenVINO's shape inference, written
    into the IR, gives its init value the shape ``[batch, heads, 0, head_size]`` (what the layout
    drops in favour of the fed past must have been exactly that)."""
    for layer in graph.all_layers():
        if layer.type != "ReadValue" or not layer.inputs:
            continue
        _, port = graph.producer(layer, 0)
        dims = port.shape.dims
        if dims is None or len(dims) != 4 or (dims[2].lo, dims[2].hi) != (0, 0):
            variable = shown_id(layer.attrs.get("variable_id", ""))
            raise ExportError(
                f"{source}: {named} cannot be exported for {layout}: variable {variable} starts as {port.shape}, "
                "not as an empty past [batch, heads, 0, head_size]"
            )


def _vocab(model: onnx.ModelProto) -> int | None:
    """The logits' last dim when the graph states it."""
    for output in model.graph.output:
        if output.name == "logits":
            dims = output.type.tensor_type.shape.dim
            if dims and dims[-1].HasField("dim_value"):
                return dims[-1].dim_value
    return None


def _uses_data_file(model: onnx.ModelProto) -> bool:
    """Whether :func:`save_model` put the weights in ``MODEL_FILE.data`` (above 64 MB of them)."""
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)


def _copy(source: Path, target: Path, files: OutputFiles) -> None:
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise ExportError(f"{source}: cannot be read ({exc.strerror or exc})") from None
    files.write(target, lambda f: f.write(data))
