"""``convert/ops/gather.py`` (Gather, GatherND, GatherElements) against OpenVINO."""

import numpy as np
import openvino.opset1 as ops1
import openvino.opset5 as ops5
import openvino.opset7 as ops7
import openvino.opset8 as ops8
import openvino.opset13 as ops
import pytest
from oracle import assert_layer, check_model, op_types, single_op, values

RNG = np.random.default_rng(0)


# -- Gather ------------------------------------------------------------------------------------
GATHER_DATA = (2, 3, 5, 4)


GATHER_CASES = [  # batch_dims, axis, indices shape
    (0, 0, (3,)),
    (0, 2, (2, 3)),
    (0, -1, ()),
    (1, 1, (2, 4)),
    (1, 2, (2, 3)),
    (1, 3, (2, 2, 3)),
    (2, 2, (2, 3, 6)),
    (2, 3, (2, 3, 2)),
    (-1, 2, (2, 3, 4)),
    (-1, 1, (2, 7)),
]


@pytest.mark.parametrize(
    ("version", "batch_dims", "axis", "indices_shape"),
    [(v, *case) for v in (1, 7, 8) for case in GATHER_CASES if v > 1 or case[0] == 0],  # Gather-1: no batch_dims
)
@pytest.mark.parametrize(("dtype", "index_type"), [(np.float32, np.int64), (np.int32, np.int32), (np.int64, np.int32)])
def test_gather(tmp_path, version, batch_dims, axis, indices_shape, dtype, index_type):
    data = ops.parameter(list(GATHER_DATA), dtype, name="data")
    indices = ops.parameter(list(indices_shape), index_type, name="indices")
    if version == 1:
        out = ops1.gather(data, indices, np.int64(axis))
    else:
        out = {7: ops7, 8: ops8}[version].gather(data, indices, np.int64(axis), batch_dims)
    xml = single_op(tmp_path, out, [data, indices])
    assert_layer(xml, "Gather", f"opset{version}")
    dim = GATHER_DATA[axis]
    low = -dim if version == 8 else 0  # negative indices count from the end only in Gather-8
    check_model(
        xml, {"data": values(GATHER_DATA, dtype), "indices": RNG.integers(low, dim, indices_shape).astype(index_type)}
    )


@pytest.mark.parametrize(("batch_dims", "axis"), [(0, 0), (0, 1), (1, 1), (1, 2)])
def test_gather_v8_out_of_range_gives_zeros(tmp_path, batch_dims, axis):
    data = ops.parameter([2, 5, 3], np.float32, name="data")
    indices = ops.parameter([2, 4], np.int64, name="indices")
    xml = single_op(tmp_path, ops8.gather(data, indices, np.int64(axis), batch_dims), [data, indices])
    dim = 5 if axis == 1 else 2
    bad = np.array([[0, dim, -dim - 1, -1], [100, -100, dim - 1, -dim]], np.int64)
    check_model(xml, {"data": values((2, 5, 3), np.float32), "indices": bad})


@pytest.mark.parametrize("doubled", [True, False], ids=["doubled-table", "general-guard"])
@pytest.mark.parametrize(
    ("axis", "dtype", "compress"), [(0, np.float32, False), (1, np.int32, False), (-1, np.float32, True)]
)
def test_gather_v8_on_constant_data(tmp_path, monkeypatch, doubled, axis, dtype, compress):
    """An embedding table: constant data gets the cheap guard (data stored twice plus a zero slice,
    Clip on the shifted index); too large a table the general one. Same answers either way: negative
    indices count from the end, out-of-range ones give zeros."""
    from ortstate.convert.ops import gather as gather_ops

    if not doubled:
        monkeypatch.setattr(gather_ops, "DOUBLED_LIMIT", 0)
    table = ops.constant(values((5, 4, 3), dtype))
    indices = ops.parameter([2, 5], np.int64, name="indices")
    xml = single_op(tmp_path, ops8.gather(table, indices, np.int64(axis)), [indices], compress=compress)
    dim = (5, 4, 3)[axis]
    bad = np.array([[0, dim - 1, -1, -dim, dim], [-dim - 1, 1000, -1000, 1, -2]], np.int64)
    check_model(xml, {"indices": bad})
    kinds = op_types(xml)
    assert ("Clip" in kinds and "Where" not in kinds) == doubled, kinds


def test_gather_v8_constant_indices_on_shape(tmp_path):
    """The LLM shape pattern Gather(ShapeOf(x), [0, 2]): constant, in range, so no range check is emitted."""
    x = ops.parameter([-1, -1, 8], np.float32, name="x")
    out = ops8.gather(ops.shape_of(x), ops.constant(np.array([0, -1], np.int64)), np.int64(0))
    xml = single_op(tmp_path, out, [x])
    assert op_types(xml) == ["Shape", "Gather"]
    check_model(xml, {"x": values((3, 2, 8), np.float32)})


@pytest.mark.parametrize("version", [5, 8])
@pytest.mark.parametrize(
    ("data_shape", "indices_shape", "batch_dims"),
    [((4, 3), (5, 2), 0), ((4, 3, 2), (2, 1), 0), ((2, 3, 4), (2, 5, 1), 1), ((2, 3, 4, 5), (2, 3, 2, 1), 2),
     ((2, 3, 4, 5), (2, 3, 2), 2), ((2, 3, 4), (2, 2), 1)],
)  # fmt: skip
@pytest.mark.parametrize(("dtype", "index_type"), [(np.float32, np.int64), (np.int32, np.int32), (np.int64, np.int64)])
def test_gather_nd(tmp_path, version, data_shape, indices_shape, batch_dims, dtype, index_type):
    """GatherND-5 flattens the batch dims of its output; GatherND-8 keeps them."""
    data = ops.parameter(list(data_shape), dtype, name="data")
    indices = ops.parameter(list(indices_shape), index_type, name="indices")
    out = {5: ops5, 8: ops8}[version].gather_nd(data, indices, batch_dims)
    xml = single_op(tmp_path, out, [data, indices])
    assert_layer(xml, "GatherND", f"opset{version}")
    depth = indices_shape[-1]
    limits = np.array(data_shape[batch_dims : batch_dims + depth])
    points = (RNG.random(indices_shape) * limits).astype(index_type)
    check_model(xml, {"data": values(data_shape, dtype), "indices": points})


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize(("dtype", "index_type"), [(np.float32, np.int64), (np.int32, np.int32), (np.int64, np.int64)])
def test_gather_elements(tmp_path, axis, dtype, index_type):
    data = ops.parameter([3, 4, 5], dtype, name="data")
    shape = [3, 4, 5]
    shape[axis] = 2
    indices = ops.parameter(shape, index_type, name="indices")
    xml = single_op(tmp_path, ops.gather_elements(data, indices, axis), [data, indices])
    assert_layer(xml, "GatherElements", "opset6")
    dim = [3, 4, 5][axis]
    check_model(xml, {"data": values((3, 4, 5), dtype), "indices": RNG.integers(-dim, dim, shape).astype(index_type)})
