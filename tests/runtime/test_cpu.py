"""``usable_cores``: the physical cores of the CPUs a process may use, as Linux's ``/proc/cpuinfo``
pairs logical CPUs with cores (what ``serve`` and ``ContinuousBatcher`` default their threads to)."""

from __future__ import annotations

import os

import pytest

from ortstate.runtime.cpu import cores_of, usable_cores


def cpuinfo(*cpus: tuple[int, int, int] | int) -> str:
    """A ``/proc/cpuinfo`` of CPUs given as (processor, physical id, core id), or a processor alone
    (a cpuinfo that does not say its core)."""
    blocks = []
    for cpu in cpus:
        if isinstance(cpu, int):
            blocks.append(f"processor\t: {cpu}\nmodel name\t: some CPU\n")
        else:
            blocks.append(f"processor\t: {cpu[0]}\nphysical id\t: {cpu[1]}\nsiblings\t: 4\ncore id\t\t: {cpu[2]}\n")
    return "\n".join(blocks)


HYPER = cpuinfo((0, 0, 0), (1, 0, 1), (2, 0, 0), (3, 0, 1))  # 2 cores, 2 threads each
SOCKETS = cpuinfo((0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1))  # core ids repeat on each socket


@pytest.mark.parametrize(
    ("cpus", "text", "cores"),
    [
        ({0, 1, 2, 3}, HYPER, 2),  # a core's hyper-threads count once
        ({0, 2}, HYPER, 1),  # an affinity of one core's two threads
        ({0, 1}, HYPER, 2),
        ({1}, HYPER, 1),
        ({0, 1, 2, 3}, SOCKETS, 4),  # core 0 of socket 0 is not core 0 of socket 1
        ({0, 1}, SOCKETS, 2),
        ({0, 1, 2}, cpuinfo(0, 1, 2), 3),  # cores not said: every CPU counts
        ({0, 1, 2, 3}, "", 4),  # no cpuinfo at all
        ({5}, HYPER, 1),  # a CPU cpuinfo does not list
    ],
)
def test_cores_of_counts_physical_cores_of_the_cpus_allowed(cpus: set[int], text: str, cores: int) -> None:
    assert cores_of(cpus, text) == cores


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux's CPU affinity")
def test_usable_cores_are_those_of_this_process_affinity() -> None:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        text = f.read()
    allowed = os.sched_getaffinity(0)
    assert usable_cores() == cores_of(allowed, text)
    assert 1 <= usable_cores() <= len(allowed)
