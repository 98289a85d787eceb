"""What this machine's CPU says of itself (Linux's ``/proc/cpuinfo``): the runtime picks kernels'
paths by its instruction sets, benchmarks record them. Elsewhere it says nothing."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

__all__ = ["cpu_fields", "cpu_flags", "usable_cores"]


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


@cache
def usable_cores() -> int:
    """The physical cores this process may run on: the CPUs of its affinity (``taskset``, a
    container's cpuset), hyper-threads of one core counted once, as ONNX Runtime and OpenVINO count
    the cores they use by default. Where ``/proc/cpuinfo`` does not say which core a CPU is, every
    CPU allowed counts."""
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)
    cores = _cores_of(allowed)
    return max(1, len(cores) if cores else len(allowed))


def _cores_of(cpus: set[int]) -> set[tuple[str, str]]:
    """The (physical id, core id) of each of ``cpus``; empty where ``/proc/cpuinfo`` lacks them."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return set()
    cores: set[tuple[str, str]] = set()
    for block in text.split("\n\n"):
        fields = dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        if "processor" not in fields or "core id" not in fields:
            continue
        if fields["processor"].isdigit() and int(fields["processor"]) in cpus:
            cores.add((fields.get("physical id", "0"), fields["core id"]))
    return cores
