"""How :meth:`~ortstate.generate.Generator.generate` searches: greedy, sampling or beam search, and when it stops.

The parameters mean what transformers' ``GenerationConfig`` says they mean, with its defaults
(``top_k`` 50, ``temperature``/``top_p``/``repetition_penalty``/``length_penalty`` 1.0,
``early_stopping`` False), so that a user moving from ``model.generate()`` gets the same search;
those transformers lacks are vLLM's ``SamplingParams`` (``min_p``, ``presence_penalty``,
``frequency_penalty``, ``logit_bias``, ``min_tokens``, ``n``), with vLLM's names, ranges and meaning;
``json_schema`` constrains the answer to JSON valid against a schema (:mod:`.structured`).
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
from .structured.schema import schema_text

__all__ = ["SearchOptions", "file_defaults"]

# beam sampling sums temperature-scaled log-probabilities over steps (transformers' float32 scores)
MIN_BEAM_TEMPERATURE = 0.01
# n and num_beams: rows of the model's cache (and Python lists) per prompt, allocated before any
# step; OpenAI's bound on n (a billion choices took every byte of memory)
MAX_ROWS = 128
# vLLM's options that beam search (transformers') does not take
_NOT_FOR_BEAMS = ("min_p", "presence_penalty", "frequency_penalty", "logit_bias", "min_tokens", "n", "json_schema")


@dataclass(frozen=True)
class SearchOptions:
    """One generation's search and stopping parameters (validated on creation).

    Attributes:
        do_sample: sample the next token instead of taking the most likely one (with ``num_beams`` > 1:
            transformers' beam sampling).
        temperature: divides the scores before sampling (> 0; only with ``do_sample``). Computed
            exactly for any positive value: a vanishing one gives greedy's tokens.
        top_k: keep the ``top_k`` most likely tokens when sampling (0 or -1 = all).
        top_p: keep the smallest set of most likely tokens whose probability reaches ``top_p`` when
            sampling (in (0, 1]; 1 = all).
        min_p: keep the tokens at least ``min_p`` times as likely as the most likely one when
            sampling (in [0, 1]; 0 = all).
        repetition_penalty: transformers' (CTRL's) penalty on every token already in the sequence,
            prompt and history included (> 0; 1 = none). Applies to greedy and beam search too.
        presence_penalty: OpenAI's: subtracted from the score of every token generated so far (in
            [-2, 2]; > 0: fewer repeats).
        frequency_penalty: OpenAI's: subtracted once per time a token was generated so far (in [-2, 2]).
        logit_bias: token id -> a number in [-100, 100] added to its score (a mapping, or its items).
        min_tokens: the tokens that would stop a row (eos, ``stop_token_ids``) cannot be picked, and
            stop strings do not stop it, before it has this many new tokens (>= 0).
        n: choices per prompt (1 to :data:`MAX_ROWS`; > 1 needs ``do_sample``): one prefill, then ``n`` rows, choice
            ``i`` sampled with ``seed + i``, as vLLM seeds its ``n`` children.
        num_beams: beams per prompt (1 = no beam search; at most :data:`MAX_ROWS`).
        length_penalty: a finished beam's score is its log-probability over ``length ** length_penalty``.
        early_stopping: beam search stops when ``num_beams`` beams finished (True), when no running
            beam can beat the finished ones by transformers' heuristic (False), or only at the
            length limit or when that is certain (``"never"``).
        seed: seeds the sampling (None: a fresh seed, recorded in ``GenerationRun.seed``).
        stop_token_ids: tokens that end a row like the eos token (they are returned).
        stop_strings: a row ends as soon as its generated text contains one of these (needs a tokenizer;
            the tokens completing it are returned).
        json_schema: each answer is JSON valid against this JSON schema (a dict or its JSON text,
            kept as compact text; ``{"type": "object"}``: any JSON object), written compactly as
            ``json.dumps`` writes it; a row stops as soon as its answer is complete (stop reason
            ``"grammar"``). Needs the model's ``tokenizer.json`` and the ``structured`` extra;
            greedy and sampling, not beam search. Bounds: :mod:`ortstate.generate.structured.schema`.
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
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    min_tokens: int = 0
    n: int = 1
    json_schema: str | None = None

    def __post_init__(self) -> None:
        if self.json_schema is not None:
            object.__setattr__(self, "json_schema", schema_text(self.json_schema))
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
        if "logit_bias" in values:
            values["logit_bias"] = _bias_items(values["logit_bias"])
        return cls(**values)

    @property
    def sampling(self) -> bool:
        return self.do_sample

    @property
    def beam_search(self) -> bool:
        return self.num_beams > 1

    @property
    def adjusts(self) -> bool:
        """Whether the scores differ from the logits before sampling's warpers (penalties, bias,
        ``min_tokens``): False means a greedy row's token is its logits' argmax (a ``json_schema``'s
        mask is applied to the logits themselves, before)."""
        return bool(
            self.repetition_penalty != 1.0
            or self.presence_penalty
            or self.frequency_penalty
            or self.logit_bias
            or self.min_tokens
        )

    def check_tokens(self, vocab_size: int | None, max_new_tokens: int) -> None:
        """Check what depends on the model and the request: ``logit_bias`` ids within the
        vocabulary, ``min_tokens`` at most ``max_new_tokens``.

        Raises:
            GenerationError: naming the field.
        """
        outside = [t for t, _ in self.logit_bias if vocab_size is not None and t >= vocab_size]
        if outside:
            raise GenerationError(
                f"logit_bias: token id(s) {', '.join(map(str, outside[:5]))} outside the vocabulary "
                f"(0..{vocab_size - 1})",
                field="logit_bias",
            )
        if self.min_tokens > max_new_tokens:
            raise GenerationError(
                f"min_tokens {self.min_tokens} is more than max_new_tokens {max_new_tokens}", field="min_tokens"
            )

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


