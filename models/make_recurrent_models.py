"""Regenerate the small stateful recurrent IRs under ``models/`` the way OpenVINO users make them.

Runs in the models venv (torch 2.13.0 + openvino, see ``models/README.md``); deterministic (fixed
seeds). Usage: ``python models/make_recurrent_models.py [OUT_DIR]`` (default: this script's folder).

Each model gets ``OUT_DIR/NAME/model.xml``, ``model.bin`` and ``meta.json`` (how it was made, the op
census, the variables, and the input shapes the tests feed). The table in ``models/README.md``
between the ``recurrent-table`` markers is rewritten and also printed.

- torch ``nn.LSTM``/``nn.GRU``/``nn.RNN`` converted with ``ov.convert_model(m, example_input=...,
  input=[...])`` then ``MakeStateful({"h_in": "h_out", ...})``: LSTMSequence-5 / GRUSequence-5 /
  RNNSequence-5 fed by ReadValue-6 without init input (zeros). ``lstm_2l_dynbatch`` keeps the batch
  dynamic, so the zero state is *empty* ([2, 0, 16]): OpenVINO fails unless the state is set first.
- traced ``nn.LSTMCell``/``nn.GRUCell`` steps (decomposed into MatMul/Sigmoid/Tanh/... by the
  PyTorch frontend), made stateful the same way.
- TensorIterator / Loop built with the opset API (``openvino.opset8``), made stateful with
  ``LowLatency2(use_const_initializer=True)`` (init ``Broadcast(0, ShapeOf(h0))``) or ``False``
  (init: the ``h0`` Parameter itself).
"""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import openvino as ov
import torch
from openvino import opset8 as ops
from openvino import passes

SEED = 20260401
INPUT = 8  # feature size of every model's x
README_START = "<!-- recurrent-table:start -->"
README_END = "<!-- recurrent-table:end -->"
_VIA = " → convert_model → MakeStateful"


@dataclass
class Made:
    """A stateful model plus what the tests need to know to feed it."""

    model: ov.Model
    how: str
    test_feeds: list[dict[str, list[int]]]  # input name -> concrete shape, one dict per step (cycled)
    state_shapes: dict[str, list[int]] = field(default_factory=dict)  # set before the first run
    compress: bool = False


# ---------------------------------------------------------------- torch models + MakeStateful


