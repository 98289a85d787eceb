"""The stateless helper models around a stateful decoder: an encoder (Whisper, T5) and a VLM's text embeddings.

Both are converted like the decoder and run through :class:`~ortstate.runtime.StatefulSession` (they
have no variables, so a session is a plain ONNX Runtime session).
"""

from __future__ import annotations

import os
import time

import numpy as np

from ..decoders import InputSpec, input_specs
from ..errors import GenerationError
from ..runtime import StatefulSession

__all__ = ["Encoder", "TextEmbedder"]


def _output_index(session: StatefulSession, preferred: str) -> int:
    names = [o.name for o in session.get_outputs()]
    return names.index(preferred) if preferred in names else 0


class Encoder:
    """An encoder-decoder's encoder: ``input_features`` (Whisper) or ``input_ids`` (T5) -> hidden states.

    Its main input is the one not named ``attention_mask``; an ``attention_mask`` input gets ones
    shaped like the main input (no padding).
    """

    def __init__(self, session: StatefulSession) -> None:
        self.session = session
        self.specs: list[InputSpec] = input_specs(session.get_inputs())
        main = [s for s in self.specs if s.name != "attention_mask"]
        if len(main) != 1:
            names = ", ".join(s.name for s in self.specs)
            raise GenerationError(f"encoder: expected one main input besides attention_mask, got {names}")
        self.main: InputSpec = main[0]
        self._out = _output_index(session, "last_hidden_state")
        self.last_seconds = 0.0

    @classmethod
    def from_ir(cls, xml: str | os.PathLike[str], form: str = "auto") -> Encoder:
        return cls(StatefulSession(xml, form=form))

    def __call__(self, value: np.ndarray) -> np.ndarray:
        """The hidden states ``[batch, positions, hidden]`` of ``value`` (cast to the main input's type).

        Raises:
            GenerationError: ``value`` is no array of numbers, or has the wrong rank for the
                encoder's main input.
        """
        try:
            value = np.asarray(value, dtype=self.main.dtype)
        except (TypeError, ValueError) as exc:
            raise GenerationError(f"encoder input '{self.main.name}': not an array of numbers ({exc})") from None
        if self.main.rank is not None and value.ndim != self.main.rank:
            raise GenerationError(
                f"encoder input '{self.main.name}' has rank {self.main.rank}, got shape {list(value.shape)}"
            )
        main = np.ascontiguousarray(value, dtype=self.main.dtype)
        feeds = {s.name: np.ones(main.shape, s.dtype) if s is not self.main else main for s in self.specs}
        start = time.perf_counter()
        hidden = self.session.run(None, feeds)[self._out]
        self.last_seconds = time.perf_counter() - start
        return hidden


class TextEmbedder:
    """A VLM's text-embeddings model: ids ``[batch, n]`` -> ``inputs_embeds`` ``[batch, n, hidden]``."""

    def __init__(self, session: StatefulSession) -> None:
        self.session = session
        specs = input_specs(session.get_inputs())
        if len(specs) != 1:
            raise GenerationError(f"text embeddings: expected one input, got {', '.join(s.name for s in specs)}")
        self.spec = specs[0]

    @classmethod
    def from_ir(cls, xml: str | os.PathLike[str], form: str = "auto") -> TextEmbedder:
        return cls(StatefulSession(xml, form=form))

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        return self.session.run(None, {self.spec.name: np.ascontiguousarray(ids, dtype=self.spec.dtype)})[0]
