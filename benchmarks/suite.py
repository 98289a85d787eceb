"""The suite's sections: each measures one question and returns JSON-ready data."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ortstate
from benchmarks import concurrency, irs, native, profile_step, torch_runner
from ortstate.timing import BenchResult, make_runners, max_positions, measure, model_workload

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "ortstate" / "_demo" / "char_lstm.xml"
LLAMA = ROOT / "models" / "llm" / "llama" / "openvino_model.xml"
# "lstm2" (issue 22): torch nn.LSTM(8, 16, num_layers=2, batch_first=True) made stateful, batch dynamic
LSTM2 = ROOT / "models" / "lstm_2l_dynbatch" / "model.xml"
# the recurrent models converted from PyTorch networks a native ONNX export can be written for
RECURRENT = ["lstm_1l", "lstm_2l_dynbatch", "lstm_2l_f16", "gru_1l", "gru_2l", "rnn_1l", "rnn_2l_relu"]
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Config:
    """How long each section runs."""

    demo_steps: int = 1000
    demo_rounds: int = 9
    sweep_steps: int = 300
    sweep_rounds: int = 5
    llm_steps: int = 64
    llm_rounds: int = 7  # decode steps are noisy: the targets read ratios at single positions
    concurrency_steps: int = 4000  # per point, split over the requests
    concurrency_repeats: int = 3
    profile_steps: int = 3000
    native_steps: int = 1000  # per model and graph, for the native-export comparison
    native_rounds: int = 5


FULL = Config(2000, 11, 500, 7, 32, 15, 8000, 3, 5000, 2000, 9)
QUICK = Config(200, 3, 40, 2, 16, 2, 600, 1, 500, 200, 3)
HIDDEN = [64, 128, 256, 512, 1024]
LAYERS = [1, 2, 3, 4]
BATCH = [1, 2, 4, 8, 16]
VARIABLES = [1, 4, 16, 64]
POSITIONS = [16, 64, 256, 1024, 2048]
REQUESTS = [1, 4, 16, 64]


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def bench(xml: Path, steps: int, rounds: int, position: int = 16, extra: list[Any] | None = None) -> BenchResult:
    """One workload through every runner (plus ``extra`` runners), 1 thread."""
    workload = model_workload(xml, steps, position)
    runners, skipped = make_runners(workload, 1)
    runners += extra or []
    return measure(workload, runners, rounds, skipped=skipped)


def state_bytes(xml: Path, position: int) -> int:
    """Bytes the variables hold when a decode step at ``position`` starts (what it reads)."""
    workload = model_workload(xml, 1, position)
    session = ortstate.StatefulSession(xml)
    for feeds in workload.prefill:
        session.run(None, feeds)
    return sum(v.state.nbytes for v in session.query_state())


def _torch(factory: Callable[[], Any]) -> list[Any]:
    return [factory()] if torch_runner.available() is None else []


def demo(cfg: Config) -> BenchResult:
    vocab = len(json.loads((DEMO.parent / "vocab.json").read_text(encoding="utf-8"))["chars"])
    extra = _torch(lambda: torch_runner.demo_runner(vocab, 32, 128, 1, 1))
    progress(f"demo char LSTM: {cfg.demo_steps} steps x {cfg.demo_rounds} rounds")
    return bench(DEMO, cfg.demo_steps, cfg.demo_rounds, extra=extra)


def lstm2(cfg: Config) -> dict[str, Any]:
    """The 2-layer LSTM through every runner, and the subtraction profile of its step (what one
    state op call costs, run bare)."""
    progress(f"lstm2 ({LSTM2.parent.name}): {cfg.demo_steps} steps x {cfg.demo_rounds} rounds")
    result = bench(LSTM2, cfg.demo_steps, cfg.demo_rounds)
    progress("lstm2: what one state op call costs")
    return {"result": result, "layers": profile_step.layers(LSTM2, cfg.profile_steps, 5 if cfg is FULL else 2)}


def natives(cfg: Config) -> list[dict[str, Any]]:
    """Each recurrent model's converted explicit graph against its native export, bare ORT."""
    rows = []
    for name in RECURRENT:
        progress(f"{name}: converted vs native export, {cfg.native_steps} steps x {cfg.native_rounds} rounds")
        rows.append(native.compare(ROOT / "models" / name / "model.xml", cfg.native_steps, cfg.native_rounds))
    return rows


