"""Train the tiny character LSTM behind ``ortstate demo`` and export it as a stateful OpenVINO IR.

Runs in the models venv (torch 2.13.0 + openvino, see ``models/README.md``); seeded; about a
minute on 2 CPU cores. Usage: ``python models/train_char_lstm.py [OUT_DIR]`` (default
``ortstate/_demo``).

The text is the Zen of Python (PEP 20, public domain), taken from the standard library's ``this``
module. The network is Embedding(V, 32) → LSTM(32, 128) → Linear(128, V), trained on random
windows that each start from a zero state, so greedy decoding from a short prompt and a fresh state
recites the Zen. The exported *step* model takes one character index (``char``: i64 ``[1, 1]``) and
returns the next character's logits (``logits``: f32 ``[1, V]``); ``h``/``c`` are carried by
``MakeStateful`` as OpenVINO users do, and the IR is saved with ``compress_to_fp16=False``.

Writes ``char_lstm.xml``, ``char_lstm.bin`` and ``vocab.json`` (the characters in index order, the
IR's input/output names, element types and shapes, the variables, and training facts).
"""

from __future__ import annotations

import codecs
import contextlib
import io
import json
import sys
import time
from pathlib import Path

import numpy as np
import openvino as ov
import torch
from openvino import passes

SEED = 20
EMBED, HIDDEN, LAYERS = 32, 128, 1
WINDOW, BATCH, STEPS, LR = 80, 16, 300, 8e-3
PROMPT = "Beautiful is"


def zen_text() -> str:
    """PEP 20 as the ``this`` module stores it (rot13), decoded; importing ``this`` prints it, so mute that."""
    with contextlib.redirect_stdout(io.StringIO()):
        import this
    return codecs.decode(this.s, "rot13")


