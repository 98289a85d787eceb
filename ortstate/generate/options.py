"""How :meth:`~ortstate.generate.Generator.generate` searches: greedy, sampling or beam search, and when it stops.

The parameters mean what transformers' ``GenerationConfig`` says they mean, with its defaults
(``top_k`` 50, ``temperature``/``top_p``/``repetition_penalty``/``length_penalty`` 1.0,
``early_stopping`` False), so that a user moving from ``model.generate()`` gets the same search.
A model folder's ``generation_config.json`` supplies the values a call leaves out, as transformers
does, except the switches ``do_sample`` and ``num_beams``: ortstate decodes greedily unless asked
(:func:`file_defaults` keeps what the file asked for, for a note).
"""

from __future__ import annotations

import numbers
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from ..decoders import SEARCH_KEYS
from ..errors import GenerationError

__all__ = ["SEARCH_KEYS", "SearchOptions", "file_defaults"]


@dataclass(frozen=True)
class SearchOptions:
    """One generation's search and stopping parameters (validated on creation).

    Attributes:
        do_sample: sample the next token instead of taking the most likely one (with ``num_beams`` > 1:
            transformers' beam sampling).
        temperature: divides the scores before sampling (> 0; only with ``do_sample``).
        top_k: keep the ``top_k`` most likely tokens when sampling (0 = all).
        top_p: keep the smallest set of most likely tokens whose probability reaches ``top_p`` when
            sampling (in (0, 1]; 1 = all).
        repetition_penalty: transformers' (CTRL's) penalty on every token already in the sequence,
            prompt and history included (> 0; 1 = none). Applies to greedy and beam search too.
        num_beams: beams per prompt (1 = no beam search).
        length_penalty: a finished beam's score is its log-probability over ``length ** length_penalty``.
        early_stopping: beam search stops when ``num_beams`` beams finished (True), when no running
            beam can beat the finished ones by transformers' heuristic (False), or only at the
            length limit or when that is certain (``"never"``).
        seed: seeds the sampling (None: a fresh seed, recorded in ``GenerationRun.seed``).
        stop_token_ids: tokens that end a row like the eos token (they are returned).
        stop_strings: a row ends as soon as its generated text contains one of these (needs a tokenizer;
            the tokens completing it are returned).
    """

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check(self, "")

    @classmethod
    def build(cls, defaults: Mapping[str, Any] | None = None, **given: Any) -> SearchOptions:
        """Options from keyword arguments, ``defaults`` (a folder's :func:`file_defaults`) filling the rest.

        A keyword given as None means "not given".

        Raises:
            GenerationError: an unknown keyword or a value out of range (one line naming it).
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(k for k in given if k not in known)
        if unknown:
            raise GenerationError(
                f"unknown generation option(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})"
            )
        values = {k: v for k, v in (defaults or {}).items() if k in SEARCH_KEYS}
        values.update({k: v for k, v in given.items() if v is not None})
        for key in ("stop_token_ids", "stop_strings"):
            if key in values:
                values[key] = _as_tuple(values[key], key)
        return cls(**values)

    @property
    def sampling(self) -> bool:
        return self.do_sample

    @property
    def beam_search(self) -> bool:
        return self.num_beams > 1

    def draw_seed(self) -> int | None:
        """The seed a generation samples with: :attr:`seed`, else a fresh one; None when it does not sample."""
        if not self.do_sample:
            return None
        return self.seed if self.seed is not None else secrets.randbits(63)


def _as_tuple(value: Any, key: str) -> tuple[Any, ...]:
    if isinstance(value, (str, bytes, numbers.Number)):
        return (value,)  # a single stop string / id
    if not isinstance(value, Sequence) and not hasattr(value, "__iter__"):
        raise GenerationError(f"{key} must be a list, got {type(value).__name__}", field=key)
    return tuple(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and value == value  # not NaN


def _check(options: SearchOptions, where: str) -> None:
    """Raise GenerationError for the first parameter out of range (``where`` prefixes the message;
    the error's ``field`` names the parameter)."""

    def fail(field: str, what: str) -> None:
        raise GenerationError(f"{where}{field} {what}", field=field)

    if not isinstance(options.do_sample, bool):
        fail("do_sample", f"must be true or false, got {options.do_sample!r}")
    t = options.temperature
    if not _is_real(t) or not 0 < t < float("inf"):
        fail("temperature", f"must be a number > 0, got {t!r} (for greedy decoding, do not sample)")
    if not _is_int(options.top_k) or options.top_k < 0:
        fail("top_k", f"must be an integer >= 0 (0 keeps every token), got {options.top_k!r}")
    if not _is_real(options.top_p) or not 0 < options.top_p <= 1:
        fail("top_p", f"must be in (0, 1], got {options.top_p!r}")
    r = options.repetition_penalty
    if not _is_real(r) or not 0 < r < float("inf"):
        fail("repetition_penalty", f"must be a number > 0 (1 = no penalty), got {r!r}")
    if not _is_int(options.num_beams) or options.num_beams < 1:
        fail("num_beams", f"must be an integer >= 1, got {options.num_beams!r}")
    if not _is_real(options.length_penalty) or abs(options.length_penalty) == float("inf"):
        fail("length_penalty", f"must be a finite number, got {options.length_penalty!r}")
    if not (isinstance(options.early_stopping, bool) or options.early_stopping == "never"):
        fail("early_stopping", f"must be true, false or 'never', got {options.early_stopping!r}")
    if options.seed is not None and (not _is_int(options.seed) or not 0 <= options.seed < 2**63):
        fail("seed", f"must be an integer in [0, 2**63), got {options.seed!r}")
    bad_ids = [t for t in options.stop_token_ids if not _is_int(t) or t < 0]
    if bad_ids:
        fail("stop_token_ids", f"must be non-negative integers, got {', '.join(map(repr, bad_ids))}")
    bad_strings = [s for s in options.stop_strings if not isinstance(s, str) or not s]
    if bad_strings:
        fail("stop_strings", f"must be non-empty strings, got {', '.join(map(repr, bad_strings))}")


def file_defaults(generation: Mapping[str, Any], source: str = "generation_config.json") -> dict[str, Any]:
    """The search defaults ``generation_config.json`` gives (:data:`SEARCH_KEYS`), validated.

    Raises:
        GenerationError: a value out of range, naming ``source``.
    """
    values = {k: generation[k] for k in SEARCH_KEYS if generation.get(k) is not None}
    if isinstance(values.get("top_k"), float) and float(values["top_k"]).is_integer():
        values["top_k"] = int(values["top_k"])
    try:
        SearchOptions(**values)
    except GenerationError as exc:
        raise GenerationError(f"{source}: {exc}", field=exc.field) from None
    return values
