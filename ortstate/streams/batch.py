"""One batched run of some streams, the way that fits: a :class:`~.plan.Plan` for a step seen
before, bound buffers for a batch shape run before (:mod:`.bound`), else ``InferenceSession.run``
with every result checked (the run whose shapes are bound for the next time)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from time import perf_counter_ns
from typing import Any

import numpy as np

from ..errors import OrtStateError, RunError
from ..runtime import LoadedModel
from ..runtime.runners import ort_error
from .bound import Bound, BoundMiss
from .layout import Layout, join_column
from .plan import Plan, split_rows
from .recent import Recent
from .slots import SlotStates
from .stats import Recorder

__all__ = ["BatchRunner"]

PLANS_KEPT = 8  # plans of the batches of streams stepped most recently
BOUND_KEPT = 8  # batch shapes kept bound: the most recently run

Outputs = dict[str, np.ndarray]


# streams grouped by their feeds' shapes and shared values: (shapes, shared) -> [(stream id, arrays)]
Groups = dict[tuple, list[tuple[int, list[np.ndarray]]]]


class BatchRunner:
    """Runs batches of the streams in ``states``' slots through ``model`` (laid out as ``layout``),
    counting each run in ``record``."""

    def __init__(self, model: LoadedModel, layout: Layout, states: SlotStates, record: Recorder) -> None:
        self.model, self.layout, self.states, self.record = model, layout, states, record
        # dropped all at once when any stream moves slot (closed, parked, resumed)
        self.plans: Recent[Plan] = Recent(PLANS_KEPT)
        self._bound: Recent[Bound | None] = Recent(BOUND_KEPT)
        self._fetch = [*model.output_names, *(s.var.state_output or "" for s in layout.states)]
        self._flagged = [(k, s.flag) for k, s in enumerate(layout.states) if s.flag]
        self._axes = [layout.outputs[n] for n in model.output_names]

    def planned(self, feeds: Mapping[Any, Any]) -> tuple[dict[Any, Any] | None, Any]:
        """Step ``feeds``' streams by the plan of this very batch, committed: their outputs and the
        index of their slots; (None, None) where there is no plan or it does not fit (nothing changed)."""
        key = tuple(feeds)
        plan = self.plans.get(key)
        if plan is None:
            return None, None
        results = plan.run(feeds, self.record)
        if results is None:
            self.plans.drop(key)
            return None, None
        return results, plan.rows.index

    def plan(self, sids: tuple, slots: np.ndarray, shapes: tuple) -> None:
        """Plan the step of ``sids`` (in ``slots``, with feeds of ``shapes``) just run, where its
        batch shape is bound."""
        bound = self._bound.get((len(slots), shapes))
        if bound is not None:
            self.plans.put(sids, Plan(sids, slots, shapes, bound, self.states, self.layout, self.model.output_names))

    def run_groups(
        self, groups: Groups, slot_of: Callable[[int], int], raising: bool, failed: dict[int, OrtStateError]
    ) -> tuple[dict[int, Any], list[tuple[np.ndarray, list]]]:
        """One run per group of streams whose feeds have one shape (and one shared value): the
        streams' outputs, and per run its slots and the new states to scatter once every run went
        through. A failed run raises (``raising``, naming its streams) or puts its streams' error in
        ``failed``."""
        results: dict[int, Any] = {}
        staged = []
        # runs of one batch shape in one step (their shared values differ) write the same bound buffers
        keys = Counter((len(part), shapes) for (shapes, _), part in groups.items())
        for (shapes, _), part in groups.items():
            slots = np.fromiter((slot_of(sid) for sid, _ in part), np.intp, len(part))
            try:
                outs, states = self.run(slots, [a for _, a in part], (len(part), shapes))
            except RunError as exc:
                if raising:
                    raise RunError(f"streams {', '.join(str(s) for s, _ in part)}: {exc}") from None
                failed.update((sid, exc) for sid, _ in part)
                continue
            if keys[len(part), shapes] > 1:
                states = [s.copy() for s in states]
            staged.append((slots, states))
            results.update(zip((sid for sid, _ in part), outs))
        return results, staged

    def run(self, slots: np.ndarray, feeds: list[list[np.ndarray]], key: tuple) -> tuple[list[Outputs], list]:
        """One batched run of the streams in ``slots`` (``key``: the batch's size and feed shapes): each
        stream's outputs, and the new states (valid until the next run of the same key), uncommitted.

        Raises:
            RunError: the run failed, or wrote states of other shapes than the pool holds.
        """
        model, count = self.model, len(slots)
        n_out = len(model.output_names)
        bound = self._bound.get(key)
        results = None
        start = perf_counter_ns()
        if bound is not None:
            try:
                results = bound.run(slots, feeds, self.states.arrays, self.states.uninitialised)
            except BoundMiss:
                self._bound.drop(key)
        if results is None:
            results = self._general(slots, feeds, key)
            outputs = results[:n_out]
        else:
            outputs = [o.copy() for o in results[:n_out]]  # the caller's, apart from the bound buffers
        self.record.run(count, (perf_counter_ns() - start) * 1e-9)
        states = results[n_out:]
        if count == 1:
            return [dict(zip(model.output_names, outputs))], states
        parts = [split_rows(o, a) for o, a in zip(outputs, self._axes)]
        return [dict(zip(model.output_names, row)) for row in zip(*parts)], states

    def _general(self, slots: np.ndarray, feeds: list[list[np.ndarray]], key: tuple) -> list[np.ndarray]:
        """A run through ``InferenceSession.run``, checked; its shapes are bound for the next run of ``key``."""
        layout, count = self.layout, len(slots)
        full: dict[str, Any] = {}
        for k, spec in enumerate(layout.inputs):
            full[spec.name] = feeds[0][k] if count == 1 else join_column(spec, [f[k] for f in feeds])
        for spec, value in zip(layout.states, self.states.gather(slots)):
            full[spec.var.state_input or ""] = value
        for k, flag in self._flagged:  # each row computes its init on its stream's first step
            full[flag] = self.states.uninitialised[slots, k]
        try:
            results = self.model.fast.run(self._fetch, full, None)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ort_error(exc) from None
        for spec, value in zip(layout.states, results[len(self.model.output_names) :]):
            want = spec.shape[: spec.axis] + (count,) + spec.shape[spec.axis + 1 :]
            if value.shape != want or value.dtype != spec.carrier:
                raise RunError(
                    f"variable '{spec.var.id}': the run wrote {value.dtype} {list(value.shape)}, the pool holds "
                    f"{spec.carrier} {list(want)}; no stream was changed"
                )
        if key not in self._bound:
            try:
                self._bound.put(key, Bound(self.model, layout, full, results))
            except BoundMiss:
                self._bound.put(key, None)
        return results
