"""Many infer requests on one StatefulSession, stepped from worker threads: throughput and memory.

``threads`` here are Python worker threads, each stepping its share of the requests in turn (the
session itself runs with ``intra_op_num_threads=1``): with 2 workers on 2 cores, ONNX Runtime's
kernels can overlap while the GIL-holding parts (ortstate's Python, the PyOps) take turns.
The ``bare`` rows are the control: the explicit graph through one plain ``InferenceSession`` with
the states carried by hand, no ortstate at all; if they don't scale either, the machine is the
limit (other processes, the GIL around ``run``), not ortstate. The ``bare-processes`` rows (16
requests only) split the same bare requests over 1 or 2 worker *processes*, each with its own
session: no GIL between them, so they show what the machine's cores allow.
Memory per request (:func:`memory`) is measured in a fresh child process: its RSS grown by
creating N requests and running each through the workload's prefill and one step, divided by N,
next to the bytes the request's variables hold.
"""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

import ortstate
from benchmarks.common import child_command, child_env
from ortstate.meta import read_meta
from ortstate.timing import model_workload, session_options

FORMS = ("custom-op", "explicit", "bare", "bare-processes")
PROCESS_REQUESTS = 16  # the only request count the process control runs at


def rss_bytes() -> int:
    """Resident set size of this process (Linux ``/proc/self/statm``)."""
    pages = int(Path("/proc/self/statm").read_text(encoding="utf-8").split()[1])
    return pages * 4096


class _BareRequest:
    """The control: one shared bare ``InferenceSession`` on the explicit graph, states carried by hand."""

    def __init__(self, session: ort.InferenceSession, meta: Any) -> None:
        self._session, self._vars = session, meta.variables
        self._count = len(session.get_outputs()) - len(self._vars)
        self._state = {v.state_input: np.zeros(v.init_shape, np.dtype(v.carrier or v.dtype)) for v in self._vars}
        self._state |= {v.init_flag: np.array(False) for v in self._vars if v.init_flag}

    def run(self, names: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        values = self._session.run(None, {**feeds, **self._state})
        for v, value in zip(self._vars, values[self._count :]):
            self._state[v.state_input or ""] = value
        return values[: self._count]


def _pool(xml: Path, form: str, requests: int) -> list[Any]:
    model = ortstate.convert(xml, explicit_state=form != "custom-op")
    if form == "bare":
        session = ort.InferenceSession(model.SerializeToString(), session_options(1, model))
        return [_BareRequest(session, read_meta(model)) for _ in range(requests)]
    stateful = ortstate.StatefulSession(model, session_options(1, model), form=form)
    return [stateful.create_infer_request() for _ in range(requests)]


def _step_all(requests: list[Any], feeds: list[Any], steps: int) -> None:
    """``steps`` rounds, each running every request once (the feeds cycle)."""
    for k in range(steps):
        f = feeds[k % len(feeds)]
        for request in requests:
            request.run(None, f)


def _process_worker(xml: str, requests: int, steps: int, start: Any, results: Any) -> None:
    """One worker process of the process control: its own session and requests, timed from ``start``."""
    pool = _pool(Path(xml), "bare", requests)
    feeds = model_workload(xml, min(steps, 64)).steps
    for request in pool:
        request.run(None, feeds[0])
    start.wait()
    began = time.perf_counter()
    _step_all(pool, feeds, steps)
    results.put(time.perf_counter() - began)


def _run_processes(xml: Path, requests: int, workers: int, steps: int) -> float:
    """Elapsed seconds until the last of ``workers`` processes stepped its share of the requests."""
    context = multiprocessing.get_context("spawn")  # no fork of a process holding OpenVINO's threads
    start, results = context.Barrier(workers), context.Queue()
    share = requests // workers
    children = [
        context.Process(target=_process_worker, args=(str(xml), share, steps, start, results)) for _ in range(workers)
    ]
    for child in children:
        child.start()
    elapsed = max(results.get(timeout=600) for _ in children)
    for child in children:
        child.join()
    return elapsed


def run(xml: Path, requests: int, workers: int, steps: int, form: str) -> dict[str, Any]:
    """Aggregate steps/s of ``requests`` requests stepped ``steps`` times each by ``workers`` threads.

    ``form``: ``custom-op``, ``explicit``, ``bare`` (the control without ortstate), or
    ``bare-processes`` (the bare requests split over ``workers`` processes).
    """
    row = {"model": xml.stem, "form": form, "requests": requests, "threads": workers, "steps_per_request": steps}
    if form == "bare-processes":
        return row | {"steps_per_s": round(requests * steps / _run_processes(xml, requests, workers, steps), 1)}
    feeds = model_workload(xml, min(steps, 64)).steps
    pool = _pool(xml, form, requests)
    for request in pool:
        request.run(None, feeds[0])
    start_line = threading.Barrier(workers + 1)
    errors: list[BaseException] = []

    def work(mine: list[Any]) -> None:
        start_line.wait()
        try:
            _step_all(mine, feeds, steps)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(pool[w::workers],)) for w in range(workers)]
    for t in threads:
        t.start()
    start_line.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return row | {"steps_per_s": round(requests * steps / elapsed, 1)}


