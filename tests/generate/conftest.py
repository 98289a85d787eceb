"""Shared fixtures of the generation tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from oracle import REPO

from ortstate.generate import Generator


@pytest.fixture(scope="module")
def lone() -> Callable[[str], Generator]:
    """``lone(name)``: a lone Generator of ``models/llm/<name>``, the oracle of batched generation,
    loaded once per test module."""
    loaded: dict[str, Generator] = {}

    def get(name: str) -> Generator:
        if name not in loaded:
            loaded[name] = Generator.from_dir(REPO / "models" / "llm" / name)
        return loaded[name]

    return get