class CharLSTM(torch.nn.Module):
    """Embedding → LSTM → Linear; ``forward`` takes and returns the state explicitly."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, EMBED)
        self.lstm = torch.nn.LSTM(EMBED, HIDDEN, LAYERS, batch_first=True)
        self.head = torch.nn.Linear(HIDDEN, vocab)

    def forward(
        self, chars: torch.Tensor, h: torch.Tensor, c: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y, (h, c) = self.lstm(self.embed(chars), (h, c))
        return self.head(y), h, c


class CharStep(torch.nn.Module):
    """One step for export: ``char`` [1, 1] i64 → ``logits`` [1, V]; argument names become IR names."""

    def __init__(self, net: CharLSTM) -> None:
        super().__init__()
        self.net = net

    def forward(
        self, char: torch.Tensor, h_in: torch.Tensor, c_in: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits, h, c = self.net(char, h_in, c_in)
        return logits[:, -1, :], h, c


def train(text: str, vocab: list[str]) -> tuple[CharLSTM, float, float]:
    """Adam on random windows of the (cyclic) text; returns the net, the final loss and seconds taken."""
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    index = {ch: i for i, ch in enumerate(vocab)}
    ids = np.array([index[ch] for ch in text], np.int64)
    cyclic = np.concatenate([ids, ids[: WINDOW + 1]])
    net = CharLSTM(len(vocab))
    optimizer = torch.optim.Adam(net.parameters(), lr=LR)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, STEPS)
    zeros = torch.zeros(LAYERS, BATCH, HIDDEN)
    start, loss_value = time.perf_counter(), float("nan")
    for step in range(STEPS):
        # most windows start at a line start: that is where a prompt starts from a fresh state
        starts = rng.integers(0, len(ids), BATCH)
        batch = torch.from_numpy(np.stack([cyclic[s : s + WINDOW + 1] for s in starts]))
        logits, _, _ = net(batch[:, :-1], zeros, zeros)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, len(vocab)), batch[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        loss_value = loss.item()
        if step % 100 == 0 or step == STEPS - 1:
            print(f"step {step:4d}  loss {loss_value:.4f}  {time.perf_counter() - start:.1f}s", file=sys.stderr)
    return net.eval(), loss_value, time.perf_counter() - start


def greedy(net: CharLSTM, vocab: list[str], prompt: str, count: int) -> str:
    """Reference greedy decoding in torch, one character per step from a zero state."""
    index = {ch: i for i, ch in enumerate(vocab)}
    h = c = torch.zeros(LAYERS, 1, HIDDEN)
    out = []
    with torch.no_grad():
        for ch in prompt:
            logits, h, c = net(torch.tensor([[index[ch]]]), h, c)
        for _ in range(count):
            nxt = int(logits[0, -1].argmax())
            out.append(vocab[nxt])
            logits, h, c = net(torch.tensor([[nxt]]), h, c)
    return "".join(out)


def export(net: CharLSTM, vocab: list[str], out_dir: Path) -> ov.Model:
    """``ov.convert_model`` the step module, then ``MakeStateful`` h/c, and save without f16 compression."""
    example = (torch.zeros(1, 1, dtype=torch.int64), torch.zeros(LAYERS, 1, HIDDEN), torch.zeros(LAYERS, 1, HIDDEN))
    inputs = [
        ("char", [1, 1], ov.Type.i64),
        ("h_in", [LAYERS, 1, HIDDEN], ov.Type.f32),
        ("c_in", [LAYERS, 1, HIDDEN], ov.Type.f32),
    ]
    model = ov.convert_model(CharStep(net).eval(), example_input=example, input=inputs)
    for out, name in zip(model.outputs, ["logits", "h_out", "c_out"]):
        out.get_tensor().set_names({name})
    manager = passes.Manager()
    manager.register_pass(passes.MakeStateful({"h_in": "h_out", "c_in": "c_out"}))
    manager.run_passes(model)
    out_dir.mkdir(parents=True, exist_ok=True)
    ov.save_model(model, str(out_dir / "char_lstm.xml"), compress_to_fp16=False)
    return model


def ov_greedy(xml: Path, vocab: list[str], prompt: str, count: int) -> str:
    """The same decoding through OpenVINO's stateful InferRequest: the export must agree with torch."""
    request = ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
    index = {ch: i for i, ch in enumerate(vocab)}
    out: list[str] = []
    logits = None
    for ch in prompt:
        logits = request.infer({"char": np.array([[index[ch]]], np.int64)})["logits"]
    for _ in range(count):
        nxt = int(np.argmax(logits[0]))
        out.append(vocab[nxt])
        logits = request.infer({"char": np.array([[nxt]], np.int64)})["logits"]
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out_dir = Path(args[0]) if args else Path(__file__).resolve().parent.parent / "ortstate" / "_demo"
    torch.set_num_threads(2)
    text = zen_text()
    vocab = sorted(set(text))
    net, loss, seconds = train(text, vocab)
    sample = greedy(net, vocab, PROMPT, 160)
    print(f"trained in {seconds:.1f}s, final loss {loss:.4f}", file=sys.stderr)
    print(f"torch greedy: {PROMPT}{sample}", file=sys.stderr)
    model = export(net, vocab, out_dir)
    ov_sample = ov_greedy(out_dir / "char_lstm.xml", vocab, PROMPT, 160)
    if ov_sample != sample:
        raise SystemExit(f"OpenVINO's greedy text differs from torch's:\n{ov_sample!r}\n{sample!r}")
    meta = {
        "chars": vocab,
        "input": {"name": "char", "type": "i64", "shape": str(model.inputs[0].get_partial_shape())},
        "output": {"name": "logits", "type": "f32", "shape": str(model.outputs[0].get_partial_shape())},
        "variables": {s.get_variable_id(): str(s.get_output_partial_shape(0)) for s in _read_values(model)},
        "source": "The Zen of Python (PEP 20, public domain), from the standard library's `this` module",
        "network": f"Embedding({len(vocab)}, {EMBED}) → LSTM({EMBED}, {HIDDEN}, layers={LAYERS}) → Linear",
        "training": {"steps": STEPS, "window": WINDOW, "batch": BATCH, "seconds": round(seconds, 1)},
        "final_loss": round(loss, 4),
        "greedy_sample": {"prompt": PROMPT, "text": sample},
    }
    (out_dir / "vocab.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {out_dir}/char_lstm.xml, char_lstm.bin, vocab.json", file=sys.stderr)
    return 0


def _read_values(model: ov.Model) -> list[ov.Node]:
    return [op for op in model.get_ordered_ops() if op.get_type_name() == "ReadValue"]


if __name__ == "__main__":
    raise SystemExit(main())