def sweeps(cfg: Config, tmp: Path) -> dict[str, list[dict[str, Any]]]:
    """LSTM hidden / layers / batch sweeps and the number-of-variables sweep."""
    points: dict[str, list[tuple[int, Path, Callable[[], Any]]]] = {"hidden": [], "layers": [], "batch": []}
    for h in HIDDEN:
        points["hidden"].append((h, tmp / f"h{h}.xml", lambda h=h: irs.lstm_ir(tmp / f"h{h}.xml", h)))
    for n in LAYERS:
        points["layers"].append((n, tmp / f"l{n}.xml", lambda n=n: irs.lstm_ir(tmp / f"l{n}.xml", 128, n)))
    for b in BATCH:
        points["batch"].append((b, tmp / f"b{b}.xml", lambda b=b: irs.lstm_ir(tmp / f"b{b}.xml", 128, 1, b)))
    shapes = {"hidden": lambda v: (v, 1, 1), "layers": lambda v: (128, v, 1), "batch": lambda v: (128, 1, v)}
    out: dict[str, list[dict[str, Any]]] = {}
    for sweep, items in points.items():
        out[sweep] = []
        for value, xml, build in items:
            build()
            h, n, b = shapes[sweep](value)
            extra = _torch(lambda h=h, n=n, b=b: torch_runner.lstm_runner(h, n, b, 64, 1))
            progress(f"LSTM {sweep}={value}")
            out[sweep].append({"value": value, "result": bench(xml, cfg.sweep_steps, cfg.sweep_rounds, extra=extra)})
    out["variables"] = []
    for count in VARIABLES:
        xml = irs.variables_ir(tmp / f"v{count}.xml", count)
        progress(f"{count} variables")
        out["variables"].append({"value": count, "result": bench(xml, cfg.sweep_steps, cfg.sweep_rounds)})
    return out


def llm(cfg: Config, tmp: Path) -> dict[str, Any]:
    """Decode cost vs position: llama within its max_position_embeddings, and the KV-cache stand-in."""
    limit = max_positions(LLAMA) or max(POSITIONS) + cfg.llm_steps
    allowed = [p for p in POSITIONS if p + cfg.llm_steps <= limit]
    if limit - cfg.llm_steps not in allowed and limit - cfg.llm_steps >= 2:
        allowed.append(limit - cfg.llm_steps)
    llama = []
    for position in allowed:
        progress(f"llama decode at position {position}")
        llama.append({"value": position, "result": bench(LLAMA, cfg.llm_steps, cfg.llm_rounds, position)})
    xml = irs.kv_decoder_ir(tmp / "kv_decoder.xml")
    standin = []
    for position in POSITIONS:
        progress(f"KV-cache stand-in decode at position {position}")
        result = bench(xml, cfg.llm_steps, cfg.llm_rounds, position)
        standin.append({"value": position, "result": result, "state_bytes": state_bytes(xml, position)})
    return {"llama": llama, "llama_max_positions": limit, "standin": standin}


def concurrent(cfg: Config, tmp: Path) -> list[dict[str, Any]]:
    """The demo LSTM (~20 µs steps: per-call overhead dominates) and a hidden-512 LSTM (~250 µs)."""
    progress("concurrent requests on one session")
    rows = concurrency.sweep(DEMO, REQUESTS, cfg.concurrency_steps, progress, cfg.concurrency_repeats)
    big = irs.lstm_ir(tmp / "lstm_h512.xml", 512)
    return rows + concurrency.sweep(big, REQUESTS, cfg.concurrency_steps // 8, progress, cfg.concurrency_repeats)


def memory(tmp: Path) -> list[dict[str, Any]]:
    """RSS per request for the demo LSTM and for the KV-cache stand-in holding 256 tokens."""
    progress("memory per request")
    kv = tmp / "kv_decoder.xml"
    if not kv.exists():
        irs.kv_decoder_ir(kv)
    rows = []
    for explicit in (False, True):
        rows += [concurrency.memory(DEMO, n, explicit) for n in (64, 256)]
        rows.append(concurrency.memory(kv, 16, explicit, position=256))
    return rows


def profile(cfg: Config) -> dict[str, Any]:
    progress("profiling one step of the demo LSTM")
    return {
        "layers": profile_step.layers(DEMO, cfg.profile_steps, 5 if cfg is FULL else 2),
        "cprofile": profile_step.cprofile(DEMO, cfg.profile_steps),
        "ort_nodes": profile_step.ort_nodes(DEMO, cfg.profile_steps // 3),
    }


def _section_args(argv: list[str] | None, what: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=f"python -m benchmarks {what}",
        description=f"The per-step suite's {what} section alone: prints its table (no results file: "
        "the per-step suite records it).",
    )
    parser.add_argument("--quick", action="store_true", help="the short version")
    return parser.parse_args(argv)


def native_main(argv: list[str] | None = None) -> int:
    """The converted recurrent models against their native exports, as the per-step suite measures them."""
    from benchmarks import report_recurrent

    cfg = QUICK if _section_args(argv, "native").quick else FULL
    print(report_recurrent.native_text(natives(cfg)))
    return 0


def concurrency_main(argv: list[str] | None = None) -> int:
    """Concurrent requests on one session, as the per-step suite measures them."""
    from benchmarks import report

    cfg = QUICK if _section_args(argv, "concurrency").quick else FULL
    with tempfile.TemporaryDirectory() as tmp:
        print(report.concurrency_table(concurrent(cfg, Path(tmp))))
    return 0
