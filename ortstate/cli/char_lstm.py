"""The tiny stateful character LSTM ``ortstate demo`` streams from: its vocabulary, one-character
steps through ortstate and through OpenVINO, and a stream of them.

The packaged IR (``_demo/char_lstm.xml``, made by ``models/train_char_lstm.py``) is what OpenVINO
users ship: a one-character step model whose LSTM state lives in ReadValue/Assign variables, so only
the variables carry the context from one run to the next.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..convert import convert
from ..meta import read_meta
from ..runtime import StatefulSession
from ..runtime.options import default_session_options

__all__ = ["DEMO_DIR", "TEMPERATURE", "Step", "Stream", "Vocab", "openvino_step", "ortstate_step", "stream"]

DEMO_DIR = Path(__file__).resolve().parent.parent / "_demo"
TEMPERATURE = 0.8  # sampling temperature when --seed is given

Step = Callable[[int], np.ndarray]  # one character index in, the next character's logits out


@dataclass
class Stream:
    """What one prompt-then-generate pass produced."""

    text: str = ""
    logits: list[np.ndarray] = field(default_factory=list)
    step_us: list[float] = field(default_factory=list)


@dataclass
class Vocab:
    """``vocab.json``: characters in index order and the IR's input/output names."""

    chars: list[str]
    input_name: str
    output_name: str

    @classmethod
    def load(cls, path: Path) -> Vocab:
        meta = json.loads(path.read_text(encoding="utf-8"))
        return cls(meta["chars"], meta["input"]["name"], meta["output"]["name"])

    def index(self, text: str) -> list[int]:
        lookup = {ch: i for i, ch in enumerate(self.chars)}
        unknown = sorted({ch for ch in text if ch not in lookup})
        if unknown:
            raise ValueError(f"characters not in the demo's vocabulary: {''.join(unknown)!r}")
        return [lookup[ch] for ch in text]


def _picker(seed: int | None) -> Callable[[np.ndarray], int]:
    """Greedy without a seed; otherwise sampling at TEMPERATURE with pre-drawn uniforms, so two
    runtimes given the same seed pick the same characters from (nearly) the same logits."""
    if seed is None:
        return lambda logits: int(np.argmax(logits))
    rng = np.random.default_rng(seed)

    def sample(logits: np.ndarray) -> int:
        z = logits.astype(np.float64).ravel() / TEMPERATURE
        p = np.exp(z - z.max())
        cdf = np.cumsum(p / p.sum())
        return int(min(np.searchsorted(cdf, rng.random(), side="right"), len(cdf) - 1))

    return sample


def stream(
    step: Step,
    vocab: Vocab,
    prompt: str,
    count: int,
    seed: int | None,
    echo: Callable[[str], None] | None = None,
) -> Stream:
    """Feed ``prompt`` one character per run, then generate ``count`` characters, one run each."""
    out = Stream()
    pick = _picker(seed)
    logits = np.zeros(len(vocab.chars), np.float32)
    ids = vocab.index(prompt)
    for i in range(len(ids) + count):
        if i < len(ids):
            char = ids[i]
        else:
            char = pick(logits)
            out.text += vocab.chars[char]
            if echo:
                echo(vocab.chars[char])
        if i == len(ids) + count - 1:
            break  # the last generated character needs no further run
        start = time.perf_counter()
        logits = np.asarray(step(char)).ravel()
        out.step_us.append((time.perf_counter() - start) * 1e6)
        out.logits.append(logits.copy())
    return out


def ortstate_step(xml: Path, vocab: Vocab, form: str) -> tuple[Step, Callable[[], None], str, float]:
    start = time.perf_counter()
    model = convert(xml, explicit_state=form != "custom-op")
    options = default_session_options(read_meta(model))  # type: ignore[arg-type]
    options.intra_op_num_threads = 1  # a one-character step is far too small to split across threads
    options.inter_op_num_threads = 1
    session = StatefulSession(model, options, form=form)
    seconds = time.perf_counter() - start
    outputs = [vocab.output_name]

    def step(char: int) -> np.ndarray:
        return session.run(outputs, {vocab.input_name: np.array([[char]], np.int64)})[0]

    return step, session.reset_state, session.form, seconds


def openvino_step(xml: Path, vocab: Vocab) -> tuple[Step, Callable[[], None]]:
    import openvino as ov

    config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1}
    request = ov.Core().compile_model(str(xml), "CPU", config).create_infer_request()

    def step(char: int) -> np.ndarray:
        return request.infer({vocab.input_name: np.array([[char]], np.int64)})[vocab.output_name]

    return step, request.reset_state
