"""What this machine's CPU says of itself (Linux's ``/proc/cpuinfo``): the runtime picks kernels'
paths by its instruction sets, benchmarks record them. Elsewhere it says nothing."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

__all__ = ["cores_of", "cpu_fields", "cpu_flags", "usable_cores"]


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
    the cores they use by default (see :func:`cores_of`)."""
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        text = ""
    return cores_of(allowed, text)


def cores_of(cpus: set[int], cpuinfo: str) -> int:
    """How many physical cores the logical ``cpus`` are on, as ``cpuinfo`` (the text of Linux's
    ``/proc/cpuinfo``) pairs them: CPUs of one (``physical id``, ``core id``) count once. Where it
    does not say which core a CPU is, every CPU counts (at least 1)."""
    cores: set[tuple[str, str]] = set()
    for block in cpuinfo.split("\n\n"):
        fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in block.splitlines())}
        cpu = fields.get("processor", "")
        if not cpu.isdigit() or int(cpu) not in cpus:
            continue
        if "core id" not in fields:
            return max(1, len(cpus))  # cores not said (a VM's or another architecture's cpuinfo)
        cores.add((fields.get("physical id", "0"), fields["core id"]))
    return max(1, len(cores) if cores else len(cpus))
