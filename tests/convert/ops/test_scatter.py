"""``convert/ops/scatter.py`` (ScatterUpdate, ScatterNDUpdate, ScatterElementsUpdate) against OpenVINO."""

import numpy as np
import openvino.opset3 as ops3
import openvino.opset4 as ops4
import openvino.opset12 as ops12
import openvino.opset13 as ops
import openvino.opset15 as ops15
import pytest
from oracle import assert_layer, check_model, single_op, values

RNG = np.random.default_rng(0)


# -- Scatter -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("axis", "indices"), [(0, [3, 1]), (1, [[2], [0]]), (2, [4]), (-1, [[0, 3], [1, 2]]), (-3, [0])]
)
@pytest.mark.parametrize(("dtype", "index_type"), [(np.float32, np.int64), (np.int32, np.int32), (np.int64, np.int32)])
def test_scatter_update(tmp_path, axis, indices, dtype, index_type):
    """updates are shaped data[:axis] + indices.shape + data[axis + 1:] (OpenVINO's CPU plugin rejects scalar
    indices, so those are not tested)."""
    data_shape = (4, 3, 5)
    where = np.array(indices, index_type)
    norm = axis % 3
    updates_shape = data_shape[:norm] + where.shape + data_shape[norm + 1 :]
    data = ops.parameter(list(data_shape), dtype, name="data")
    idx = ops.parameter(list(where.shape), index_type, name="indices")
    upd = ops.parameter(list(updates_shape), dtype, name="updates")
    xml = single_op(tmp_path, ops3.scatter_update(data, idx, upd, ops.constant(np.int64(axis))), [data, idx, upd])
    assert_layer(xml, "ScatterUpdate", "opset3")
    check_model(xml, {"data": values(data_shape, dtype), "indices": where, "updates": values(updates_shape, dtype)})


ND_INDICES = {  # unique points for "none"; repeated ones for the reductions
    "rows": [[3], [1]],
    "cells": [[0, 2], [3, 1], [1, 1]],
    "elements": [[0, 2, 4], [3, 0, 1]],
    "repeated_rows": [[1], [1], [2]],
    "repeated_cells": [[0, 2], [0, 2], [-1, 1]],
}


@pytest.mark.parametrize(
    ("version", "reduction", "points"),
    [(v, "none", p) for v in (3, 15) for p in ND_INDICES if not p.startswith("repeated")]  # else undefined
    + [(15, r, p) for r in ("sum", "sub", "prod", "min", "max") for p in ND_INDICES],
)
@pytest.mark.parametrize(("dtype", "index_type"), [(np.float32, np.int64), (np.int32, np.int32), (np.int64, np.int64)])
def test_scatter_nd_update(tmp_path, version, reduction, points, dtype, index_type):
    where = np.array(ND_INDICES[points], index_type)
    data_shape = (4, 3, 5)
    updates_shape = where.shape[:-1] + data_shape[where.shape[-1] :]
    data = ops.parameter(list(data_shape), dtype, name="data")
    idx = ops.parameter(list(where.shape), index_type, name="indices")
    upd = ops.parameter(list(updates_shape), dtype, name="updates")
    if version == 3:
        out = ops4.scatter_nd_update(data, idx, upd)
    else:
        out = ops15.scatter_nd_update(data, idx, upd, reduction)
    xml = single_op(tmp_path, out, [data, idx, upd])
    assert_layer(xml, "ScatterNDUpdate", "opset4" if version == 3 else "opset15")
    small = (RNG.integers(-3, 4, updates_shape)).astype(dtype)  # small integers keep prod exact
    check_model(xml, {"data": RNG.integers(-3, 4, data_shape).astype(dtype), "indices": where, "updates": small})


@pytest.mark.parametrize(
    ("version", "reduction", "use_init_val"),
    [(3, "none", True), (12, "none", True)]
    + [(12, r, init) for r in ("sum", "prod", "min", "max", "mean") for init in (True, False)],
)
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize(("dtype", "index_type"), [(np.float32, np.int64), (np.int32, np.int32), (np.int64, np.int64)])
def test_scatter_elements_update(tmp_path, version, reduction, use_init_val, axis, dtype, index_type):
    """Repeated indices for the reductions (each element of updates picks a place along axis).

    Integer means are rounded down, as the spec and OpenVINO's reference implementation do; its CPU plugin
    rounds toward zero instead, so those cases are given as constants, which OpenVINO folds by the reference.
    """
    data_shape, updates_shape = (3, 4), (2, 3)
    dim = data_shape[axis]
    if reduction == "none":  # distinct places along axis, so no element is written twice
        if axis == 0:
            where = np.stack([RNG.permutation(dim)[:2] for _ in range(3)], axis=1)
        else:
            where = np.stack([RNG.permutation(dim)[:3] for _ in range(2)])
        where = where - dim * (RNG.random(where.shape) > 0.5) if version == 12 else where  # negative counts back
    else:
        where = RNG.integers(-dim, dim, updates_shape)
    feeds = {
        "data": RNG.integers(-5, 6, data_shape).astype(dtype),
        "indices": where.astype(index_type),
        "updates": RNG.integers(-5, 6, updates_shape).astype(dtype),
    }
    folded = reduction == "mean" and dtype is not np.float32
    if folded:
        inputs = [ops.constant(v) for v in feeds.values()]
        params = [ops.parameter([1], np.float32, name="like")]  # a model needs a Parameter
        feeds = {"like": np.zeros(1, np.float32)}
    else:
        inputs = params = [ops.parameter(list(v.shape), v.dtype, name=k) for k, v in feeds.items()]
    axis_node = ops.constant(np.int64(axis))
    if version == 3:
        out = ops3.scatter_elements_update(*inputs, axis_node)
    else:
        out = ops12.scatter_elements_update(*inputs, axis_node, reduction, use_init_val)
    xml = single_op(tmp_path, [out, *params] if folded else out, params)
    assert_layer(xml, "ScatterElementsUpdate", f"opset{version}")
    check_model(xml, feeds)
