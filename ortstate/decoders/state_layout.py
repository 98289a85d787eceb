"""How a decoder's variables follow its rows and tokens, read from its graph: what beam search and
padding may rely on.

optimum-intel's stateful exports read every KV cache through ``Gather(state, beam_idx, axis 0)``:
the caller picks, each step, which row of the cache each new row continues, and the model reorders
(or repeats) its own cache; nothing is copied outside it. Whether that holds is a property of the
graph, not of a model family, so it is read here, variable by variable:

- *reordered*: the ReadValue's value goes through a Gather on axis 0 whose indices are the
  ``beam_idx`` input (Converts allowed on the way);
- *static*: the Assign writes back the value read (Whisper's and T5's cross-attention keys/values,
  computed once from the encoder output): the same for every beam of a prompt;
- *cache*: the Assign writes a Concat of the value read and the new step's part: an attention
  cache, which an attention mask can hide positions of (left padding), and whose first positions
  (along the Concat's axis) are what the first tokens alone make (a prefix to keep, cut there);
- anything else is *recurrent* (an SSM or convolution state): every token fed flows into it, pad
  tokens included.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import Graph, Layer

__all__ = ["StateLayout", "state_layout"]

_PASS = frozenset({"Convert"})


@dataclass(frozen=True)
class StateLayout:
    """The decoder's variables by how they follow rows and tokens (ids sorted)."""

    variables: tuple[str, ...] = ()
    reordered: tuple[str, ...] = ()
    static: tuple[str, ...] = ()
    caches: tuple[str, ...] = ()
    cache_axes: tuple[int, ...] = ()  # each cache's positions axis (its Concat's), as ``caches``

    @property
    def recurrent(self) -> tuple[str, ...]:
        return tuple(v for v in self.variables if v not in self.caches and v not in self.static)

    def beam_problem(self) -> str | None:
        """Why beam search cannot run on this model, or None when it can."""
        if not self.variables:
            return "the decoder's variables are unknown (build the Generator with from_dir)"
        stuck = [v for v in self.variables if v not in self.reordered and v not in self.static]
        if stuck:
            return (
                f"variable(s) {_some(stuck)} are not read through Gather(state, beam_idx), so the model "
                "cannot reorder them between beams"
            )
        return None

    @property
    def expands_by_beam_idx(self) -> bool:
        """Every variable is reordered by ``beam_idx``: one prefill row per prompt, then ``beam_idx``
        repeats each row for its beams (what optimum-intel does); else every beam is prefilled."""
        return bool(self.variables) and set(self.reordered) == set(self.variables)

    def cut_problem(self) -> str | None:
        """Why the state cannot be cut to its first positions (a prompt's start), or None."""
        if not self.variables or len(self.cache_axes) != len(self.caches):
            return "the decoder's variables are unknown (build the Generator with from_dir)"
        others = [v for v in self.variables if v not in self.caches]
        if others:
            return f"its variable(s) {_some(others)} are not attention caches, a position a token"
        return None

    def padding_problem(self) -> str | None:
        """Why pad tokens fed to this model would change its state, or None when a mask hides them."""
        if not self.variables:
            return "the decoder's variables are unknown (build the Generator with from_dir)"
        if self.recurrent:
            return (
                f"its variable(s) {_some(self.recurrent)} are recurrent states (not attention caches) "
                "that would take in the pad tokens"
            )
        return None


def _some(names: list[str] | tuple[str, ...], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _source(graph: Graph, layer: Layer, index: int) -> Layer | None:
    """The layer feeding ``layer``'s input ``index``, looking through Converts."""
    try:
        src, _ = graph.producer(layer, index)
        while src.type in _PASS:
            src, _ = graph.producer(src, 0)
    except (IndexError, KeyError):
        return None
    return src


def _readers(graph: Graph, layer: Layer) -> list[tuple[Layer, int]]:
    """Consumers of ``layer``'s value, looking through Converts."""
    out, frontier = [], [layer]
    while frontier:
        current = frontier.pop()
        for consumer, index in graph.consumers(current, 0) if current.outputs else ():
            if consumer.type in _PASS:
                frontier.append(consumer)
            else:
                out.append((consumer, index))
    return out


def _axis_zero(graph: Graph, gather: Layer) -> bool:
    if len(gather.inputs) < 3:
        return False
    axis_layer = _source(graph, gather, 2)
    if axis_layer is None or axis_layer.type != "Const":
        return False
    try:
        return int(np.asarray(graph.constant(axis_layer)).reshape(-1)[0]) == 0
    except (KeyError, IndexError, ValueError):
        return False


def state_layout(graph: Graph) -> StateLayout:
    """Sort the top-level variables of a decoder's graph (see the module docstring)."""
    beam = next((p for p in graph.parameters if p.tensor_name() == "beam_idx"), None)
    reads = {r.attrs.get("variable_id", r.name): r for r in graph.of_type("ReadValue")}
    assigns = {a.attrs.get("variable_id", a.name): a for a in graph.of_type("Assign")}
    reordered, static, caches = [], [], {}
    for vid, read in reads.items():
        readers = _readers(graph, read)
        gathers = [g for g, i in readers if g.type == "Gather" and i == 0]
        if (
            beam is not None
            and gathers
            and all(
                (src := _source(graph, g, 1)) is not None and src.id == beam.id and _axis_zero(graph, g)
                for g in gathers
            )
        ):
            if len(gathers) == len(readers):
                reordered.append(vid)
        assign = assigns.get(vid)
        written = _source(graph, assign, 0) if assign is not None else None
        if written is None:
            continue
        if written.id == read.id:
            static.append(vid)
        elif written.type == "Concat":
            parts = [_source(graph, written, i) for i in range(len(written.inputs))]
            fed = {p.id for p in parts if p is not None}
            if read.id in fed or any(g.id in fed for g in gathers):
                caches[vid] = int(written.attrs.get("axis", 0))
    cached = sorted(caches)
    return StateLayout(
        tuple(sorted(reads)),
        tuple(sorted(reordered)),
        tuple(sorted(static)),
        tuple(cached),
        tuple(caches[v] for v in cached),
    )
