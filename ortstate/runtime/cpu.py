"""What this machine's CPU says of itself (Linux's ``/proc/cpuinfo``): the runtime picks kernels'
paths by its instruction sets, benchmarks record them. Elsewhere it says nothing."""

from __future__ import annotations

from functools import cache
from pathlib import Path

__all__ = ["cpu_fields", "cpu_flags"]


@cache
def cpu_fields() -> dict[str, str]:
    """The first processor's fields (``model name``, ``flags``, ...); empty where there is no
    ``/proc/cpuinfo``."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block ends
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


@cache
def cpu_flags() -> frozenset[str]:
    """The CPU's instruction-set flags as Linux names them (``avx2``, ``avx512_vnni``, ...)."""
    return frozenset(cpu_fields().get("flags", "").split())
