"""A batch size the pool has run before, run again through IOBinding: the batch's inputs, states
and flags gathered straight into buffers bound once, the outputs left in bound buffers.

Per step this costs ONNX Runtime's run, the gather of the stepping streams' rows (``np.take``
into the bound buffers) and one copy of each output for the caller, with no allocation that grows
with the pool. A run that does not fit the buffers (an output whose shape follows the values fed)
raises :class:`BoundMiss` and the pool runs it the general way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..runtime import LoadedModel
from ..runtime.pingpong import QUIET, bind_output
from .layout import Layout, join_column

__all__ = ["Bound", "BoundMiss"]


class BoundMiss(Exception):
    """This run does not fit the bound buffers: run it the general way."""


class Bound:
    """The bound buffers of one batch shape, made from a general run's feeds and results."""

    def __init__(self, model: LoadedModel, layout: Layout, feeds: dict[str, np.ndarray], results: list[np.ndarray]):
        self.inputs = [np.empty_like(feeds[s.name], order="C") for s in layout.inputs]
        self.states = [np.empty_like(feeds[s.var.state_input or ""], order="C") for s in layout.states]
        self.flags = [(k, np.empty_like(feeds[s.flag], order="C")) for k, s in enumerate(layout.states) if s.flag]
        self.outputs = [np.empty_like(r, order="C") for r in results]
        if any(a.size == 0 for a in [*self.inputs, *self.states, *self.outputs]):
            raise BoundMiss  # ONNX Runtime cannot bind an empty buffer by pointer
        self.binding, self.raw = model.fast.binding()  # both kept: ORT holds raw pointers to the buffers
        for spec, buf in zip(layout.inputs, self.inputs):
            self.binding.bind_cpu_input(spec.name, buf)
        for spec, buf in zip(layout.states, self.states):
            self.binding.bind_cpu_input(spec.var.state_input or "", buf)
        for k, buf in self.flags:
            self.binding.bind_cpu_input(layout.states[k].flag or "", buf)
        names = [*model.output_names, *(s.var.state_output or "" for s in layout.states)]
        for name, buf in zip(names, self.outputs):
            bind_output(self.binding, name, buf)
        self.run_bound = model.fast.run_bound
        self.in_specs = layout.inputs
        self.state_axes = [s.axis for s in layout.states]

    def run(
        self,
        slots: np.ndarray,
        feeds: Sequence[Sequence[np.ndarray]],
        arrays: Sequence[np.ndarray],
        uninitialised: np.ndarray,
    ) -> list[np.ndarray]:
        """Run the streams of ``slots``: their ``feeds`` (per stream, per input), their rows of the
        pool's state ``arrays`` and ``uninitialised`` flags; returns the bound outputs (model outputs, then
        the new states), valid until this object's next run."""
        if len(feeds) == 1:
            for buf, given in zip(self.inputs, feeds[0]):
                np.copyto(buf, given)
        else:
            for k, (buf, spec) in enumerate(zip(self.inputs, self.in_specs)):
                join_column(spec, [f[k] for f in feeds], buf)
        for buf, axis, array in zip(self.states, self.state_axes, arrays):
            array.take(slots, axis=axis, out=buf)
        for k, buf in self.flags:
            uninitialised[:, k].take(slots, out=buf)
        try:
            self.run_bound(self.raw, QUIET)
        except Exception:  # noqa: BLE001 - the general run re-runs it and reports a real error properly
            raise BoundMiss from None
        return self.outputs
