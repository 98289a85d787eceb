"""The per-step inputs of an optimum-intel stateful decoder, decided from its input names and config.

optimum-intel's generation classes feed these models as follows (and so must we, or the cache is
read with the wrong positions or masked wrongly):

- ``input_ids`` ``[batch, n]``: the prompt at prefill, then the one token picked in the last step;
  a VLM's language model takes ``inputs_embeds`` ``[batch, n, hidden]`` (the same ids through its
  text-embeddings model) instead.
- ``attention_mask`` ``[batch, width]``: ones over past + current tokens (zeros where a row is
  padded: left padding of prompts of different lengths, pad tokens fed to rows that stopped),
  except for the mamba-family models (``mamba``, ``falcon_mamba``, ``zamba2``: optimum's
  ``OVModelWithMambaForCausalLM``), whose decode steps get the current tokens' part only.
- ``position_ids`` ``[batch, n]``: from the mask, as optimum computes them: ``cumsum(mask) - 1``,
  1 where the mask is 0, the last ``n`` columns (``arange(past, past + n)`` without padding);
  rank 3 (``[sections, batch, n]``, M-RoPE) repeats that row on every section.
- ``cache_position`` ``[n]``: for a mamba-family model, where it indexes the convolution state,
  ``arange(conv_kernel)`` at prefill and ``[past]`` after; otherwise ``arange(past, past + n)``.
  The kernel is read from the graph (the length of the state axis ``cache_position`` indexes: see
  :mod:`ortstate.decoders.ir_inputs`), else from config (``conv_kernel``/``mamba_d_conv``); a
  ``cache_position`` that indexes such a window also marks a mamba-style model without config.json.
- ``beam_idx`` ``[batch]``: which row of the cache each row continues (the model gathers its cache
  with it); ``arange(batch)`` unless beam search reorders the beams.
- ``encoder_hidden_states`` (Whisper, T5): the encoder's output, every step; ``encoder_attention_mask``
  ones over the encoder positions.
- ``token_type_ids``: zeros.

``generate``, ``bench`` and ``verify`` all feed decoders through :class:`FeedRules`. What a rule
had to assume (no config.json) or read from the graph instead of the config is kept in
:attr:`FeedRules.notes`, for the caller to show; :attr:`FeedRules.remedy` says what would help a
run that fails when a rule had to guess (the mask and ``cache_position`` rules of the mamba
family need ``config.json``'s ``model_type``; nothing in a zamba2 graph tells them apart).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import DecoderError
from .inputs import InputSpec
from .model_dir import ModelConfig

__all__ = ["KNOWN_INPUTS", "MAMBA_FAMILY", "FeedRules"]

# Decoders optimum feeds through OVModelWithMambaForCausalLM: the mask covers the current tokens only.
MAMBA_FAMILY = frozenset({"mamba", "falcon_mamba", "zamba2"})

CONTEXT_INPUTS = ("encoder_hidden_states", "encoder_attention_mask", "inputs_embeds")
KNOWN_INPUTS = frozenset(
    {"input_ids", "attention_mask", "position_ids", "cache_position", "beam_idx", "token_type_ids", *CONTEXT_INPUTS}
)


@dataclass(frozen=True)
class FeedRules:
    """How to feed one decoder, step by step.

    Attributes:
        inputs: the decoder's inputs (all must be names listed in :data:`KNOWN_INPUTS`).
        mask: ``"full"`` (past + current) or ``"current"`` (current tokens only after prefill).
        cache_position: ``"conv_kernel"`` or ``"arange"``.
        conv_kernel: the prefill ``cache_position`` length for ``"conv_kernel"``.
        notes: what was assumed, or read from the graph, because the config did not say (one
            clause each), for the caller to show; empty when the config said everything.
        guessed: the inputs whose rule depends on ``config.json``'s ``model_type`` (the mamba
            family's differ), fed by a guess because there was none: a run that fails on them
            is most likely fed wrong (see :attr:`remedy`).
    """

    inputs: tuple[InputSpec, ...]
    mask: str = "full"
    cache_position: str = "arange"
    conv_kernel: int = 0
    notes: tuple[str, ...] = ()
    guessed: tuple[str, ...] = ()

    @classmethod
    def for_model(cls, inputs: Sequence[InputSpec], config: ModelConfig, *, window: int | None = None) -> FeedRules:
        """The rules for a decoder with ``inputs`` and ``config``.

        Args:
            window: the length of the state axis ``cache_position`` indexes, read from the graph
                (:func:`~ortstate.decoders.ir_inputs.cache_position_window`); None when it indexes
                no such window or the graph is not at hand. The graph wins over the config: it is
                what the model computes.

        Raises:
            DecoderError: an input no rule feeds, neither ``input_ids`` nor ``inputs_embeds``, or a
                mamba-family ``cache_position`` whose window neither the graph nor the config gives.
        """
        names = [i.name for i in inputs]
        unknown = [n for n in names if n not in KNOWN_INPUTS]
        if unknown:
            raise DecoderError(
                f"no feeding rule for input(s) {', '.join(unknown)} (inputs: {', '.join(names)}; "
                f"known: {', '.join(sorted(KNOWN_INPUTS))})"
            )
        if "input_ids" not in names and "inputs_embeds" not in names:
            raise DecoderError(f"the model takes neither input_ids nor inputs_embeds (inputs: {', '.join(names)})")
        mamba = any(t in MAMBA_FAMILY for t in config.model_types)
        takes_position = "cache_position" in names
        kernel = window or config.conv_kernel or 0
        if mamba and takes_position and kernel <= 0:
            raise DecoderError(
                f"a {config.model_type} model takes cache_position: config.json needs conv_kernel (or mamba_d_conv)"
            )
        conv = takes_position and (window is not None or mamba)
        notes = []
        if conv and window is not None and config.conv_kernel != window:
            said = "config.json gives none" if not config.conv_kernel else f"config.json says {config.conv_kernel}"
            notes.append(f"cache_position indexes a {window}-wide convolution state in the graph ({said})")
        guessed = []
        if not config.model_types:
            family = f"mamba-family models, {', '.join(sorted(MAMBA_FAMILY))}, need config.json's model_type"
            if "attention_mask" in names:
                guessed.append("attention_mask")
                if conv:
                    notes.append(
                        "model type unknown: attention_mask covers the current tokens, as mamba models take it"
                    )
                else:
                    notes.append(
                        f"model type unknown: attention_mask assumed to cover past and current tokens ({family})"
                    )
            if takes_position and not conv:
                guessed.append("cache_position")
                notes.append(f"model type unknown: cache_position assumed to count positions ({family})")
        return cls(
            tuple(inputs),
            mask="current" if mamba or conv else "full",
            cache_position="conv_kernel" if conv else "arange",
            conv_kernel=kernel if conv else 0,
            notes=tuple(notes),
            guessed=tuple(guessed),
        )

    @property
    def remedy(self) -> str:
        """What would help a run that fails on these inputs, when a rule had to guess ("" if none did)."""
        if not self.guessed:
            return ""
        how = " and ".join(self.guessed) + (" are" if len(self.guessed) > 1 else " is")
        return f"the model type is unknown, so how {how} fed was guessed: put the model's config.json beside the IR"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.inputs)

    @property
    def uses_embeddings(self) -> bool:
        """True when tokens go in as ``inputs_embeds`` (made by a text-embeddings model)."""
        return "inputs_embeds" in self.names and "input_ids" not in self.names

    @property
    def needs_encoder(self) -> bool:
        return "encoder_hidden_states" in self.names

    def feeds(
        self,
        ids: np.ndarray,
        past: int,
        context: Mapping[str, np.ndarray] | None = None,
        *,
        mask: np.ndarray | None = None,
        beam_idx: np.ndarray | None = None,
    ) -> dict[str, np.ndarray]:
        """The inputs of one step: ``ids`` ``[batch, n]`` new tokens after ``past`` cached ones.

        Args:
            context: values the rules cannot make: ``inputs_embeds`` for this step,
                ``encoder_hidden_states``, ``encoder_attention_mask`` (default: ones over the encoder positions).
            mask: ``[batch, past + n]``, 1 for a real token, 0 for padding (default: all ones).
            beam_idx: the cache row each row continues (default ``arange(batch)``); it may pick a
                row several times, growing the cache to ``len(beam_idx)`` rows.

        Raises:
            DecoderError: a value ``context`` must supply is missing, or ``mask`` has the wrong shape.
        """
        ids = np.asarray(ids)
        if ids.ndim != 2:
            raise DecoderError(f"token ids must be [batch, tokens], got shape {list(ids.shape)}")
        batch, n = ids.shape
        plain = mask is None  # no padding: positions are past .. past + n - 1
        if mask is None:
            mask = np.ones((batch, past + n), dtype=np.int64)
        elif np.shape(mask) != (batch, past + n):
            raise DecoderError(f"the attention mask must be [{batch}, {past + n}], got {list(np.shape(mask))}")
        context = context or {}
        out: dict[str, np.ndarray] = {}
        for spec in self.inputs:
            value = self._value(spec, ids, n, past, np.asarray(mask), beam_idx, context, plain)
            out[spec.name] = np.ascontiguousarray(value, dtype=spec.dtype)
        return out

    def _value(
        self,
        spec: InputSpec,
        ids: np.ndarray,
        n: int,
        past: int,
        mask: np.ndarray,
        beam_idx: np.ndarray | None,
        context: Mapping[str, np.ndarray],
        plain: bool = False,
    ) -> np.ndarray:
        name, batch = spec.name, ids.shape[0]
        if name == "input_ids":
            return ids
        if name == "attention_mask":
            return mask[:, -n:] if (self.mask == "current" and past > 0) else mask
        if name == "position_ids":
            if plain:  # what the cumulative sum of a mask of ones gives, without summing the past
                pos = np.arange(past, past + n, dtype=np.int64)[None].repeat(batch, 0)
            else:
                pos = np.cumsum(mask, axis=1) - 1
                pos[mask == 0] = 1
                pos = pos[:, -n:]
            if spec.rank == 3:
                sections = spec.dims[0] if spec.dims and isinstance(spec.dims[0], int) else 3
                pos = np.broadcast_to(pos, (sections, batch, n))
            return pos
        if name == "cache_position":
            if self.cache_position == "conv_kernel":
                return np.arange(self.conv_kernel) if past == 0 else np.array([past])
            return np.arange(past, past + n)
        if name == "beam_idx":
            return np.arange(batch) if beam_idx is None else beam_idx
        if name == "token_type_ids":
            return np.zeros((batch, n))
        if name == "encoder_attention_mask" and name not in context:
            hidden = self._context(context, "encoder_hidden_states")
            return np.ones(hidden.shape[:2])
        return self._context(context, name)

    @staticmethod
    def _context(context: Mapping[str, np.ndarray], name: str) -> np.ndarray:
        if name not in context:
            what = "run the encoder first" if name.startswith("encoder") else "embed the tokens first"
            raise DecoderError(f"input '{name}' has no value: {what}")
        return np.asarray(context[name])
