"""The inputs ``verify`` feeds OpenVINO and ortstate: a stateful decoder's by the feeding rules
``generate`` uses, any other model's random (see :mod:`ortstate.decoders.synthetic`), with the
values and shapes the caller fixes checked against the model's Parameters first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..decoders import FeedRules, InputSpec, SyntheticInputs, concrete_shape, input_specs, read_config
from ..errors import InputError
from ..ir import Graph, Layer
from ..ir.walk import upstream

__all__ = ["DEFAULT_DIM", "VerifyInputs", "inputs_reaching"]

DEFAULT_DIM = 4  # dynamic dims other than the first; a decoder's prompt length


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
        self.specs = input_specs(graph, error=InputError)
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
        self.source = SyntheticInputs(
            graph,
            read_config(xml.parent),
            batch=batch,
            prompt=DEFAULT_DIM,
            dim=DEFAULT_DIM,
            shapes=shapes,
            fixed=fixed,
            context_positions=DEFAULT_DIM,
            error=InputError,
        )
        self.rules: FeedRules | None = self.source.rules
        self.initial = self.source.initial
        self.feeding = "random, new values every step"
        if self.rules is not None:
            self._check_decoder_shapes(by_name, batch, shapes)
            self.feeding = (
                f"as generate feeds a decoder: a random {self.source.prompt}-token prompt, then 1 token per step"
                + "".join(f"; {note}" for note in self.rules.notes)
            )
        if self.initial:
            shown = ", ".join(f"{n} [{','.join(map(str, v.shape))}]" for n, v in self.initial.items())
            self.feeding += f"; variables starting empty set to zeros first: {shown}"

    def _check_decoder_shapes(
        self, by_name: Mapping[str, InputSpec], batch: int, shapes: Mapping[str, Sequence[int]]
    ) -> None:
        """A decoder's ``--shape`` may name its token input (batch, prompt length) and the encoder's output only."""
        token = self.source.token
        shapeable = {token, "encoder_hidden_states"}
        for name in shapes:
            if name not in shapeable:
                raise InputError(
                    f"--shape {name}: the decoder's feeding rules make '{name}' from {token}: "
                    f"set the batch and prompt length with --shape {token}=B,N"
                )
            concrete_shape(by_name[name], batch, DEFAULT_DIM, shapes[name], InputError)

    def phase(self, rng: np.random.Generator, steps: int) -> list[dict[str, np.ndarray]]:
        """The feeds of one phase (``steps`` steps from a fresh state)."""
        return self.source.steps(rng, steps)


def inputs_reaching(graph: Graph, layer: Layer) -> list[str]:
    """The model inputs ``layer`` depends on, by name."""
    found = [src.tensor_name() for src in upstream(graph, [layer]) if src.type == "Parameter"]
    return sorted(found)
