"""Every recurrent model committed under ``models/`` (made by ``models/make_recurrent_models.py``)
converts in both forms and matches OpenVINO step by step, through resets.

Models are discovered from their ``meta.json``, which also says which shapes to feed and which
variables must be set before the first run (a dynamic-batch zero init is empty).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import pytest
from oracle import RESET, REWRITTEN, check_steps, open_session, ov_request

import ortstate

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
GENERATOR = "models/make_recurrent_models.py"


def _recurrent_models() -> list[Path]:
    found = []
    for meta_path in sorted(MODELS_DIR.glob("*/meta.json")):
        if json.loads(meta_path.read_text(encoding="utf-8")).get("generator") == GENERATOR:
            found.append(meta_path.parent)
    return found


MODELS = _recurrent_models()


def _meta(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "meta.json").read_text(encoding="utf-8"))


def _set_states(values: dict[str, np.ndarray]) -> Callable[[Any], None]:
    """A step setting variables on either runtime (OpenVINO wants ``ov.Tensor``, ortstate numpy)."""

    def apply(runner: Any) -> None:
        for state in runner.query_state():
            if state.name in values:
                value = values[state.name]
                state.state = ov.Tensor(value.copy()) if isinstance(runner, ov.InferRequest) else value.copy()

    return apply


def _steps(meta: dict[str, Any], rng: np.random.Generator) -> list[Any]:
    """Two passes of every feed shape, four steps of one shape (the runtime's bound fast path takes
    over), a reset, four more of that shape (still bound: the first one computes the init again),
    one more pass: states set after each reset if needed."""
    types = {name: np.dtype(spec["type"]) for name, spec in meta["inputs"].items()}

    def feed(shapes: dict[str, list[int]]) -> dict[str, np.ndarray]:
        return {name: rng.standard_normal(shape).astype(types[name]) for name, shape in shapes.items()}

    def init() -> list[Any]:
        if not meta["state_shapes"]:
            return []
        values = {k: rng.standard_normal(s).astype(np.float32) for k, s in meta["state_shapes"].items()}
        return [_set_states(values)]

    shapes = meta["test_feeds"]
    steady = [shapes[0]] * 4
    steps: list[Any] = init() + [feed(s) for s in shapes * 2 + steady]
    return steps + [RESET] + init() + [feed(s) for s in steady + shapes]


def test_models_are_discovered() -> None:
    assert len(MODELS) >= 10, f"recurrent models under {MODELS_DIR}: {[m.name for m in MODELS]}"
    for folder in MODELS:
        assert (folder / "model.xml").is_file() and (folder / "model.bin").is_file(), folder


@pytest.mark.parametrize("folder", MODELS, ids=[m.name for m in MODELS])
def test_model_matches_openvino(folder: Path) -> None:
    meta = _meta(folder)
    tol = 1e-3 if meta["compressed_to_f16"] else 1e-4
    steps = _steps(meta, np.random.default_rng(zlib.crc32(folder.name.encode())))
    check_steps(folder / "model.xml", steps, rtol=tol, atol=tol)


@pytest.mark.parametrize("folder", MODELS, ids=[m.name for m in MODELS])
def test_variables_match_meta(folder: Path) -> None:
    """The converted model declares exactly the IR's variables, in both forms."""
    meta = _meta(folder)
    want = sorted(v["id"] for v in meta["variables"])
    for explicit in (False, True):
        session = open_session(folder / "model.xml", explicit)
        assert sorted(session.variables) == want, f"explicit={explicit}"


@pytest.mark.parametrize("explicit", [False, True, REWRITTEN], ids=["custom-op", "explicit", REWRITTEN])
def test_dynamic_batch_needs_state_set_first(explicit: bool) -> None:
    """The trap: the zero init of a dynamic-batch state is empty, so the first run fails in both runtimes."""
    folder = MODELS_DIR / "lstm_2l_dynbatch"
    meta = _meta(folder)
    x = np.random.default_rng(7).standard_normal(meta["test_feeds"][0]["x"]).astype(np.float32)
    with pytest.raises(RuntimeError):
        ov_request(folder / "model.xml").infer({"x": x})
    session = open_session(folder / "model.xml", explicit)
    with pytest.raises(ortstate.OrtStateError):
        session.run(None, {"x": x})
    # after the failed run the state can still be set, and the model then runs
    values = {k: np.zeros(s, np.float32) for k, s in meta["state_shapes"].items()}
    _set_states(values)(session)
    (y,) = session.run(None, {"x": x})
    assert y.shape == (x.shape[0], x.shape[1], 16)