class _SeqNet(torch.nn.Module):
    """``nn.LSTM``/``GRU``/``RNN`` with the state as explicit inputs and outputs (what users export)."""

    def __init__(self, rnn: torch.nn.Module) -> None:
        super().__init__()
        self.rnn = rnn

    def forward(self, x: torch.Tensor, h_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, h = self.rnn(x, h_in)
        return y, h


class _LstmNet(torch.nn.Module):
    def __init__(self, rnn: torch.nn.LSTM) -> None:
        super().__init__()
        self.rnn = rnn

    def forward(
        self, x: torch.Tensor, h_in: torch.Tensor, c_in: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y, (h, c) = self.rnn(x, (h_in, c_in))
        return y, h, c


class _LstmCellStep(torch.nn.Module):
    """One LSTMCell step with a linear head: the state is (h, c), the output is the head's logits."""

    def __init__(self, hidden: int, classes: int) -> None:
        super().__init__()
        self.cell = torch.nn.LSTMCell(INPUT, hidden)
        self.head = torch.nn.Linear(hidden, classes)

    def forward(
        self, x: torch.Tensor, h_in: torch.Tensor, c_in: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h, c = self.cell(x, (h_in, c_in))
        return self.head(h), h, c


class _GruCellStep(torch.nn.Module):
    def __init__(self, hidden: int, classes: int) -> None:
        super().__init__()
        self.cell = torch.nn.GRUCell(INPUT, hidden)
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor, h_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.cell(x, h_in)
        return torch.tanh(self.head(h)), h


def _name_outputs(model: ov.Model, names: list[str]) -> None:
    """The PyTorch frontend leaves Results unnamed; MakeStateful pairs inputs with outputs by name."""
    for out, name in zip(model.outputs, names):
        out.get_tensor().set_names({name})


def _make_stateful(model: ov.Model, pairs: dict[str, str]) -> ov.Model:
    manager = passes.Manager()
    manager.register_pass(passes.MakeStateful(pairs))
    manager.run_passes(model)
    return model


def _torch_stateful(
    net: torch.nn.Module,
    example: tuple[torch.Tensor, ...],
    inputs: list[tuple[str, list[int]]],
    outputs: list[str],
) -> ov.Model:
    """``ov.convert_model`` + ``MakeStateful`` pairing every ``*_in`` input with its ``*_out`` output."""
    model = ov.convert_model(net.eval(), example_input=example, input=inputs)
    _name_outputs(model, outputs)
    pairs = {name: name[: -len("_in")] + "_out" for name, _ in inputs if name.endswith("_in")}
    return _make_stateful(model, pairs)


def _seq_feeds(batch: int = 1, batch_first: bool = True) -> list[dict[str, list[int]]]:
    lengths = [1, 3, 1, 2]
    return [{"x": [batch, t, INPUT] if batch_first else [t, batch, INPUT]} for t in lengths]


def lstm(layers: int, hidden: int, *, dynamic_batch: bool = False, compress: bool = False) -> Made:
    net = _LstmNet(torch.nn.LSTM(INPUT, hidden, layers, batch_first=True))
    batch = -1 if dynamic_batch else 1
    example = (torch.randn(1, 3, INPUT), torch.zeros(layers, 1, hidden), torch.zeros(layers, 1, hidden))
    inputs = [("x", [batch, -1, INPUT]), ("h_in", [layers, batch, hidden]), ("c_in", [layers, batch, hidden])]
    model = _torch_stateful(net, example, inputs, ["y", "h_out", "c_out"])
    how = f"torch nn.LSTM({INPUT}, {hidden}, num_layers={layers}, batch_first=True) → convert_model → MakeStateful"
    if dynamic_batch:
        how += "; batch dynamic: the zero init is empty, set the state before the first run"
        states = {"h_inh_out": [layers, 2, hidden], "c_inc_out": [layers, 2, hidden]}
        return Made(model, how, _seq_feeds(2), states)
    if compress:
        how += "; saved with f16 weights (ov.save_model default)"
    return Made(model, how, _seq_feeds(), compress=compress)


def gru(layers: int, hidden: int, *, batch_first: bool = True) -> Made:
    net = _SeqNet(torch.nn.GRU(INPUT, hidden, layers, batch_first=batch_first))
    x = [1, -1, INPUT] if batch_first else [-1, 1, INPUT]
    example = (torch.randn(*[3 if d < 0 else d for d in x]), torch.zeros(layers, 1, hidden))
    model = _torch_stateful(net, example, [("x", x), ("h_in", [layers, 1, hidden])], ["y", "h_out"])
    how = f"torch nn.GRU({INPUT}, {hidden}, num_layers={layers}, batch_first={batch_first}){_VIA}"
    return Made(model, how, _seq_feeds(batch_first=batch_first))


def rnn(layers: int, hidden: int, nonlinearity: str) -> Made:
    net = _SeqNet(torch.nn.RNN(INPUT, hidden, layers, nonlinearity=nonlinearity, batch_first=True))
    example = (torch.randn(1, 3, INPUT), torch.zeros(layers, 1, hidden))
    inputs = [("x", [1, -1, INPUT]), ("h_in", [layers, 1, hidden])]
    model = _torch_stateful(net, example, inputs, ["y", "h_out"])
    how = (
        f"torch nn.RNN({INPUT}, {hidden}, num_layers={layers}, nonlinearity={nonlinearity!r}, batch_first=True)"
        " → convert_model → MakeStateful"
    )
    return Made(model, how, _seq_feeds())


def lstmcell_step() -> Made:
    hidden, classes = 16, 5
    example = (torch.randn(1, INPUT), torch.zeros(1, hidden), torch.zeros(1, hidden))
    inputs = [("x", [1, INPUT]), ("h_in", [1, hidden]), ("c_in", [1, hidden])]
    model = _torch_stateful(_LstmCellStep(hidden, classes), example, inputs, ["logits", "h_out", "c_out"])
    how = f"traced torch nn.LSTMCell({INPUT}, {hidden}) + Linear({hidden}, {classes}) → convert_model → MakeStateful"
    return Made(model, how, [{"x": [1, INPUT]}])


def grucell_step() -> Made:
    hidden, classes = 24, 6
    example = (torch.randn(1, INPUT), torch.zeros(1, hidden))
    model = _torch_stateful(
        _GruCellStep(hidden, classes), example, [("x", [1, INPUT]), ("h_in", [1, hidden])], ["out", "h_out"]
    )
    how = f"traced torch nn.GRUCell({INPUT}, {hidden}) + tanh(Linear({hidden}, {classes})){_VIA}"
    return Made(model, how, [{"x": [1, INPUT]}])


# ---------------------------------------------------------------- TensorIterator / Loop + LowLatency2


def _f32(rng: np.random.Generator, *shape: int, scale: float = 0.3) -> ov.Node:
    return ops.constant((rng.standard_normal(shape) * scale).astype(np.float32))


def _axes(*values: int) -> ov.Node:
    return ops.constant(np.array(values, np.int64))


def _named(node: ov.Node, name: str) -> ov.Node:
    node.set_friendly_name(name)
    return node


def _low_latency(model: ov.Model, const_init: bool) -> ov.Model:
    manager = passes.Manager()
    manager.register_pass(passes.LowLatency2(const_init))
    manager.run_passes(model)
    return model


def _result(output: ov.Output, name: str) -> ov.Node:
    output.get_tensor().set_names({name})
    return ops.result(output)


def ti_lstm(rng: np.random.Generator, const_init: bool) -> Made:
    """TensorIterator over the time axis of x, body an LSTMCell-4; h and c are back edges."""
    hidden = 16
    x = ops.parameter([1, -1, INPUT], np.float32, name="x")
    h0 = ops.parameter([1, hidden], np.float32, name="h0")
    c0 = ops.parameter([1, hidden], np.float32, name="c0")
    xt = _named(ops.parameter([1, 1, INPUT], np.float32), "x_t")
    h_prev = _named(ops.parameter([1, hidden], np.float32), "h_prev")
    c_prev = _named(ops.parameter([1, hidden], np.float32), "c_prev")
    cell = ops.lstm_cell(
        ops.squeeze(xt, _axes(1)),
        h_prev,
        c_prev,
        _f32(rng, 4 * hidden, INPUT),
        _f32(rng, 4 * hidden, hidden),
        _f32(rng, 4 * hidden, scale=0.1),
        hidden,
    )
    h_res, c_res = ops.result(cell.output(0)), ops.result(cell.output(1))
    y_res = ops.result(ops.unsqueeze(cell.output(0), _axes(1)))
    body = ov.Model([h_res, c_res, y_res], [xt, h_prev, c_prev], "ti_body")
    ti = _named(ops.tensor_iterator(), "ti")
    ti.set_body(body)
    ti.set_sliced_input(xt, x.output(0), 0, 1, 1, -1, 1)
    ti.set_merged_input(h_prev, h0.output(0), h_res.output(0))
    ti.set_merged_input(c_prev, c0.output(0), c_res.output(0))
    y = ti.get_concatenated_slices(y_res.output(0), 0, 1, 1, -1, 1)
    h_last = ti.get_iter_value(h_res.output(0), -1)
    model = ov.Model([_result(y, "y"), _result(h_last, "h_last")], [x, h0, c0], "ti_lstm")
    _low_latency(model, const_init)
    how = (
        "opset8 TensorIterator over x's time axis, body LSTMCell-4 (h, c back edges) → "
        f"LowLatency2(use_const_initializer={const_init})"
    )
    feeds = [{"x": [1, t, INPUT], "h0": [1, hidden], "c0": [1, hidden]} for t in (1, 3, 2)]
    return Made(model, how, feeds)


def loop_rnn(rng: np.random.Generator, const_init: bool) -> Made:
    """Loop-5 over x's 3 time steps, body a hand-made tanh RNN cell plus a running sum of h.

    Both h and the running sum are loop-carried, so LowLatency2 makes both variables.
    """
    hidden, steps = 16, 3
    x = ops.parameter([1, steps, INPUT], np.float32, name="x")
    h0 = ops.parameter([1, hidden], np.float32, name="h0")
    s0 = ops.parameter([1, hidden], np.float32, name="s0")
    xt = _named(ops.parameter([1, 1, INPUT], np.float32), "x_t")
    h_prev = _named(ops.parameter([1, hidden], np.float32), "h_prev")
    s_prev = _named(ops.parameter([1, hidden], np.float32), "s_prev")
    pre = ops.add(
        ops.matmul(ops.squeeze(xt, _axes(1)), _f32(rng, INPUT, hidden), False, False),
        ops.matmul(h_prev, _f32(rng, hidden, hidden), False, False),
    )
    h = ops.tanh(ops.add(pre, _f32(rng, hidden, scale=0.1)))
    s = ops.add(s_prev, h)
    cond = ops.result(ops.constant(np.array(True)))
    h_res, s_res = ops.result(h), ops.result(s)
    y_res = ops.result(ops.unsqueeze(h, _axes(1)))
    body = ov.Model([cond, h_res, s_res, y_res], [xt, h_prev, s_prev], "loop_body")
    loop = _named(ops.loop(ops.constant(np.int64(steps)), ops.constant(np.array(True))), "loop")
    loop.set_function(body)
    loop.set_special_body_ports([-1, 0])
    loop.set_sliced_input(xt, x.output(0), 0, 1, 1, -1, 1)
    loop.set_merged_input(h_prev, h0.output(0), h_res.output(0))
    loop.set_merged_input(s_prev, s0.output(0), s_res.output(0))
    y = loop.get_concatenated_slices(y_res.output(0), 0, 1, 1, -1, 1)
    results = [_result(y, "y"), _result(loop.get_iter_value(h_res.output(0), -1), "h_last")]
    results.append(_result(loop.get_iter_value(s_res.output(0), -1), "h_sum"))
    model = ov.Model(results, [x, h0, s0], "loop_rnn")
    _low_latency(model, const_init)
    how = (
        f"opset8 Loop (trip count {steps}) slicing x, body tanh RNN cell + running sum (2 back edges) → "
        f"LowLatency2(use_const_initializer={const_init})"
    )
    return Made(model, how, [{"x": [1, steps, INPUT], "h0": [1, hidden], "s0": [1, hidden]}])


# ---------------------------------------------------------------- census from the saved XML


def _const_text(data: ET.Element, bin_path: Path) -> str:
    """A small constant's values (read from the .bin), else its type and shape."""
    dtype = {"f32": np.float32, "f16": np.float16, "i64": np.int64, "i32": np.int32}.get(data.get("element_type"))
    shape = [int(d) for d in data.get("shape", "").split(",") if d]
    if dtype is None or int(np.prod(shape)) > 4:
        return f"Const {data.get('element_type')}[{data.get('shape')}]"
    raw = bin_path.read_bytes()[int(data.get("offset")) : int(data.get("offset")) + int(data.get("size"))]
    values = np.frombuffer(raw, dtype).tolist()
    return str(values[0] if not shape or shape == [1] else values)


def _census(xml: Path) -> tuple[dict[str, int], list[dict[str, str]]]:
    """Op types with versions counted from the XML (bodies included) and the variables with their init."""
    root = ET.parse(xml).getroot()
    counts: Counter[str] = Counter()
    for layer in root.iter("layer"):
        version = re.sub(r"\D", "", layer.get("version", "")) or layer.get("version", "")
        counts[f"{layer.get('type')}-{version}"] += 1
    # top-level graph only for the init description: edges map (to_layer, to_port) -> from_layer
    layers = {layer.get("id"): layer for layer in root.find("layers")}
    producer = {(e.get("to-layer"), e.get("to-port")): e.get("from-layer") for e in root.find("edges")}

    def describe(layer_id: str, depth: int = 0) -> str:
        layer = layers[layer_id]
        kind = layer.get("type")
        if kind == "Parameter":
            return f"Parameter {layer.get('name')}"
        if kind == "Const":
            return _const_text(layer.find("data"), xml.with_suffix(".bin"))
        if depth > 3:
            return kind
        ports = [p.get("id") for p in layer.find("input")] if layer.find("input") is not None else []
        args = [describe(producer[(layer_id, p)], depth + 1) for p in ports if (layer_id, p) in producer]
        return f"{kind}({', '.join(args)})"

    variables = []
    for layer in root.find("layers"):
        if layer.get("type") != "ReadValue":
            continue
        data = layer.find("data")
        inputs = layer.find("input")
        init = "zeros (no init input)"
        if inputs is not None:
            init = describe(producer[(layer.get("id"), inputs[0].get("id"))])
        variables.append(
            {
                "id": data.get("variable_id"),
                "type": data.get("variable_type", "?"),
                "shape": f"[{data.get('variable_shape', '?')}]",
                "init": init,
            }
        )
    return dict(sorted(counts.items())), variables


def _check_small(xml: Path) -> int:
    size = xml.stat().st_size + xml.with_suffix(".bin").stat().st_size
    assert size < 1 << 20, f"{xml}: {size} bytes, models must stay well under 1 MB"
    return size


def build_all() -> dict[str, Callable[[], Made]]:
    """Every model, in generation order (the order matters for the seeds)."""
    rng = np.random.default_rng(SEED)
    return {
        "lstm_1l": lambda: lstm(1, 16),
        "lstm_2l_dynbatch": lambda: lstm(2, 16, dynamic_batch=True),
        "lstm_2l_f16": lambda: lstm(2, 32, compress=True),
        "gru_1l": lambda: gru(1, 24),
        "gru_2l": lambda: gru(2, 16, batch_first=False),
        "rnn_1l": lambda: rnn(1, 16, "tanh"),
        "rnn_2l_relu": lambda: rnn(2, 20, "relu"),
        "lstmcell_step": lstmcell_step,
        "grucell_step": grucell_step,
        "ti_lowlatency_const": lambda: ti_lstm(rng, True),
        "ti_lowlatency_param": lambda: ti_lstm(rng, False),
        "loop_lowlatency_const": lambda: loop_rnn(rng, True),
        "loop_lowlatency_param": lambda: loop_rnn(rng, False),
    }


def _markdown(rows: list[dict]) -> str:
    lines = [
        "| name | how it was made | ops (from the XML, bodies included) | variables: id, type, shape, init |",
        "| --- | --- | --- | --- |",
    ]
    for row in rows:
        op_list = ", ".join(f"{op} ×{n}" for op, n in row["ops"].items())
        var_list = "<br>".join(f"`{v['id']}` {v['type']} {v['shape']} init {v['init']}" for v in row["variables"])
        lines.append(f"| `{row['name']}` | {row['how']} | {op_list} | {var_list} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out_dir = Path(args[0]) if args else Path(__file__).parent
    rows = []
    for name, make in build_all().items():
        torch.manual_seed(SEED)  # each torch model seeded on its own: reordering keeps the others
        made = make()
        folder = out_dir / name
        folder.mkdir(parents=True, exist_ok=True)
        xml = folder / "model.xml"
        ov.save_model(made.model, str(xml), compress_to_fp16=made.compress)
        size = _check_small(xml)
        op_counts, variables = _census(xml)
        meta = {
            "name": name,
            "generator": "models/make_recurrent_models.py",
            "how": made.how,
            "compressed_to_f16": made.compress,
            "inputs": {
                i.get_any_name(): {"type": i.get_element_type().to_dtype().name, "shape": str(i.get_partial_shape())}
                for i in made.model.inputs
            },
            "outputs": [o.get_any_name() for o in made.model.outputs],
            "test_feeds": made.test_feeds,
            "state_shapes": made.state_shapes,
            "ops": op_counts,
            "variables": variables,
        }
        (folder / "meta.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
        rows.append(meta)
        print(f"{name:24s} {size:7d} B  vars={len(variables)}  {', '.join(op_counts)}")
    table = _markdown(rows)
    print()
    print(table)
    readme = Path(__file__).parent / "README.md"
    if out_dir.resolve() == Path(__file__).parent.resolve() and readme.exists():
        text = readme.read_text()
        if README_START in text and README_END in text:
            head, rest = text.split(README_START, 1)
            tail = rest.split(README_END, 1)[1]
            readme.write_text(f"{head}{README_START}\n{table}\n{README_END}{tail}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
