"""Made-up inputs for a stateful IR when none are given (``bench``, ``verify``): :class:`SyntheticInputs`.

A decoder (see :func:`~ortstate.decoders.ir_inputs.decoder_rules`) is fed as generation feeds it,
by the same :class:`~ortstate.decoders.feeds.FeedRules`: a prompt of random tokens, then one
random token per step, with the mask, positions, ``cache_position`` and ``beam_idx`` the rules make
for each step; what an encoder or an embeddings model would give (``encoder_hidden_states``,
``inputs_embeds``) is random. Any other model gets random values for every input, every step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from ..errors import DecoderError
from ..ir import Graph
from .feeds import FeedRules
from .inputs import concrete_shape, input_specs, random_inputs
from .ir_inputs import decoder_rules, empty_start_states, logits_size
from .model_dir import ModelConfig

__all__ = ["SyntheticInputs", "decoder_steps"]


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
        DecoderError: a context input's shape does not fit the model.
    """
    shapes = shapes or {}
    specs = {s.name: s for s in rules.inputs}
    context: dict[str, np.ndarray] = {}
    hidden = specs.get("encoder_hidden_states")
    if hidden is not None:
        shape = concrete_shape(hidden, batch, context_positions, shapes.get(hidden.name), DecoderError)
        context[hidden.name] = rng.standard_normal(shape).astype(hidden.dtype)
    feeds = []
    past = 0
    for step in range(steps):
        count = prompt if step == 0 else 1
        tokens = ids if ids is not None else rng.integers(0, vocab or 2, size=(batch, count))
        if rules.uses_embeddings:
            embeds = specs["inputs_embeds"]
            size = embeds.dims[-1] if embeds.dims and isinstance(embeds.dims[-1], int) else 4
            context["inputs_embeds"] = rng.standard_normal((batch, tokens.shape[1], size)).astype(embeds.dtype)
        feeds.append(rules.feeds(tokens, past, context))
        past += tokens.shape[1]
    return feeds


class SyntheticInputs:
    """The made-up inputs of one IR, phase by phase: a decoder's (see
    :func:`~ortstate.decoders.ir_inputs.decoder_rules`) by its feeding rules, any other model's
    random. ``bench`` and ``verify`` both feed through it; what they choose differently is passed
    in. The callers check first that the names in ``shapes`` and ``fixed`` are inputs, and that a
    decoder's ``shapes`` name its token or context inputs only.

    Args:
        config: the model folder's (the rules depend on its model type).
        batch: the first dim of inputs where it is dynamic; a decoder's batch.
        prompt: a decoder's prefill length. Both give way to the shape of the decoder's token input
            (``input_ids`` or ``inputs_embeds``) in ``fixed`` or ``shapes``.
        dim: the other dynamic dims of a non-decoder's inputs.
        shapes: whole shapes of some inputs.
        fixed: values fed unchanged every step in place of made ones.
        scale: the standard deviation of random floats.
        context_positions: the encoder positions of a random ``encoder_hidden_states``.
        scalar_dynamic_rank: an input of dynamic rank without a shape is fed a scalar (else refused).
        error: what a shape that does not fit, or an input no numpy type holds, raises.

    Attributes:
        rules: the decoder's feeding rules, None when the IR is not fed as a decoder.
        initial: the variables that start empty, as zeros of a stream of :meth:`rows` rows
            (:func:`~ortstate.decoders.ir_inputs.empty_start_states`).
    """

    def __init__(
        self,
        graph: Graph,
        config: ModelConfig,
        *,
        batch: int,
        prompt: int,
        dim: int,
        shapes: Mapping[str, Sequence[int]] | None = None,
        fixed: Mapping[str, np.ndarray] | None = None,
        scale: float = 1.0,
        context_positions: int = 4,
        scalar_dynamic_rank: bool = False,
        error: type[Exception] = ValueError,
    ) -> None:
        specs = input_specs(graph, error=error)
        if scalar_dynamic_rank:
            specs = [s if s.dims is not None else replace(s, dims=()) for s in specs]
        self.specs = specs
        self.shapes = dict(shapes or {})
        self.fixed = {name: np.asarray(value) for name, value in (fixed or {}).items()}
        self.batch, self.prompt, self.dim = batch, prompt, dim
        self.scale, self.context_positions, self.error = scale, context_positions, error
        self.rules: FeedRules | None = decoder_rules(graph, config)
        self.vocab = logits_size(graph)
        self.initial = empty_start_states(graph, self.rows())
        self.token = ""
        if self.rules is not None:
            self.token = "input_ids" if "input_ids" in self.rules.names else "inputs_embeds"
            given = self.fixed[self.token].shape if self.token in self.fixed else self.shapes.get(self.token)
            if given is not None and len(given) >= 2:
                self.batch, self.prompt = int(given[0]), int(given[1])

    def rows(self) -> int:
        """The batch the inputs carry: the first dim of the first input whose first dim is dynamic."""
        for spec in self.specs:
            if spec.dims and not isinstance(spec.dims[0], int):
                given = self.fixed[spec.name].shape if spec.name in self.fixed else self.shapes.get(spec.name)
                return int(given[0]) if given else self.batch
        return self.batch

    def steps(self, rng: np.random.Generator, count: int) -> list[dict[str, np.ndarray]]:
        """The feeds of ``count`` steps from a fresh state (inputs in the IR's order, ``fixed`` ones as given).

        Raises:
            ``error``: a shape that does not fit, or a dynamic rank without a shape.
            DecoderError: a decoder's context input shaped as it cannot be.
        """
        if self.rules is None:
            free = [s for s in self.specs if s.name not in self.fixed]
            out = []
            for _ in range(count):
                step = random_inputs(
                    free, rng, batch=self.batch, dim=self.dim, shapes=self.shapes, scale=self.scale, error=self.error
                )
                step.update(self.fixed)
                out.append({s.name: step[s.name] for s in self.specs})
            return out
        ids = self.fixed.get("input_ids")
        if ids is None and self.token in self.fixed:  # fixed embeddings: every step is that many tokens
            ids = np.zeros(self.fixed[self.token].shape[:2], np.int64)
        feeds = decoder_steps(
            self.rules,
            rng,
            batch=self.batch,
            prompt=self.prompt,
            steps=count,
            vocab=self.vocab,
            context_positions=self.context_positions,
            shapes=self.shapes,
            ids=ids,
        )
        return [{**f, **self.fixed} for f in feeds]
