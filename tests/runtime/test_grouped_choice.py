"""runtime/grouped_choice.py: ``ORTSTATE_GROUPED_DECODE`` decides, as a model loads, whether its
grouped attention's decode steps run the grouped products (``passes.grouped_decode``) or ONNX
Runtime's kernel. The tiny Qwen2 (4 query heads over 2 KV heads, short contexts) is below both of
the pass's thresholds: ``auto`` keeps the kernel there, ``on`` takes the products (and, with the
thresholds lowered, ``auto`` takes them and ``off`` does not). Which ran shows
in ONNX Runtime's profile (the products write each step's key and value rows with two
ScatterElements per layer); the logits are the kernel's and OpenVINO's either way."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import openvino as ov
import pytest

import ortstate
from ortstate.errors import OrtStateError
from ortstate.passes import grouped_decode
from ortstate.runtime import grouped_choice
from ortstate.runtime.loaded import load_model

QWEN2 = Path(__file__).resolve().parents[2] / "models" / "llm" / "qwen2" / "openvino_model.xml"
LAYERS = 2
PROMPT = [5, 17, 99, 3, 42, 7]
DECODE_STEPS = 5


def _feeds(tokens: list[int], past: int) -> dict[str, np.ndarray]:
    return {
        "input_ids": np.array([tokens], np.int64),
        "attention_mask": np.ones((1, past + len(tokens)), np.int64),
        "position_ids": np.arange(past, past + len(tokens), dtype=np.int64)[None],
        "beam_idx": np.zeros(1, np.int32),
    }


def _steps() -> list[dict[str, np.ndarray]]:
    """The prompt, then greedy-looking decode steps of fixed tokens (the same feeds for every run)."""
    feeds, past = [_feeds(PROMPT, 0)], len(PROMPT)
    for k in range(DECODE_STEPS):
        feeds.append(_feeds([11 + k], past))
        past += 1
    return feeds


def _run(setting: str | None, form: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[np.ndarray, int]:
    """Every step's logits, and how many ScatterElements ran, in a session loaded under ``setting``."""
    if setting is None:
        monkeypatch.delenv(grouped_choice.ENV, raising=False)
    else:
        monkeypatch.setenv(grouped_choice.ENV, setting)
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / f"profile-{setting}-{form}")
    session = ortstate.StatefulSession(QWEN2, sess_options=options, form=form)
    logits = np.concatenate([session.run(["logits"], f)[0][:, -1] for f in _steps()])
    trace = json.loads(Path(session.loaded.session.end_profiling()).read_text())
    scatters = sum(1 for e in trace if e.get("cat") == "Node" and e["args"].get("op_name") == "ScatterElements")
    return logits, scatters


@pytest.fixture(scope="module")
def openvino_logits() -> np.ndarray:
    request = ov.Core().compile_model(QWEN2, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
    return np.concatenate([request.infer(f)["logits"][:, -1] for f in _steps()])


@pytest.mark.parametrize(
    ("setting", "form", "products"),
    [
        (None, "auto", False),
        ("auto", "auto", False),
        ("off", "explicit", False),
        ("on", "auto", True),
        (" ON ", "explicit", True),
        ("on", "custom-op", False),  # the products need the explicit form's KV buffers
    ],
)
def test_the_setting_decides_at_load(setting, form, products, openvino_logits, monkeypatch, tmp_path) -> None:
    logits, scatters = _run(setting, form, monkeypatch, tmp_path)
    assert scatters == (2 * LAYERS * DECODE_STEPS if products else 0)
    np.testing.assert_allclose(logits, openvino_logits, atol=3e-3, rtol=0)


@pytest.mark.parametrize(("setting", "products"), [("auto", True), ("off", False)])
def test_off_keeps_the_kernel_where_auto_takes_the_products(setting, products, monkeypatch, tmp_path) -> None:
    """With the pass's thresholds lowered to what the tiny model meets, ``auto`` takes the products
    and ``off`` still does not."""
    monkeypatch.setattr(grouped_decode, "_MIN_GROUP", 2)
    monkeypatch.setattr(grouped_decode, "_MIN_ROWS", 0)
    _, scatters = _run(setting, "auto", monkeypatch, tmp_path)
    assert scatters == (2 * LAYERS * DECODE_STEPS if products else 0)


def test_the_products_give_the_kernels_logits(monkeypatch, tmp_path) -> None:
    kernel, _ = _run("off", "auto", monkeypatch, tmp_path)
    products, _ = _run("on", "auto", monkeypatch, tmp_path)
    np.testing.assert_allclose(products, kernel, atol=1e-5, rtol=0)


@pytest.mark.parametrize("value", ["yes", "1", "always"])
def test_a_bad_setting_is_one_line_naming_the_variable(monkeypatch, value: str) -> None:
    monkeypatch.setenv(grouped_choice.ENV, value)
    with pytest.raises(OrtStateError, match=rf"^ORTSTATE_GROUPED_DECODE must be one of auto, on, off, not {value!r}$"):
        load_model(ortstate.convert(str(QWEN2)))