def _bias_items(value: Any) -> tuple[tuple[Any, Any], ...]:
    """``logit_bias`` as (id, bias) pairs; ids may be given as strings of digits (JSON keys)."""
    items = value.items() if isinstance(value, Mapping) else value
    try:
        pairs = [(k, v) for k, v in items]
    except (TypeError, ValueError):
        raise GenerationError(
            f"logit_bias must map token ids to numbers, got {type(value).__name__}", field="logit_bias"
        ) from None
    return tuple((int(k) if _id_text(k) else k, v) for k, v in pairs)


def _id_text(key: Any) -> bool:
    """Whether ``key`` is a token id written in digits: at most 20 of them (no vocabulary has more
    ids than 20 digits count, and ``int`` refuses a text of over 4,300 digits with a ValueError)."""
    return isinstance(key, str) and len(key) <= 20 and key.isascii() and key.isdigit()


def _shown(value: Any) -> str:
    """``value``'s repr as an error shows it: at most 60 characters (a value may come from a client)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
        fail("do_sample", f"must be true or false, got {_shown(options.do_sample)}")
    t = options.temperature
    if not _is_real(t) or not 0 < t < float("inf"):
        fail("temperature", f"must be a number > 0, got {_shown(t)} (for greedy decoding, do not sample)")
    if not _is_int(options.top_k) or options.top_k < -1:
        fail("top_k", f"must be an integer >= 1, or 0 or -1 to keep every token, got {_shown(options.top_k)}")
    if not _is_real(options.top_p) or not 0 < options.top_p <= 1:
        fail("top_p", f"must be in (0, 1], got {_shown(options.top_p)}")
    if not _is_real(options.min_p) or not 0 <= options.min_p <= 1:
        fail("min_p", f"must be in [0, 1], got {_shown(options.min_p)}")
    r = options.repetition_penalty
    if not _is_real(r) or not 0 < r < float("inf"):
        fail("repetition_penalty", f"must be a number > 0 (1 = no penalty), got {_shown(r)}")
    for key in ("presence_penalty", "frequency_penalty"):
        value = getattr(options, key)
        if not _is_real(value) or not -2 <= value <= 2:
            fail(key, f"must be in [-2, 2], got {_shown(value)}")
    _check_bias(options.logit_bias, fail)
    if not _is_int(options.min_tokens) or options.min_tokens < 0:
        fail("min_tokens", f"must be an integer >= 0, got {_shown(options.min_tokens)}")
    if not _is_int(options.num_beams) or not 1 <= options.num_beams <= MAX_ROWS:
        fail("num_beams", f"must be an integer in [1, {MAX_ROWS}], got {_shown(options.num_beams)}")
    if not _is_real(options.length_penalty) or abs(options.length_penalty) == float("inf"):
        fail("length_penalty", f"must be a finite number, got {_shown(options.length_penalty)}")
    if not (isinstance(options.early_stopping, bool) or options.early_stopping == "never"):
        fail("early_stopping", f"must be true, false or 'never', got {_shown(options.early_stopping)}")
    if options.seed is not None and (not _is_int(options.seed) or not 0 <= options.seed < 2**63):
        fail("seed", f"must be an integer in [0, 2**63), got {_shown(options.seed)}")
    bad_ids = [t for t in options.stop_token_ids if not _is_int(t) or t < 0]
    if bad_ids:
        fail("stop_token_ids", f"must be non-negative integers, got {', '.join(map(_shown, bad_ids[:5]))}")
    bad_strings = [s for s in options.stop_strings if not isinstance(s, str) or not s]
    if bad_strings:
        fail("stop_strings", f"must be non-empty strings, got {', '.join(map(_shown, bad_strings[:5]))}")
    _check_n(options, fail)


def _check_bias(bias: Any, fail: Any) -> None:
    if not isinstance(bias, tuple) or not all(isinstance(p, tuple) and len(p) == 2 for p in bias):
        fail("logit_bias", "must map token ids to numbers (SearchOptions.build takes a dict)")
    bad_ids = [t for t, _ in bias if not _is_int(t) or t < 0]
    if bad_ids:
        fail("logit_bias", f"keys must be token ids (integers >= 0), got {', '.join(map(_shown, bad_ids[:5]))}")
    bad = [(t, v) for t, v in bias if not _is_real(v) or not -100 <= v <= 100]
    if bad:
        fail("logit_bias", f"values must be numbers in [-100, 100], got {_shown(bad[0][1])} for token {bad[0][0]}")
    if len({t for t, _ in bias}) != len(bias):
        fail("logit_bias", "names a token id twice")


def _check_n(options: SearchOptions, fail: Any) -> None:
    if not _is_int(options.n) or not 1 <= options.n <= MAX_ROWS:
        fail("n", f"must be an integer in [1, {MAX_ROWS}], got {_shown(options.n)}")
    if options.n > 1 and not options.do_sample:
        fail("n", f"must be 1 when decoding greedily, got {options.n}: n > 1 choices need sampling")
    if options.beam_search:
        given = [k for k in _NOT_FOR_BEAMS if getattr(options, k) != _DEFAULTS[k]]
        if given:
            fail(given[0], "does not apply to beam search (num_beams > 1)")
        if options.do_sample and options.temperature < MIN_BEAM_TEMPERATURE:
            fail(
                "temperature",
                f"must be at least {MIN_BEAM_TEMPERATURE} for beam sampling, got {_shown(options.temperature)} "
                "(its scores, summed over steps, would overflow; for the best beams, do not sample)",
            )


_DEFAULTS = {f.name: f.default for f in fields(SearchOptions)}


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