def sweep(
    xml: Path, counts: list[int], total_steps: int, progress: Any = None, repeats: int = 3
) -> list[dict[str, Any]]:
    """Every (form, requests, threads) point; ``total_steps`` steps are split over the requests.

    Each point is run ``repeats`` times with the thread counts alternating; the best rate is kept
    (other processes only ever slow a run down).
    """
    rows = []
    for form in FORMS:
        for n in counts if form != "bare-processes" else [c for c in counts if c == PROCESS_REQUESTS]:
            steps = max(4, total_steps // n)
            best: dict[int, dict[str, Any]] = {}
            for _ in range(repeats):
                for workers in (1, 2):
                    row = run(xml, n, workers, steps, form)
                    if workers not in best or row["steps_per_s"] > best[workers]["steps_per_s"]:
                        best[workers] = row
            rows += [best[1], best[2]]
            if progress:
                rate = best[2]["steps_per_s"] / best[1]["steps_per_s"]
                progress(f"concurrency {xml.stem} {form} {n} requests: 2 threads / 1 thread = {rate:.2f}")
    return rows


def speedup(rows: list[dict[str, Any]], form: str, requests: int, model: str = "char_lstm") -> float | None:
    """steps/s with 2 threads over steps/s with 1 thread at one point."""
    mine = [r for r in rows if r["model"] == model and r["form"] == form and r["requests"] == requests]
    rate = {r["threads"]: r["steps_per_s"] for r in mine}
    return rate[2] / rate[1] if 1 in rate and 2 in rate else None


def _memory_child(xml: str, requests: int, explicit: bool, position: int) -> dict[str, Any]:
    workload = model_workload(xml, 1, position)
    form = "explicit" if explicit else "custom-op"
    model = ortstate.convert(xml, explicit_state=explicit)
    session = ortstate.StatefulSession(model, session_options(1, model), form=form)

    def prime(request: Any) -> None:
        for feeds in workload.prefill + workload.steps:
            request.run(None, feeds)

    prime(session)  # the default request: the session's own allocations are made before counting
    before = rss_bytes()
    pool = [session.create_infer_request() for _ in range(requests)]
    for request in pool:
        prime(request)
    grown = rss_bytes() - before
    state = sum(v.state.nbytes for v in pool[0].query_state())
    return {
        "position": position if workload.prefill else None,
        "rss_per_request_kib": round(grown / requests / 1024, 1),
        "state_kib": round(state / 1024, 1),
    }


def memory(xml: Path, requests: int, explicit: bool, position: int = 16) -> dict[str, Any]:
    """RSS growth per request in a fresh process, and the bytes its variables hold (KiB)."""
    args = child_command("concurrency", "--memory", str(xml), str(requests), str(int(explicit)), str(position))
    child = subprocess.run(args, capture_output=True, text=True, check=True, env=child_env())
    row = json.loads(child.stdout.strip().splitlines()[-1])
    form = "explicit" if explicit else "custom-op"
    return {"model": xml.stem, "form": form, "requests": requests, "position": position} | row


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--memory":
        _, _, path, count, explicit_flag, pos = sys.argv
        print(json.dumps(_memory_child(path, int(count), explicit_flag == "1", int(pos))))
