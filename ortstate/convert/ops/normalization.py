"""MVN-1 and MVN-6 (mean-variance normalisation) composed from ReduceMean, Sub, Sqrt and Div.

OpenVINO::

    d = x - ReduceMean(x, axes, keep_dims=true)
    MVN-6: normalize_variance=false -> d
           eps_mode=inside_sqrt  -> d / Sqrt(ReduceMean(d * d, axes) + eps)
           eps_mode=outside_sqrt -> d / (Sqrt(ReduceMean(d * d, axes)) + eps)
    MVN-1: the same with eps inside the sqrt; axes are ``reduction_axes``, else [1, ..., rank-1] when
           ``across_channels`` and [2, ..., rank-1] when not.

ONNX has no MVN with an epsilon choice (MeanVarianceNormalization fixes eps=1e-9 and the axes' meaning;
LayerNormalization wants static trailing axes and computes the variance as E[x^2] - E[x]^2), so the
formula is written out. ReduceMean-18 takes the axes as an input, so MVN-6 axes may be computed at run time.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as T

from ..context import Context, Node
from ..dtypes import numpy_type
from ..int64 import int64_vector
from ..registry import translator

_FLOATS = (T.FLOAT, T.FLOAT16, T.DOUBLE)


def _mvn(node: Node, ctx: Context, axes: str, normalize_variance: bool, eps: float, inside_sqrt: bool) -> str:
    etype = node.onnx_input_type(0)
    if etype not in _FLOATS:
        raise node.error(f"data expected a floating-point type, got {node.input_type(0).name}")
    b, x = ctx.b, node.inputs[0]
    centred = b.op("Sub", [x, b.op("ReduceMean", [x, axes], {"keepdims": 1})])
    if not normalize_variance:
        return centred
    variance = b.op("ReduceMean", [b.op("Mul", [centred, centred]), axes], {"keepdims": 1})
    epsilon = b.const(np.asarray(eps, numpy_type(etype)))
    if inside_sqrt:
        scale = b.op("Sqrt", [b.op("Add", [variance, epsilon])])
    else:
        scale = b.op("Add", [b.op("Sqrt", [variance]), epsilon])
    return b.op("Div", [centred, scale])


@translator("MVN", 1)
def mvn_v1(node: Node, ctx: Context) -> list[str]:
    """MVN-1 (attributes ``reduction_axes`` or ``across_channels``, ``normalize_variance``, ``eps``)."""
    if node.attr("reduction_axes", None) is not None:
        axes = node.attr_ints("reduction_axes")
    else:
        first = 1 if node.attr_bool("across_channels", False) else 2
        axes = list(range(first, node.input_rank(0)))
    normalize_variance = node.attr_bool("normalize_variance", False)
    eps = node.attr_float("eps")
    return [_mvn(node, ctx, ctx.b.const(np.array(axes, np.int64)), normalize_variance, eps, inside_sqrt=True)]


@translator("MVN", 6)
def mvn_v6(node: Node, ctx: Context) -> list[str]:
    """MVN-6 (data, axes; ``normalize_variance``, ``eps``, ``eps_mode``)."""
    inside = node.attr_choice("eps_mode", ("inside_sqrt", "outside_sqrt")) == "inside_sqrt"
    normalize_variance = node.attr_bool("normalize_variance")
    eps = node.attr_float("eps")
    return [_mvn(node, ctx, int64_vector(node, ctx, 1), normalize_variance, eps, inside_sqrt=inside)]
