"""Regenerate the small stateful IRs committed under ``models/`` (deterministic; needs only openvino).

Usage: ``python models/make_core_models.py [OUT_DIR]`` (default: the directory of this script).

- ``accumulator``: ``acc += x``; f32 variable initialised by ``Broadcast(0, ShapeOf(x))`` (ReadValue-6
  with an init input), so the state's shape follows the input's dynamic second dim.
- ``counter_i64``: an i64 counter (ReadValue-6 without init input: zeros) incremented by 1 every
  run; outputs the count and ``x * count``.
- ``kv_cache_toy``: an LLM-style KV cache as optimum-intel writes it: init
  ``Broadcast(0, Concat(Gather(ShapeOf(input), 0), [2], seq * 0, [4]))`` (optimum's literal
  ``[2, 0, 4]`` breaks OpenVINO's CPU plugin without its SDPA fusion: see the comment), read through
  ``Gather(state, beam_idx, 0)``, extended with ``Concat(read, new, axis=2)`` where ``new`` is a
  MatMul of the input with a constant weight reshaped to ``[batch, 2, seq, 4]``. Saved with
  ``ov.save_model``'s default f16 weight compression.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset13 as ops
from openvino import opset6
from openvino.op.util import Variable, VariableInfo

SEED = 20240601


def _variable(var_id: str, shape: list[int], etype: ov.Type) -> Variable:
    info = VariableInfo()
    info.data_shape = ov.PartialShape(shape)
    info.data_type = etype
    info.variable_id = var_id
    return Variable(info)


def _i64(values: list[int]) -> ov.Node:
    return ops.constant(np.array(values, np.int64))


def _named(node: ov.Node, name: str) -> ov.Output:
    """The node's first output, with ``name`` as its friendly and tensor name (what users see)."""
    node.set_friendly_name(name)
    out = node.output(0)
    out.get_tensor().set_names({name})
    return out


def accumulator() -> ov.Model:
    x = ops.parameter([1, -1], np.float32, name="x")
    var = _variable("acc", [1, -1], ov.Type.f32)
    rv = opset6.read_value(ops.broadcast(ops.constant(np.float32(0)), ops.shape_of(x)), var)
    add = ops.add(rv, x)
    return ov.Model([ops.result(_named(add, "sum"))], [opset6.assign(add, var)], [x], "accumulator")


def counter_i64() -> ov.Model:
    x = ops.parameter([-1, 3], np.float32, name="x")
    var = _variable("count", [1], ov.Type.i64)
    rv = opset6.read_value(var)
    count = ops.add(rv, ops.constant(np.array([1], np.int64)))
    scaled = ops.multiply(x, ops.convert(count, "f32"))
    results = [ops.result(_named(count, "count")), ops.result(_named(scaled, "scaled"))]
    return ov.Model(results, [opset6.assign(count, var)], [x], "counter_i64")


def kv_cache_toy(rng: np.random.Generator) -> ov.Model:
    inp = ops.parameter([-1, -1, 8], np.float32, name="input")
    beam_idx = ops.parameter([-1], np.int32, name="beam_idx")
    var = _variable("past", [-1, 2, -1, 4], ov.Type.f32)
    dims = ops.shape_of(inp)
    axis0 = ops.constant(np.int64(0))
    batch = ops.gather(dims, _i64([0]), axis0)
    # optimum writes a literal 0 here; OpenVINO 2026.4's CPU plugin then fixes the variable's
    # memory to that static empty shape and fails on the second run ("Can not clone with new dims.
    # Descriptor's shape: {0 - ?, 2, 0, 4}"). seq * 0 is the same value, unknown to shape inference.
    empty = ops.multiply(ops.gather(dims, _i64([1]), axis0), _i64([0]))
    init_shape = ops.concat([batch, _i64([2]), empty, _i64([4])], 0)
    past = opset6.read_value(ops.broadcast(ops.constant(np.float32(0)), init_shape), var)
    read = ops.gather(past, beam_idx, ops.constant(np.int64(0)))
    weight = ops.constant(rng.standard_normal((8, 8)).astype(np.float32))
    projected = ops.matmul(inp, weight, False, False)
    heads = ops.reshape(projected, ops.constant(np.array([0, 0, 2, 4], np.int64)), special_zero=True)
    new = ops.transpose(heads, ops.constant(np.array([0, 2, 1, 3], np.int64)))
    cache = ops.concat([read, new], 2)
    summary = ops.reduce_sum(cache, ops.constant(np.array([2], np.int64)), keep_dims=False)
    results = [ops.result(_named(summary, "cache_sum"))]
    return ov.Model(results, [opset6.assign(cache, var)], [inp, beam_idx], "kv_cache_toy")


def _stable_names(model: ov.Model) -> ov.Model:
    """Replace OpenVINO's process-global auto names (``Add_123``) so reruns write identical files."""
    for index, node in enumerate(model.get_ordered_ops()):
        if re.fullmatch(rf"{node.get_type_name()}_\d+", node.get_friendly_name()):
            node.set_friendly_name(f"{node.get_type_name().lower()}_{index}")
    return model


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out_dir = Path(args[0]) if args else Path(__file__).resolve().parent
    rng = np.random.default_rng(SEED)
    models = {
        "accumulator": (accumulator(), False),
        "counter_i64": (counter_i64(), False),
        "kv_cache_toy": (kv_cache_toy(rng), True),
    }
    for name, (model, compress) in models.items():
        path = out_dir / name / "model.xml"
        path.parent.mkdir(parents=True, exist_ok=True)
        ov.save_model(_stable_names(model), str(path), compress_to_fp16=compress)
        print(f"wrote {path} ({path.stat().st_size + path.with_suffix('.bin').stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
