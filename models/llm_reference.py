"""Greedy decoding of optimum-intel stateful IRs with OpenVINO alone (needs only openvino and numpy).

Shared by ``make_llm_models.py`` (which writes ``reference.json``) and
``tests/test_llm_models_reference.py`` (which replays it). The feeds follow what optimum-intel's
``OVModelForCausalLM`` / ``OVModelWithMambaForCausalLM`` / seq2seq classes send, written down as a
``decoding`` dict in each ``reference.json``:

- ``attention_mask``: ``"full"`` = ones over past + current tokens (transformer decoders, lfm2,
  granitemoehybrid, qwen3_next, qwen3_5); ``"current"`` = ones over the current tokens only
  (mamba, falcon_mamba, zamba2 in the decode steps; optimum resets the mask to ``ones_like(input_ids)``).
- ``position_ids``: ``arange(past, past + n)``; an input of rank 3 (``[3, batch, seq]`` M-RoPE) gets
  the same row on every section.
- ``cache_position``: ``"conv_kernel"`` = ``arange(conv_kernel)`` at prefill then ``[past]``
  (mamba-family, as optimum does); ``"arange"`` = ``arange(past, past + n)``.
- ``beam_idx``: ``arange(batch)`` (i32).
- ``inputs_embeds`` (VLM language models): the prompt/step ids through the text-embeddings IR.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

BASE_OV_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}


def ov_config_for(weight_format: str) -> dict[str, str]:
    """The CPU config giving an exact f32 reference (int weights: no dynamic activation quantization)."""
    config = dict(BASE_OV_CONFIG)
    if weight_format in ("int8", "int4"):
        config["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = "0"
    return config


def _dtype(port: ov.Output) -> np.dtype:
    return port.get_element_type().to_dtype()


def decoder_feeds(
    model: ov.CompiledModel,
    decoding: dict[str, Any],
    ids: np.ndarray,
    past: int,
    extra: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Feeds for one step: ``ids`` ``[batch, n]`` new tokens after ``past`` cached ones."""
    batch, n = ids.shape
    feeds: dict[str, np.ndarray] = {}
    for port in model.inputs:
        name = port.get_any_name()
        dtype = _dtype(port)
        if extra and name in extra:
            feeds[name] = extra[name].astype(dtype)
        elif name == "input_ids":
            feeds[name] = ids.astype(dtype)
        elif name == "inputs_embeds":
            raise ValueError("inputs_embeds needs an embed function (the VLM's text-embeddings IR)")
        elif name == "attention_mask":
            width = n if (decoding.get("attention_mask") == "current" and past > 0) else past + n
            feeds[name] = np.ones((batch, width), dtype)
        elif name == "position_ids":
            pos = np.broadcast_to(np.arange(past, past + n), (batch, n))
            rank = port.get_partial_shape().rank.get_length()
            if rank == 3:
                sections = port.get_partial_shape()[0].get_length()
                pos = np.broadcast_to(pos, (sections, batch, n))
            feeds[name] = np.ascontiguousarray(pos, dtype)
        elif name == "beam_idx":
            feeds[name] = np.arange(batch, dtype=dtype)
        elif name == "cache_position":
            if decoding.get("cache_position") == "conv_kernel":
                pos = np.arange(int(decoding["conv_kernel"])) if past == 0 else np.array([past])
            else:
                pos = np.arange(past, past + n)
            feeds[name] = pos.astype(dtype)
        elif name == "token_type_ids":
            feeds[name] = np.zeros((batch, n), dtype)
        else:
            raise ValueError(f"no decoding convention for input {name!r} {port.get_partial_shape()}")
    return feeds


def embedder(model: ov.CompiledModel) -> Callable[[np.ndarray], np.ndarray]:
    """``ids -> inputs_embeds`` through a VLM's text-embeddings IR."""
    request = model.create_infer_request()
    return lambda ids: np.array(request.infer({0: ids.astype(np.int64)})[0])


def greedy(
    model: ov.CompiledModel,
    decoding: dict[str, Any],
    prompt_ids: list[list[int]],
    new_tokens: int,
    extra: dict[str, np.ndarray] | None = None,
    embed: Callable[[np.ndarray], np.ndarray] | None = None,
) -> dict[str, Any]:
    """Prefill with the prompt, then feed back the argmax one token per step.

    ``embed`` (VLM language models) turns the step's ids into the ``inputs_embeds`` input.

    Returns the new tokens, the last-position logits of every step (``[steps, batch, vocab]``), the
    states after the last step, and the minimum top-1/top-2 logit gap (how robust the argmax is).
    """
    request = model.create_infer_request()
    request.reset_state()
    ids = np.asarray(prompt_ids, dtype=np.int64)
    past = 0
    tokens: list[np.ndarray] = []
    logits_steps: list[np.ndarray] = []
    margins: list[float] = []
    for _ in range(new_tokens):
        step_extra = dict(extra or {})
        if embed is not None:
            step_extra["inputs_embeds"] = embed(ids)
        request.infer(decoder_feeds(model, decoding, ids, past, step_extra))
        logits = np.array(request.get_tensor("logits").data[:, -1, :], dtype=np.float32)
        past += ids.shape[1]
        top2 = np.sort(logits, axis=-1)[:, -2:]
        margins.append(float(np.min(top2[:, 1] - top2[:, 0])))
        nxt = np.argmax(logits, axis=-1)
        tokens.append(nxt)
        logits_steps.append(logits)
        ids = nxt[:, None].astype(np.int64)
    states = {s.name: np.array(s.state.data) for s in request.query_state()}
    return {
        "tokens": np.stack(tokens, axis=1).tolist(),
        "logits": np.stack(logits_steps),
        "states": states,
        "min_margin": min(margins),
    }


def ir_ops(xml_path: Path) -> Counter[str]:
    """``type-version`` of every layer in the IR, loop bodies included (e.g. ``ReadValue-opset6``)."""
    root = ET.parse(xml_path).getroot()
    return Counter(f"{layer.get('type')}-{layer.get('version')}" for layer in root.iter("layer"))


def ir_variables(xml_path: Path) -> list[dict[str, str]]:
    """Variables declared by the IR's ReadValue layers (id, declared shape and type)."""
    root = ET.parse(xml_path).getroot()
    found: dict[str, dict[str, str]] = {}
    for layer in root.iter("layer"):
        if layer.get("type") == "ReadValue":
            data = layer.find("data")
            attrs = data.attrib if data is not None else {}
            found[attrs.get("variable_id", "")] = {
                "id": attrs.get("variable_id", ""),
                "shape": attrs.get("variable_shape", ""),
                "type": attrs.get("variable_type", ""),
                "init": "input" if layer.find("input") is not None else "zeros",
            }
    return sorted(found.values(), key=lambda v: v["id"])


def ports(model: ov.Model | ov.CompiledModel, which: str) -> list[dict[str, str]]:
    return [
        {
            "name": p.get_any_name(),
            "shape": str(p.get_partial_shape()),
            "type": p.get_element_type().get_type_name(),
        }
        for p in getattr(model, which)
    ]
