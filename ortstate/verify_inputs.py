"""The inputs ``verify`` feeds OpenVINO and ortstate: a stateful decoder's by the feeding rules
``generate`` uses, any other model's random (see :mod:`ortstate.generate.synthetic`), with the
values and shapes the caller fixes checked against the model's Parameters first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from .errors import InputError
from .generate.feeds import FeedRules, InputSpec
from .generate.ir_inputs import decoder_rules, empty_start_states, ir_input_specs, logits_size
from .generate.model_dir import read_config
from .generate.synthetic import concrete_shape, decoder_steps
from .generate.synthetic import random_inputs as _random_inputs
from .ir import Graph, Layer
from .ir.walk import upstream

__all__ = ["DEFAULT_DIM", "InputError", "VerifyInputs", "input_specs", "inputs_reaching", "random_inputs"]

DEFAULT_DIM = 4  # dynamic dims other than the first; a decoder's prompt length


def input_specs(graph: Graph) -> list[InputSpec]:
    """The IR's Parameters as :class:`InputSpec` (dims None where dynamic).

    Raises:
        InputError: a Parameter of an element type no numpy array can hold.
    """
    specs = ir_input_specs(graph)
    for spec, layer in zip(specs, graph.parameters):
        if spec.dtype is None:
            etype = layer.outputs[0].element_type if layer.outputs else None
            raise InputError(f"{graph.source}: {layer.describe()}: cannot generate inputs of element type {etype}")
    return specs


def random_inputs(
    specs: Sequence[InputSpec],
    rng: np.random.Generator,
    *,
    batch: int = 2,
    shapes: Mapping[str, Sequence[int]] | None = None,
) -> dict[str, np.ndarray]:
    """Floats ~ N(0, 1); integers in ``[0, batch)`` (valid as indices along the batch axis); bools 50/50.
    Dynamic dims: ``batch`` for the first, ``DEFAULT_DIM`` for the others; ``shapes`` overrides.

    Raises:
        InputError: a shape that does not fit, or a dynamic rank without a shape.
    """
    return _random_inputs(specs, rng, batch=batch, dim=DEFAULT_DIM, shapes=shapes, error=InputError)


class VerifyInputs:
    """The inputs of each phase: a decoder's by its feeding rules, any other model's random.

    Raises (on construction):
        InputError: an ``--input`` or ``--shape`` naming no input, or not fitting the model's.
    """

    def __init__(
        self,
        graph: Graph,
        xml: Path,
        batch: int,
        shapes: Mapping[str, Sequence[int]],
        fixed: Mapping[str, np.ndarray],
    ) -> None:
        self.specs = input_specs(graph)
        by_name = {s.name: s for s in self.specs}
        for option, names in (("--input", fixed), ("--shape", shapes)):
            for name in names:
                if name not in by_name:
                    raise InputError(f"{option} {name}: unknown input '{name}' (inputs: {', '.join(by_name)})")
        for name, value in fixed.items():
            spec, value = by_name[name], np.asarray(value)
            if value.dtype != spec.dtype:
                raise InputError(f"input '{name}': got {value.dtype} values, the model takes {spec.dtype}")
            concrete_shape(spec, batch, DEFAULT_DIM, value.shape, InputError)  # refuses a shape that cannot fit
        self.fixed = {name: np.asarray(value) for name, value in fixed.items()}
        self.shapes, self.batch = shapes, batch
        self.rules: FeedRules | None = decoder_rules(graph, read_config(xml.parent))
        self.vocab = logits_size(graph)
        self.initial = empty_start_states(graph, self._rows())
        self.feeding = "random, new values every step"
        if self.rules is not None:
            self.token = "input_ids" if "input_ids" in by_name else "inputs_embeds"
            self.batch, self.prompt = self._decoder_dims(by_name)
            self.feeding = (
                f"as generate feeds a decoder: a random {self.prompt}-token prompt, then 1 token per step"
                + "".join(f"; {note}" for note in self.rules.notes)
            )

        if self.initial:
            shapes = ", ".join(f"{n} [{','.join(map(str, v.shape))}]" for n, v in self.initial.items())
            self.feeding += f"; variables starting empty set to zeros first: {shapes}"

    def _rows(self) -> int:
        """The batch the inputs carry: the first dim of the first input whose first dim is dynamic."""
        for spec in self.specs:
            if spec.shape and not isinstance(spec.shape[0], int):
                given = self.fixed[spec.name].shape if spec.name in self.fixed else self.shapes.get(spec.name)
                return int(given[0]) if given else self.batch
        return self.batch

    def _decoder_dims(self, by_name: Mapping[str, InputSpec]) -> tuple[int, int]:
        token = self.token
        shapeable = {token, "encoder_hidden_states"}
        for name in self.shapes:
            if name not in shapeable:
                raise InputError(
                    f"--shape {name}: the decoder's feeding rules make '{name}' from {token}: "
                    f"set the batch and prompt length with --shape {token}=B,N"
                )
            concrete_shape(by_name[name], self.batch, DEFAULT_DIM, self.shapes[name], InputError)
        given = self.fixed.get(token, self.shapes.get(token))
        shape = tuple(given.shape if isinstance(given, np.ndarray) else given) if given is not None else None
        if shape is not None and len(shape) >= 2:
            return int(shape[0]), int(shape[1])
        return self.batch, DEFAULT_DIM

    def phase(self, rng: np.random.Generator, steps: int) -> list[dict[str, np.ndarray]]:
        """The feeds of one phase (``steps`` steps from a fresh state)."""
        if self.rules is None:
            free = [s for s in self.specs if s.name not in self.fixed]
            out = []
            for _ in range(steps):
                step = random_inputs(free, rng, batch=self.batch, shapes=self.shapes)
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
            steps=steps,
            vocab=self.vocab,
            context_positions=DEFAULT_DIM,
            shapes=self.shapes,
            ids=ids,
        )
        return [{**f, **self.fixed} for f in feeds]


def inputs_reaching(graph: Graph, layer: Layer) -> list[str]:
    """The model inputs ``layer`` depends on, by name."""
    found = [src.tensor_name() for src in upstream(graph, [layer]) if src.type == "Parameter"]
    return sorted(found)
