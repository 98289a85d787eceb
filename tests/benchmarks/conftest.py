"""What the benchmarks' tests share: this checkout's ``benchmarks`` package importable (as ``python -m
benchmarks`` imports it from the checkout's root), and a results document around made-up data."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

from benchmarks.common import SCHEMA  # noqa: E402

MACHINE = {"cpu": "CPU X", "cpu_flags": ["avx2", "fma"], "cores": 2}
VERSIONS = {"python": "3.11.7", "onnxruntime": "1.31.1", "openvino": "2026.4.1", "ortstate": "0.1.0"}


@pytest.fixture
def results_doc() -> Callable[..., dict[str, Any]]:
    """``results_doc(data, suite=..., name=..., **envelope fields)``: a results document as
    ``benchmarks.common.write_results`` writes one."""

    def make(data: dict[str, Any], suite: str = "test", name: str = "test", **fields: Any) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "suite": suite,
            "name": name,
            "started": "2026-01-01T00:00:00",
            "seconds": 60.0,
            "machine": MACHINE,
            "load": {"before": [0.5, 0.4, 0.3], "after": [0.7, 0.5, 0.3]},
            "versions": VERSIONS,
            "source": {"commit": "0123456789abcdef", "branch": "main", "dirty": False},
            "images": [],
            "data": data,
        } | fields

    return make
