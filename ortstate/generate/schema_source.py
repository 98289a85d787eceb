"""Where a :class:`~.continuous.ContinuousBatcher` gets the grammars of its requests' ``json_schema``:
the model's tokenizer (given, or the folder's ``tokenizer.json`` loaded on first use) and the
schemas compiled for it and the model's logits."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..errors import GenerationError
from .batch_plan import schema_matchers
from .options import SearchOptions
from .structured import Grammars, Matcher, grammars_for
from .tokenizer import folder_tokenizer

__all__ = ["SchemaSource"]


class SchemaSource:
    """The tokenizer ``tokenizer`` (None: ``folder``'s, once asked for) and the grammars of a model
    with ``vocab_size`` logits."""

    def __init__(self, tokenizer: Any, vocab_size: int | None) -> None:
        self._tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.folder: str | os.PathLike[str] | None = None  # where the tokenizer.json is looked for

    @property
    def tokenizer(self) -> Any:
        """The tokenizer given, else the folder's ``tokenizer.json`` (loaded on first use).

        Raises:
            GenerationError: there is none (naming the file missing, or saying none was given).
        """
        if self._tokenizer is None:
            self._tokenizer = folder_tokenizer(self.folder, "ContinuousBatcher")
        return self._tokenizer

    def matchers(self, options: SearchOptions, eos: Sequence[int], max_new_tokens: int) -> list[Matcher] | None:
        """Each choice's matcher of ``options.json_schema`` (None without one): made in the caller's
        thread, as compiling a schema can take a while and must never run on the pool's loop.

        Raises:
            GenerationError: as :func:`~.batch_plan.schema_matchers` and :meth:`grammars`.
        """
        if options.json_schema is None:
            return None
        return schema_matchers(options, eos, max_new_tokens, self.grammars)

    def grammars(self) -> Grammars:
        """The schemas compiled for this model's tokenizer and logits (once per schema: the first
        request with one compiles it, in its caller's thread, never the pool's loop).

        Raises:
            GenerationError: no tokenizer (naming what is missing), or the structured extra missing.
        """
        try:
            tokenizer = self.tokenizer
        except GenerationError as exc:
            raise GenerationError(f"json_schema needs the model's tokenizer ({exc})", field="json_schema") from None
        return grammars_for(tokenizer, self.vocab_size)
