"""runtime/split_rows.py: the row count up to which a 4-bit weight's exact int8 split runs, set per
CPU as a model loads (the converter writes ONNX Runtime's safe 3). Both paths give OpenVINO's f32
result to f32 rounding; which one ran shows in the bits of the logits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov
import pytest

import ortstate
from ortstate.errors import OrtStateError
from ortstate.meta import SPLIT_ROWS
from ortstate.runtime import split_rows
from ortstate.runtime.loaded import load_model
from ortstate.verify import OV_CONFIG

INT4 = Path(__file__).resolve().parents[2] / "models" / "llm" / "llama_int4" / "openvino_model.xml"
PROMPT = np.array([[5, 17, 99, 3, 42, 7, 11, 60]], np.int64)  # 8 rows of activations in every linear


FEEDS = {
    "input_ids": PROMPT,
    "attention_mask": np.ones_like(PROMPT),
    "position_ids": np.arange(PROMPT.shape[1])[None],
    "beam_idx": np.zeros(1, np.int32),
}


@pytest.fixture(scope="module", params=[True, False], ids=["explicit", "custom-op"])
def int4_model(request):
    return ortstate.convert(str(INT4), explicit_state=request.param)


def _logits(model, env: str, monkeypatch) -> np.ndarray:
    monkeypatch.setenv(split_rows.ENV, env)
    session = ortstate.StatefulSession(model)
    names = {i.name for i in session.get_inputs()}
    return session.run(["logits"], {k: v for k, v in FEEDS.items() if k in names})[0]


def test_the_converter_writes_the_safe_row_count_for_each_k(int4_model) -> None:
    found = {i.name: i for i in int4_model.graph.initializer if SPLIT_ROWS.fullmatch(i.name)}
    assert found, "no split row initializer: the int4 model lost its exact split"
    for name, init in found.items():
        k = int(SPLIT_ROWS.fullmatch(name).group(1))
        assert np.frombuffer(init.raw_data, np.int64).tolist() == [3 * k], name


def test_the_row_count_set_at_load_picks_the_kernel(int4_model, monkeypatch) -> None:
    split = _logits(int4_model, "1000", monkeypatch)  # 8 rows: the split
    f32 = _logits(int4_model, "0", monkeypatch)  # the f32-compute kernel
    assert not np.array_equal(split, f32), "both settings ran the same kernel: the setting did not reach the run"
    # OpenVINO in its exact config (without DYNAMIC_QUANTIZATION_GROUP_SIZE 0 it quantizes activations)
    request = ov.Core().compile_model(str(INT4), "CPU", OV_CONFIG).create_infer_request()
    want = request.infer({i.get_any_name(): FEEDS[i.get_any_name()] for i in request.model_inputs})["logits"]
    for got in (split, f32):  # both OpenVINO's result to f32 rounding
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert np.array_equal(_logits(int4_model, "8", monkeypatch), split)  # up to 8 rows: the split
    assert np.array_equal(_logits(int4_model, "7", monkeypatch), f32)


def test_the_cpu_decides_without_the_variable(monkeypatch) -> None:
    monkeypatch.delenv(split_rows.ENV, raising=False)
    monkeypatch.setattr(split_rows, "cpu_flags", lambda: frozenset({"avx2", "avx512f", "avx512_vnni"}))
    assert split_rows.split_max_rows() == split_rows.VNNI_ROWS
    monkeypatch.setattr(split_rows, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    assert split_rows.split_max_rows() is None  # the model's own 3


@pytest.mark.parametrize("value", ["many", "-1", "2.5"])
def test_a_bad_setting_is_one_line_naming_the_variable(int4_model, monkeypatch, value: str) -> None:
    monkeypatch.setenv(split_rows.ENV, value)
    with pytest.raises(OrtStateError, match=rf"^ORTSTATE_SPLIT_MAX_ROWS must be a whole number of rows .*{value!r}$"):
        load_model(int4_model)


def test_a_model_without_the_split_loads_as_before(monkeypatch) -> None:
    monkeypatch.setenv(split_rows.ENV, "1000")
    model = ortstate.convert(str(INT4.parents[1] / "llama" / "openvino_model.xml"), explicit_state=True)
    assert split_rows.split_rows_values(model) == {}
    load_model(model)
