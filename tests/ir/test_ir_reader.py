"""read_ir against OpenVINO: models built with openvino.opset13, saved, read by both, compared."""

from __future__ import annotations

import mmap
import re
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest
from oracle import ov_request, ov_run

from ortstate.errors import IRError
from ortstate.ir import ELEMENT_TYPES, Dim, Graph, Layer, PartialShape, parse_partial_shape, read_ir

CORE = ov.Core()
RNG = np.random.default_rng(7)

# Value ranges each integer type can hold; the sub-byte ones exercise every bit of their packing.
INT_RANGES = {
    "u1": (0, 2), "u2": (0, 4), "u3": (0, 8), "u4": (0, 16), "u6": (0, 64), "i4": (-8, 8),
    "u8": (0, 256), "i8": (-128, 128), "u16": (0, 65536), "i16": (-32768, 32768),
    "u32": (0, 2**31), "i32": (-(2**31), 2**31), "u64": (0, 2**31), "i64": (-(2**31), 2**31),
}  # fmt: skip
FLOAT_TYPES = ["f64", "f32", "f16", "bf16", "f8e4m3", "f8e5m2", "f8e8m0", "f4e2m1", "nf4"]
ALL_TYPES = [*FLOAT_TYPES, *INT_RANGES, "boolean"]


def save(model: ov.Model, tmp: Path, compress: bool = False, name: str = "model") -> Path:
    xml = tmp / f"{name}.xml"
    ov.save_model(model, str(xml), compress_to_fp16=compress)
    return xml


