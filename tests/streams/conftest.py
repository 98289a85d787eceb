"""tests/streams on every Python CI runs it on: the files that run LLM exports are skipped on Python
3.10 only, whose newest onnxruntime wheel (1.23) has no ``causal`` attribute on
GroupQueryAttention, which every LLM export's attention runs on (docs/contributing.md#ci)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
LLM_FILES = {"test_pool_kv.py"}  # a file here that loads an LLM export belongs in this set
WHY = "onnxruntime 1.23, the last with a Python 3.10 wheel, has no GroupQueryAttention causal attribute"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if sys.version_info >= (3, 11):
        return
    for item in items:
        path = Path(item.path).resolve()
        if path.parent == HERE and path.name in LLM_FILES:
            item.add_marker(pytest.mark.skip(reason=WHY))
