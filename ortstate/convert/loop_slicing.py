"""Slicing and concatenation math of TensorIterator-1 / Loop-5 port maps, written as ONNX ops.

A sliced ``<input axis=.. start=.. end=.. stride=.. part_size=..>`` feeds the body one chunk of
``part_size`` along ``axis`` per iteration. ``start``/``end`` are inclusive indices, a negative value
counting from the end (``-1`` is the last index), so the defaults ``start=0 end=-1`` cover the whole
axis; ``stride < 0`` walks the range backwards (then ``start=-1 end=0`` is the whole axis). OpenVINO
requires ``part_size == |stride|`` (non-overlapping chunks), which gives ``(hi - lo + 1) / |stride|``
iterations. ONNX ``Loop`` cannot slice, so the body slices the outer value itself with
``Slice(x, [b], [b + part_size], [axis])``, ``b = offset + iteration * stride``.

A concatenated ``<output axis=..>`` stacks the body value of every iteration (OpenVINO's order when
``stride > 0``, reversed when ``stride < 0``) and joins them along ``axis``. ONNX ``Loop`` stacks scan
outputs along a new axis 0 (``[N, d0, .., dr]``); the iteration axis is moved before ``axis`` and
merged into it with Transpose + Reshape. Its ``start``/``end`` only state the output shape to OpenVINO.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from ..errors import ConversionError
from .builder import GraphBuilder

__all__ = ["Int", "SliceRule", "concat_iterations", "dim_of", "int64_scalar", "slice_in_body"]

Int = int | str  # a known integer, or the name of an ONNX int64 scalar computed at run time
_INT64_MIN = np.iinfo(np.int64).min


@dataclass(frozen=True)
class SliceRule:
    """The slicing attributes of one port-map entry (``axis`` not yet normalised)."""

    axis: int
    start: int
    end: int
    stride: int
    part_size: int

    @classmethod
    def parse(cls, entry: Mapping[str, str], where: str) -> SliceRule | None:
        """The rule of a port-map entry, or None when it has no ``axis`` (not sliced/concatenated)."""
        if entry.get("axis") in (None, ""):
            return None
        try:
            values = {
                k: int(entry.get(k, d))
                for k, d in (("axis", "0"), ("start", "0"), ("end", "-1"), ("stride", "1"), ("part_size", "1"))
            }
        except ValueError:
            raise ConversionError(f"{where}: port_map entry {dict(entry)} has a non-integer attribute") from None
        rule = cls(**values)
        if rule.stride == 0:
            raise ConversionError(f"{where}: port_map entry {dict(entry)}: stride must not be 0")
        if rule.part_size <= 0:
            raise ConversionError(f"{where}: port_map entry {dict(entry)}: part_size must be positive")
        return rule

    def check_input(self, where: str) -> None:
        """OpenVINO slices inputs in non-overlapping chunks: ``part_size`` must equal ``|stride|``."""
        if self.part_size != abs(self.stride):
            raise ConversionError(
                f"{where}: sliced input on axis {self.axis}: expected part_size == |stride|, "
                f"got part_size={self.part_size}, stride={self.stride}"
            )

    def bounds(self, b: GraphBuilder, dim: Int, where: str) -> tuple[Int, Int]:
        """``(iterations, offset)`` over an axis of length ``dim``: iteration ``i`` reads from
        ``offset + i * stride``."""
        ints = _Ints(b)
        start, end = ints.index(self.start, dim), ints.index(self.end, dim)
        lo, hi = (start, end) if self.stride > 0 else (end, start)
        step = abs(self.stride)
        length = ints.add(ints.sub(hi, lo), 1)
        if isinstance(length, int) and (length < step or length % step):
            raise ConversionError(
                f"{where}: slicing axis {self.axis} of length {dim} from {self.start} to {self.end} "
                f"by {self.stride}: the range must hold a whole number (>= 1) of steps, got {length}"
            )
        count = ints.div(length, step)
        offset = lo if self.stride > 0 else ints.sub(ints.add(hi, 1), step)
        return count, offset


class _Ints:
    """int64 scalar arithmetic folded in Python while both operands are known."""

    def __init__(self, b: GraphBuilder) -> None:
        self.b = b

    def value(self, x: Int) -> str:
        return x if isinstance(x, str) else self.b.const(np.array(x, np.int64))

    def _op(self, op: str, x: Int, y: Int) -> str:
        return self.b.op(op, [self.value(x), self.value(y)])

    def add(self, x: Int, y: Int) -> Int:
        if isinstance(x, int) and isinstance(y, int):
            return x + y
        return x if y == 0 else self._op("Add", x, y)

    def sub(self, x: Int, y: Int) -> Int:
        if isinstance(x, int) and isinstance(y, int):
            return x - y
        return x if y == 0 else self._op("Sub", x, y)

    def mul(self, x: Int, y: Int) -> Int:
        if isinstance(x, int) and isinstance(y, int):
            return x * y
        return x if y == 1 else self._op("Mul", x, y)

    def div(self, x: Int, y: Int) -> Int:
        if isinstance(x, int) and isinstance(y, int):
            return x // y
        return x if y == 1 else self._op("Div", x, y)

    def index(self, i: int, dim: Int) -> Int:
        return i if i >= 0 else self.add(dim, i)


def dim_of(b: GraphBuilder, value: str, axis: int, known: int | None) -> Int:
    """Dim ``axis`` of ``value``: ``known`` when the IR states it, else read at run time."""
    if known is not None:
        return known
    dim = b.op("Shape", [value], {"start": axis, "end": axis + 1})
    return b.op("Squeeze", [dim, b.const(np.array([0], np.int64))])


def slice_in_body(sub: GraphBuilder, value: str, rule: SliceRule, axis: int, offset: Int, iteration: str) -> str:
    """This iteration's chunk of the outer ``value`` (``iteration``: the body's int64 iteration number)."""
    ints = _Ints(sub)
    begin = ints.add(ints.mul(iteration, rule.stride), offset)
    assert isinstance(begin, str)  # the iteration number is never known in advance
    begin = sub.op("Unsqueeze", [begin, sub.const(np.array([0], np.int64))])
    end = sub.op("Add", [begin, sub.const(np.array([rule.part_size], np.int64))])
    return sub.op("Slice", [value, begin, end, sub.const(np.array([axis], np.int64))])


def concat_iterations(
    b: GraphBuilder, stacked: str, rule: SliceRule, rank: int | None, where: str, static: list[int] | None = None
) -> str:
    """Join a scan output ``[N, *body_shape]`` along ``rule.axis`` of the body value (of rank ``rank``;
    None when unknown, which only axis 0 allows). Rank 0 body values come out as ``[N]``.

    ``static`` is the body value's shape when the IR states it: after zero iterations ONNX Runtime
    returns a scan output of shape ``[0]`` (it cannot know the body's shape), so it is reshaped first."""
    if static is not None:
        shape = b.op("Concat", [b.op("Shape", [stacked], {"end": 1}), b.const(np.array(static, np.int64))], {"axis": 0})
        stacked = b.op("Reshape", [stacked, shape], {"allowzero": 1})
    if rule.stride < 0:
        stacked = b.op("Slice", [stacked, *(b.const(np.array([v], np.int64)) for v in (-1, _INT64_MIN, 0, -1))])
    if rank == 0:
        return stacked
    axis = rule.axis
    if axis < 0:
        if rank is None:
            raise ConversionError(f"{where}: concatenation axis {axis} of a body value of unknown rank")
        axis += rank
    if rank is not None and not 0 <= axis < rank:
        raise ConversionError(f"{where}: concatenation axis {rule.axis} is out of range for rank {rank}")
    if axis > 0:
        if rank is None:
            raise ConversionError(f"{where}: concatenation axis {axis} of a body value of unknown rank")
        perm = [*range(1, axis + 1), 0, *range(axis + 1, rank + 1)]
        stacked = b.op("Transpose", [stacked], {"perm": perm})
    # [.., N, d_axis, ..] -> [.., N * d_axis, ..]; written out in full so that zero dims stay zero.
    parts = [b.op("Shape", [stacked], {"end": axis})] if axis > 0 else []
    merged = b.op(
        "Mul",
        [
            b.op("Shape", [stacked], {"start": axis, "end": axis + 1}),
            b.op("Shape", [stacked], {"start": axis + 1, "end": axis + 2}),
        ],
    )
    parts += [merged, b.op("Shape", [stacked], {"start": axis + 2})]
    shape = b.op("Concat", parts, {"axis": 0})
    return b.op("Reshape", [stacked, shape], {"allowzero": 1})


def int64_scalar(b: GraphBuilder, value: str, etype: str) -> str:
    """``value`` (an integer scalar or 1-element tensor of OpenVINO type ``etype``) as an int64 scalar."""
    if etype != "i64":
        value = b.op("Cast", [value], {"to": TensorProto.INT64})
    return b.op("Reshape", [value, b.const(np.array([], np.int64))])