def ov_outputs(xml: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """OpenVINO's outputs, computed in f32 (its default precision is bf16 on CPUs with bf16 units)."""
    return ov_run(ov_request(xml), feeds)


def only(graph: Graph, op_type: str) -> Layer:
    layers = graph.of_type(op_type)
    assert len(layers) == 1, f"{len(layers)} {op_type} layers"
    return layers[0]


def values_for(name: str, shape: tuple[int, ...]) -> np.ndarray:
    if name == "boolean":
        return RNG.integers(0, 2, shape).astype(bool)
    if name in INT_RANGES:
        return RNG.integers(*INT_RANGES[name], shape)
    scale = {"f4e2m1": 3.0, "nf4": 0.5, "f8e8m0": 100.0}.get(name, 10.0)
    values = RNG.standard_normal(shape) * scale
    return np.abs(values) if name == "f8e8m0" else values


@pytest.mark.parametrize("name", ALL_TYPES)
@pytest.mark.parametrize("shape", [(3, 7), (1,), ()], ids=["3x7", "1", "scalar"])
def test_element_type_decodes_as_openvino_converts(tmp_path: Path, name: str, shape: tuple[int, ...]) -> None:
    """A Const of every element type decodes to what OpenVINO's Convert(const -> f32/i32) computes.

    21 values leave every packing (8 a byte, 8 in 3 bytes, 4 in 3 bytes, ...) with a partial group.
    """
    etype = getattr(ov.Type, name)
    const = ops.constant(values_for(name, shape), dtype=etype)
    target = np.float32 if etype.is_real() or name == "nf4" else np.int32
    x = ops.parameter([1], np.float32, name="x")
    model = ov.Model([ops.result(ops.convert(const, target)), ops.result(x)], [x], "m")
    xml = save(model, tmp_path)
    assert f'element_type="{name}"' in xml.read_text()

    graph = read_ir(xml)
    layer = only(graph, "Const")
    value = graph.constant(layer)
    assert layer.outputs[0].element_type is ELEMENT_TYPES[name]
    assert value.shape == shape
    assert value.dtype == ELEMENT_TYPES[name].dtype
    assert not value.flags.writeable
    want = ov_outputs(xml, {"x": np.zeros(1, np.float32)})[0]
    np.testing.assert_array_equal(value.astype(target), want, err_msg=f"{name} decoded != OpenVINO Convert")
    if ELEMENT_TYPES[name].bits >= 8:
        ov_const = next(op for op in CORE.read_model(str(xml)).get_ordered_ops() if op.get_type_name() == "Constant")
        assert value.tobytes() == np.ascontiguousarray(ov_const.get_data()).tobytes()


def test_string_constant(tmp_path: Path) -> None:
    strings = np.array([["ab", ""], ["héllo, wörld", "日本"]])
    x = ops.parameter([1], np.float32, name="x")
    model = ov.Model([ops.result(ov.op.Constant(ov.Tensor(strings))), ops.result(x)], [x], "m")
    xml = save(model, tmp_path)
    graph = read_ir(xml)
    value = graph.constant(only(graph, "Const"))
    assert value.dtype == object and value.shape == (2, 2)
    ov_const = next(op for op in CORE.read_model(str(xml)).get_ordered_ops() if op.get_type_name() == "Constant")
    assert value.tolist() == ov_const.get_tensor_view().str_data.tolist() == strings.tolist()


@pytest.mark.parametrize("size", ["1", "0"])
def test_empty_constant(tmp_path: Path, size: str) -> None:
    """ov.save_model writes an empty Const with size="1"; size="0" is read the same."""
    x = ops.parameter([2, 3], np.float32, name="x")
    out = ops.concat([x, ops.constant(np.zeros((0, 3), np.float32))], 0)
    xml = save(ov.Model([ops.result(out)], [x], "m"), tmp_path)
    text = xml.read_text()
    assert re.search(r'shape="0, 3" offset="\d+" size="1"', text)
    xml.write_text(re.sub(r'(shape="0, 3" offset="\d+") size="1"', rf'\1 size="{size}"', text))
    graph = read_ir(xml)
    value = graph.constant(only(graph, "Const"))
    assert value.shape == (0, 3) and value.dtype == np.float32


@pytest.mark.parametrize("compress", [False, True], ids=["f32", "f16-compressed"])
def test_weights_as_save_model_writes_them(tmp_path: Path, compress: bool) -> None:
    """By default ov.save_model stores f32 weights as Const f16 + Convert marked 'decompression'."""
    weights = RNG.standard_normal((4, 5)).astype(np.float32)
    x = ops.parameter([3, 4], np.float32, name="x")
    xml = save(ov.Model([ops.result(ops.matmul(x, ops.constant(weights), False, False))], [x], "m"), tmp_path, compress)
    graph = read_ir(xml)
    const = only(graph, "Const")
    ov_const = next(op for op in CORE.read_model(str(xml)).get_ordered_ops() if op.get_type_name() == "Constant")
    np.testing.assert_array_equal(graph.constant(const), ov_const.get_data())
    if not compress:
        np.testing.assert_array_equal(graph.constant(const), weights)
        assert not graph.of_type("Convert")
        return
    assert const.attrs["element_type"] == "f16" and const.attrs["shape"] == "4, 5"
    convert = only(graph, "Convert")
    assert convert.attrs["destination_type"] == "f32"
    assert "decompression" in convert.rt_info
    assert graph.producer(convert, 0) == (const, const.outputs[0])
    assert graph.consumers(const, 0) == [(convert, 0)]
    np.testing.assert_allclose(graph.constant(const).astype(np.float32), weights, rtol=1e-3, atol=1e-3)


SPELLINGS = ["?", "-1", "1..10", "..10", "3..", "", "...", "2,3", "2, 3", "1,?,3..,..5,2..7", "0", "0,3", "[1,2]"]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_partial_shape_spellings(tmp_path: Path, spelling: str) -> None:
    """Every spelling parses as OpenVINO parses it, and survives a Parameter round trip."""
    ov_shape = ov.PartialShape(spelling) if spelling else ov.PartialShape([])
    ours = parse_partial_shape(spelling)
    want = "[...]" if ov_shape.rank.is_dynamic else str(ov_shape)
    assert ("[...]" if ours.rank is None else str(ours)) == want

    x = ops.parameter(ov_shape, np.float32, name="x")
    xml = save(ov.Model([ops.result(ops.relu(x))], [x], "m"), tmp_path)
    graph = read_ir(xml)
    param = graph.parameters[0]
    declared = parse_partial_shape(param.attrs["shape"])
    assert declared == ours
    assert str(CORE.read_model(str(xml)).inputs[0].partial_shape) == want
    # Ports write no dims for a dynamic rank and -1 for any non-static dim.
    port = param.outputs[0].shape
    assert port.to_list() == ([] if ours.rank is None else ours.to_list())


@pytest.mark.parametrize(
    ("text", "dims"),
    [
        ("?", [Dim(0, None)]),
        ("1..10", [Dim(1, 10)]),
        ("..10", [Dim(0, 10)]),
        ("3..", [Dim(3, None)]),
        ("2, 3", [Dim(2, 2), Dim(3, 3)]),
        ("-1..5", [Dim(0, 5)]),
        ("1..-1", [Dim(1, None)]),
        ("", []),
    ],
)
def test_partial_shape_dims(text: str, dims: list[Dim]) -> None:
    shape = parse_partial_shape(text)
    assert shape == PartialShape(tuple(dims))
    assert shape.rank == len(dims)
    assert shape.is_static == all(d.is_static for d in dims)
    assert PartialShape(None).relaxes(shape) and shape.relaxes(shape)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2,x", "'x' is not a dimension"),
        ("1,,2", "empty dimension"),
        ("-2", "negative dimension -2"),
        ("5..3", "empty dimension range '5..3'"),
        ("?..", "'?..' is not a dimension"),
        (str(2**63), f"dimension {2**63} is larger than int64"),
    ],
)
def test_bad_partial_shapes(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_partial_shape(text)
    assert str(info.value) == message


def test_tensor_names_and_parameter_order(tmp_path: Path) -> None:
    """Parameters keep the model's order (not alphabetical); names with commas survive the escaping."""
    params = [ops.parameter([2], np.float32, name=n) for n in ("zeta", "alpha", "mid")]
    params[1].output(0).get_tensor().set_names({"alpha", "alpha,with comma"})
    total = ops.add(ops.add(params[0], params[1]), params[2])
    total.output(0).get_tensor().set_names({"sum", "total,1"})
    neg = ops.negative(params[2])
    neg.output(0).get_tensor().set_names({"neg"})
    xml = save(ov.Model([ops.result(neg), ops.result(total)], params, "m"), tmp_path)
    graph = read_ir(xml)
    model = CORE.read_model(str(xml))
    assert [p.name for p in graph.parameters] == [p.get_friendly_name() for p in model.get_parameters()]
    assert [set(p.outputs[0].names) for p in graph.parameters] == [set(i.get_names()) for i in model.inputs]
    result_names = [set(graph.producer(r, 0)[1].names) for r in graph.results]
    assert result_names == [set(o.get_names()) for o in model.outputs]
    assert result_names == [{"neg"}, {"sum", "total,1"}]


def test_topological_order_and_graph_api(tmp_path: Path) -> None:
    x = ops.parameter([2], np.float32, name="x")
    a = ops.relu(x)
    b = ops.multiply(a, ops.constant(np.float32(2)))
    model = ov.Model([ops.result(ops.add(a, b))], [x], "m")
    model.set_rt_info("f16", ["runtime_options", "KV_CACHE_PRECISION"])
    model.set_rt_info("yes", "flag")
    xml = save(model, tmp_path)
    graph = read_ir(xml)
    assert graph.rt_info["runtime_options/KV_CACHE_PRECISION"] == "f16" and graph.rt_info["flag"] == "yes"
    position = {layer.id: i for i, layer in enumerate(graph.topological())}
    for edge in graph.edges:
        assert position[edge.from_layer] < position[edge.to_layer]
    relu = only(graph, "ReLU")
    assert sorted(layer.type for layer, _ in graph.consumers(relu, 0)) == ["Add", "Multiply"]
    assert graph.producer(relu, 0)[0].type == "Parameter"
    assert only(graph, "Add").op_name == "Add-1" and relu.describe() == f"layer '{relu.name}' (id {relu.id}, ReLU-1)"
    assert graph.version == 11 and graph.name == "m" and "OpenVINO Runtime" in graph.rt_info


def loop_model() -> ov.Model:
    """x + w, three times, as Loop-5 (the body reads its own Const and the current iteration)."""
    x = ops.parameter([2], np.float32, name="x")
    bx = ops.parameter([2], np.float32, name="bx")
    bi = ops.parameter([1], np.int64, name="bi")
    acc = ops.add(bx, ops.constant(np.array([0.5, 1.5], np.float32)))
    body = ov.Model([ops.result(ops.constant(True)), ops.result(acc)], [bx, bi], "body")
    loop = ops.loop(ops.constant(np.int64(3)), ops.constant(True))
    loop.set_function(body)
    loop.set_special_body_ports([1, 0])
    loop.set_merged_input(bx, x.output(0), acc.output(0))
    return ov.Model([ops.result(loop.get_iter_value(acc.output(0), -1))], [x], "m")


def tensor_iterator_model() -> ov.Model:
    """A running sum over axis 0 of x [4, 2] as TensorIterator."""
    x = ops.parameter([4, 2], np.float32, name="x")
    h = ops.parameter([1, 2], np.float32, name="h")
    bx = ops.parameter([1, 2], np.float32, name="bx")
    bh = ops.parameter([1, 2], np.float32, name="bh")
    new_h = ops.add(bx, bh)
    ti = ops.tensor_iterator()
    ti.set_body(ov.Model([ops.result(new_h)], [bx, bh], "body"))
    ti.set_sliced_input(bx, x.output(0), 0, 1, 1, -1, 0)
    ti.set_merged_input(bh, h.output(0), new_h.output(0))
    return ov.Model([ops.result(ti.get_iter_value(new_h.output(0), -1))], [x, h], "m")


@pytest.mark.parametrize(("make", "op_type"), [(loop_model, "Loop"), (tensor_iterator_model, "TensorIterator")])
@pytest.mark.parametrize("version", [11, 10])
def test_bodies(tmp_path: Path, make: Callable[[], ov.Model], op_type: str, version: int) -> None:
    xml = save(make(), tmp_path)
    if version == 10:
        xml.write_text(xml.read_text().replace('<net name="m" version="11">', '<net name="m" version="10">'))
    graph = read_ir(xml)
    assert graph.version == version
    outer = only(graph, op_type)
    body = outer.body
    assert body is not None and body.version == version
    ov_outer = next(op for op in CORE.read_model(str(xml)).get_ordered_ops() if op.get_type_name() == outer.type)
    ov_body = ov_outer.get_function()
    assert sorted(layer.name for layer in body.layers.values()) == sorted(
        op.get_friendly_name() for op in ov_body.get_ordered_ops()
    )
    for layer in body.of_type("Const"):
        ov_const = next(op for op in ov_body.get_ordered_ops() if op.get_friendly_name() == layer.name)
        np.testing.assert_array_equal(body.constant(layer), ov_const.get_data())
    assert {entry["kind"] for entry in outer.port_map} == {"input", "output"}
    assert all(int(e["internal_layer_id"]) in body.layers for e in outer.port_map)
    assert len(outer.back_edges) == 1
    edge = outer.back_edges[0]
    assert body.layers[edge.from_layer].type == "Result" and body.layers[edge.to_layer].type == "Parameter"


def test_loop_body_names_inner_layer_on_error(tmp_path: Path) -> None:
    xml = save(loop_model(), tmp_path)
    text = xml.read_text()
    body_const = re.search(
        r'<layer id="(\d+)" name="([^"]+)" type="Const" version="opset1">\s*<data element_type="f32"', text
    )
    assert body_const is not None
    xml.write_text(text.replace('<data element_type="f32" shape="2"', '<data element_type="f31" shape="2"'))
    outer = re.search(r'<layer id="(\d+)" name="([^"]+)" type="Loop"', text)
    assert outer is not None
    with pytest.raises(IRError) as info:
        read_ir(xml)
    assert str(info.value) == (
        f"{xml}: layer '{outer[2]}' (id {outer[1]}) body: layer '{body_const[2]}' (id {body_const[1]}): "
        "unknown element type 'f31'"
    )


def test_ir_v10_reads_like_v11(tmp_path: Path) -> None:
    x = ops.parameter([2, 3], np.float32, name="x")
    model = ov.Model([ops.result(ops.add(x, ops.constant(RNG.standard_normal((2, 3)).astype(np.float32))))], [x], "m")
    xml = save(model, tmp_path, compress=True)
    xml10 = tmp_path / "v10.xml"
    xml10.write_text(xml.read_text().replace('version="11"', 'version="10"', 1))
    g11, g10 = read_ir(xml), read_ir(xml10, tmp_path / "model.bin")
    assert (g11.version, g10.version) == (11, 10)
    assert g10.layers == g11.layers and g10.edges == g11.edges and g10.order == g11.order
    for lid, value in g11.constants.items():
        np.testing.assert_array_equal(g10.constants[lid], value)
    assert CORE.read_model(str(xml10), str(tmp_path / "model.bin")).inputs[0].get_any_name() == "x"


def test_large_bin_is_mapped_not_copied(tmp_path: Path) -> None:
    """A 100 MB .bin is memory-mapped: nothing of its size is allocated, constants are read-only
    views into the one mapping."""
    n = 12_500_000  # two f32 constants of 50 MB
    x = ops.parameter([n], np.float32, name="x")
    a, b = np.full(n, 1.5, np.float32), np.arange(n, dtype=np.float32)
    xml = save(ov.Model([ops.result(ops.add(ops.add(x, ops.constant(a)), ops.constant(b)))], [x], "m"), tmp_path)
    size = (tmp_path / "model.bin").stat().st_size
    assert size == 8 * n
    tracemalloc.start()
    try:
        graph = read_ir(xml)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < size * 0.05, f"read_ir allocated {peak} bytes at peak for a {size}-byte .bin"
    bases = []
    for layer in graph.of_type("Const"):
        value = graph.constant(layer)
        assert not value.flags.owndata and not value.flags.writeable
        base = value
        while isinstance(base, np.ndarray):
            base = base.base
        bases.append(base)
    assert all(isinstance(b, memoryview) and isinstance(b.obj, mmap.mmap) for b in bases)
    assert len(bases[0].obj) == size and all(b.obj is bases[0].obj for b in bases)
    values = sorted((graph.constant(c) for c in graph.of_type("Const")), key=lambda v: float(v[0]))
    np.testing.assert_array_equal(values[0], b)
    np.testing.assert_array_equal(values[1], a)
