"""Convolution-1 and GroupConvolution-1 -> ONNX Conv.

OpenVINO layouts::

    data     [N, C_in, spatial...]
    Convolution weights       [C_out, C_in, k...]            (ONNX Conv W: the same)
    GroupConvolution weights  [G, C_out/G, C_in/G, k...]     (ONNX Conv W: [C_out, C_in/G, k...], group=G)
    output   [N, C_out, spatial'...]

Attributes ``strides``, ``dilations``, ``pads_begin``, ``pads_end`` (one value per spatial axis) and
``auto_pad``: ``explicit`` (or ``notset``) uses the pads, ``valid`` pads nothing, ``same_upper`` /
``same_lower`` pad to ceil(in / stride) outputs, the odd pixel at the end / the beginning, and ignore the
given pads. ONNX Conv takes the same attributes (``pads`` as begins then ends, ``auto_pad`` upper-case),
but ONNX Runtime rejects SAME padding with dilations: those get an explicit Pad computed from the run-time
input size. ONNX Runtime's CPU Conv runs float32 only: other float types are computed in float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto as T

from ..context import Context, Node
from ..kernels import computed_in
from ..registry import translator

_AUTO_PAD = ("explicit", "notset", "valid", "same_upper", "same_lower")
_CONV_KERNELS = frozenset({T.FLOAT})


@dataclass(frozen=True)
class _Window:
    """A convolution's sliding-window attributes, one value per spatial axis."""

    strides: list[int]
    dilations: list[int]
    pads: list[int]  # begins, then ends
    auto_pad: str  # OpenVINO's spelling, lower-case

    @classmethod
    def of(cls, node: Node) -> _Window:
        rank = node.input_rank(0)
        if rank < 3:
            raise node.error(f"data expected rank >= 3 ([N, C, spatial...]), got {rank}")
        spatial = rank - 2
        lists = {}
        for name, default in (("strides", 1), ("dilations", 1), ("pads_begin", 0), ("pads_end", 0)):
            values = lists[name] = node.attr_ints(name, [default] * spatial)
            if len(values) != spatial:
                raise node.error(f"attribute '{name}' expected {spatial} values (one per spatial axis), got {values}")
        auto_pad = node.attr_choice("auto_pad", _AUTO_PAD, "explicit")
        pads = lists["pads_begin"] + lists["pads_end"]
        return cls(lists["strides"], lists["dilations"], pads, auto_pad)

    @property
    def spatial(self) -> int:
        return len(self.strides)

    @property
    def same(self) -> bool:
        return self.auto_pad.startswith("same")

    def onnx_attrs(self) -> dict[str, object]:
        attrs: dict[str, object] = {"strides": self.strides, "dilations": self.dilations}
        if self.auto_pad in ("explicit", "notset"):
            attrs["pads"] = self.pads
        else:
            attrs["auto_pad"] = self.auto_pad.upper()
        return attrs


def _same_padded(node: Node, ctx: Context, window: _Window, kernel: list[int]) -> str:
    """The data zero-padded as SAME_UPPER/LOWER would, for dilated kernels (ORT's Conv rejects those).

    Per spatial axis: ``total = max((ceil(in / stride) - 1) * stride + (k - 1) * dilation + 1 - in, 0)``,
    half of it at each end and the odd one at the end (upper) or the beginning (lower).
    """
    b = ctx.b

    def i64(value: object) -> str:
        return b.const(np.asarray(value, np.int64))

    stride = i64(window.strides)
    extent = i64((np.array(kernel) - 1) * np.array(window.dilations) + 1)
    size = b.op("Shape", [node.inputs[0]], {"start": 2})
    steps = b.op("Div", [b.op("Add", [size, b.op("Sub", [stride, i64(1)])]), stride])  # ceil(in / stride)
    reach = b.op("Add", [b.op("Mul", [b.op("Sub", [steps, i64(1)]), stride]), extent])
    total = b.op("Max", [b.op("Sub", [reach, size]), i64(0)])
    half = b.op("Div", [total, i64(2)])
    rest = b.op("Sub", [total, half])
    begin, end = (half, rest) if window.auto_pad == "same_upper" else (rest, half)
    zeros = i64([0, 0])  # batch and channels
    return b.op("Pad", [node.inputs[0], b.op("Concat", [zeros, begin, zeros, end], {"axis": 0})])


def _conv(node: Node, ctx: Context, weights: str, window: _Window, kernel_from: int, group: int = 1) -> str:
    """Conv of input 0 and ``weights`` (ONNX layout); input 1's kernel dims start at ``kernel_from``."""
    etype = node.onnx_input_type(0)
    if etype not in (T.FLOAT, T.FLOAT16, T.DOUBLE):
        raise node.error(f"data expected a floating-point type, got {node.input_type(0).name}")
    data, attrs = node.inputs[0], {**window.onnx_attrs(), "group": group}
    if window.same and any(d != 1 for d in window.dilations):
        dims = (node.input_shape(1).dims or ())[kernel_from:]
        if len(dims) != window.spatial or not all(d.is_static for d in dims):
            raise node.error("auto_pad same_* with dilations needs static kernel dims")
        data = _same_padded(node, ctx, window, [d.lo for d in dims])
        attrs["auto_pad"] = "VALID"
    return computed_in(ctx, [data, weights], etype, _CONV_KERNELS, lambda v, _: ctx.b.op("Conv", v, attrs))


@translator("Convolution", 1)
def convolution_v1(node: Node, ctx: Context) -> list[str]:
    """Convolution-1 (data, weights [C_out, C_in, k...]) -> Conv; the weights keep their layout."""
    return [_conv(node, ctx, node.inputs[1], _Window.of(node), kernel_from=2)]


@translator("GroupConvolution", 1)
def group_convolution_v1(node: Node, ctx: Context) -> list[str]:
    """GroupConvolution-1 (data, weights [G, C_out/G, C_in/G, k...]) -> Reshape(weights) + Conv ``group=G``.

    The weights merge their two leading dims into ONNX's [C_out, C_in/G, k...]; depthwise convolution
    (Mamba's causal conv1d) is G = C_in = C_out with weights [C, 1, 1, k].
    """
    window = _Window.of(node)
    dims = node.input_shape(1).dims
    if dims is None or len(dims) != window.spatial + 3:
        raise node.error(f"weights expected rank {window.spatial + 3} ([G, C_out/G, C_in/G, k...])")
    if not dims[0].is_static:
        raise node.error("weights need a static group count (dim 0) for ONNX Conv's group attribute")
    b = ctx.b
    if all(d.is_static for d in dims[2:]):
        target = b.const(np.array([-1, *(d.lo for d in dims[2:])], np.int64))
    else:
        tail = b.op("Shape", [node.inputs[1]], {"start": 2})
        target = b.op("Concat", [b.const(np.array([-1], np.int64)), tail], {"axis": 0})
    weights = b.op("Reshape", [node.inputs[1], target])
    return [_conv(node, ctx, weights, window, kernel_from=3, group=dims[0].lo)]
