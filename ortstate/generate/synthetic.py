"""Made-up inputs for a stateful IR when none are given (``bench``, ``verify``).

A decoder (see :func:`~ortstate.generate.ir_inputs.decoder_rules`) is fed as generation feeds it,
by the same :class:`~ortstate.generate.feeds.FeedRules`: a prompt of random tokens, then one
random token per step, with the mask, positions, ``cache_position`` and ``beam_idx`` the rules make
for each step; what an encoder or an embeddings model would give (``encoder_hidden_states``,
``inputs_embeds``) is random. Any other model gets random values for every input, every step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import GenerationError
from .feeds import FeedRules, InputSpec

__all__ = ["concrete_shape", "decoder_steps", "random_inputs"]


def concrete_shape(
    spec: InputSpec, batch: int, dim: int, override: Sequence[int] | None = None, error: type[Exception] = ValueError
) -> tuple[int, ...]:
    """``override`` if it fits ``spec``, else its dims with dynamic ones as ``batch`` (first) or ``dim``.

    Raises:
        error: ``override`` does not fit the declared dims, or the rank is dynamic and no override given.
    """
    dims = spec.shape
    if override is not None:
        fits = dims is None or (
            len(override) == len(dims) and all(not isinstance(d, int) or d == n for d, n in zip(dims, override))
        )
        if not fits:
            shown = "[" + ",".join(str(d) if isinstance(d, int) else "?" for d in dims or ()) + "]"
            raise error(f"input '{spec.name}': shape {list(override)} does not fit {shown}")
        return tuple(override)
    if dims is None:
        raise error(f"input '{spec.name}' has a dynamic rank: give a shape (--shape {spec.name}=D0,D1,...)")
    return tuple(d if isinstance(d, int) else (batch if i == 0 else dim) for i, d in enumerate(dims))


def random_inputs(
    specs: Sequence[InputSpec],
    rng: np.random.Generator,
    *,
    batch: int = 2,
    dim: int = 4,
    shapes: Mapping[str, Sequence[int]] | None = None,
    scale: float = 1.0,
    error: type[Exception] = ValueError,
) -> dict[str, np.ndarray]:
    """One random value per input: floats ~ N(0, ``scale``²); integers in ``[0, batch)`` (valid as
    indices along the batch axis, e.g. ``beam_idx``, and into any embedding table); bools 50/50.
    Dynamic dims are ``batch`` for the first dim and ``dim`` for the others; ``shapes`` overrides."""
    feeds = {}
    for spec in specs:
        shape = concrete_shape(spec, batch, dim, (shapes or {}).get(spec.name), error)
        if spec.dtype.kind == "b":
            value = rng.random(shape) < 0.5
        elif spec.dtype.kind in "iu":
            value = rng.integers(0, max(batch, 1), size=shape)
        else:
            value = rng.standard_normal(shape) * scale
        feeds[spec.name] = np.asarray(value).astype(spec.dtype)
    return feeds


def decoder_steps(
    rules: FeedRules,
    rng: np.random.Generator,
    *,
    batch: int,
    prompt: int,
    steps: int,
    vocab: int | None = None,
    context_positions: int = 4,
    shapes: Mapping[str, Sequence[int]] | None = None,
    ids: np.ndarray | None = None,
) -> list[dict[str, np.ndarray]]:
    """``steps`` feeds of one generation from a fresh state: a ``prompt``-token prefill, then one token a step.

    Args:
        vocab: token ids are drawn from ``[0, vocab)`` (``{0, 1}`` when unknown: valid for any embedding).
        context_positions: encoder positions of a random ``encoder_hidden_states``.
        shapes: whole shapes for the context inputs (``encoder_hidden_states``, ``inputs_embeds``'s
            hidden size); a token input's shape sets ``batch`` and ``prompt`` instead (callers do that).
        ids: the tokens of every step (``[batch, n]``) instead of random ones.

    Raises:
        GenerationError: a context input's shape does not fit the model.
    """
    shapes = shapes or {}
    specs = {s.name: s for s in rules.inputs}
    context: dict[str, np.ndarray] = {}
    hidden = specs.get("encoder_hidden_states")
    if hidden is not None:
        shape = concrete_shape(hidden, batch, context_positions, shapes.get(hidden.name), GenerationError)
        context[hidden.name] = rng.standard_normal(shape).astype(hidden.dtype)
    feeds = []
    past = 0
    for step in range(steps):
        count = prompt if step == 0 else 1
        tokens = ids if ids is not None else rng.integers(0, vocab or 2, size=(batch, count))
        if rules.uses_embeddings:
            embeds = specs["inputs_embeds"]
            size = embeds.shape[-1] if embeds.shape and isinstance(embeds.shape[-1], int) else 4
            context["inputs_embeds"] = rng.standard_normal((batch, tokens.shape[1], size)).astype(embeds.dtype)
        feeds.append(rules.feeds(tokens, past, context))
        past += tokens.shape[1]
    return feeds
