"""Run fuzz mutants (see fuzz_ir.py) in worker processes that may crash, hang or run out of memory.

A :class:`Pool` of subprocess workers, each under an address-space limit, converts every mutant in
both forms and runs one step; a worker that dies or hangs is replaced and its job is classified
``crash`` / ``hang`` (a ``MemoryError`` is ``memory``). Run as ``python tests/fuzz_pool.py --worker
LIMIT`` this module is such a worker (JSON lines on stdin and stdout).
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_ir import BASES, ROOT, Mutant, mutant, verdict  # noqa: E402

MEMORY_LIMIT = 4 << 30
MAX_FEED_BYTES = 256 << 20


# -- the worker side ----------------------------------------------------------------------------------
def _feeds(inputs: list[Any], seed: int) -> dict[str, Any] | None:
    """Inputs for one step: dynamic dims 1, floats random, ints 0 (masks 1); None if over the cap."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feeds: dict[str, Any] = {}
    total = 0
    for i in inputs:
        shape = [d if isinstance(d, int) and d >= 0 else 1 for d in (i.shape or [])]
        name = i.type[len("tensor(") : -1]
        dtype = np.dtype({"float": "float32", "double": "float64", "string": "object"}.get(name, name))
        total += int(np.prod(shape, dtype=object)) * max(dtype.itemsize, 1)
        if total > MAX_FEED_BYTES:
            return None
        if dtype.kind == "f":
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "O":
            feeds[i.name] = np.full(shape, "a", dtype=object)
        else:
            feeds[i.name] = np.full(shape, 1 if "mask" in i.name else 0, dtype=dtype)
    return feeds


def evaluate(xml: str, explicit: bool, seed: int) -> dict[str, Any]:
    """Convert ``xml``, load it, run one step: what happened, as JSON-able data."""
    import onnxruntime as ort

    import ortstate

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 4
    stage = "convert"
    try:
        model = ortstate.convert(xml, explicit_state=explicit)
        stage = "load"
        session = ortstate.StatefulSession(model, options, form="explicit" if explicit else "custom-op")
        stage = "feeds"
        feeds = _feeds(session.get_inputs(), seed)
        if feeds is None:
            return {"outcome": "too_large", "stage": stage}
        stage = "run"
        outputs = session.run(None, feeds)
        if not explicit:
            # StatefulSession's default runs the same model rewritten into the explicit form: it
            # must load and give the same outputs as the Python state ops.
            stage = "rewrite"
            rewritten = ortstate.StatefulSession(model, options)
            stage = "rewrite-run"
            again = rewritten.run(None, feeds)
            if not all(_same(a, b) for a, b in zip(outputs, again)) or len(outputs) != len(again):
                return {"outcome": "rewrite_mismatch", "stage": stage, "message": "rewritten outputs differ"}
        return {"outcome": "ok", "stage": stage}
    except MemoryError:
        return {"outcome": "memory", "stage": stage}
    except ortstate.OrtStateError as exc:
        if stage.startswith("rewrite"):
            # the Python state ops ran this model: its rewritten form must load and run as well
            error = {"error": type(exc).__name__, "message": str(exc)[:2000]}
            return {"outcome": "rewrite_failed", "stage": stage} | error
        outcome = "run_error" if stage == "run" else "rejected"
        if stage == "run" and not isinstance(exc, ortstate.RunError):
            outcome = "wrong_error"
        return {"outcome": outcome, "stage": stage, "error": type(exc).__name__, "message": str(exc)[:2000]}
    except Exception as exc:  # noqa: BLE001 - the point is to report anything else
        import traceback

        tail = "".join(traceback.format_exception(exc)[-4:])[-1500:]
        return {"outcome": "exception", "stage": stage, "error": type(exc).__name__, "message": tail}


def _same(a: Any, b: Any) -> bool:
    import numpy as np

    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")


def _probe(kind: str) -> dict[str, Any]:
    """Misbehave on purpose, so tests can check the pool notices."""
    if kind == "crash":
        os.abort()
    if kind == "hang":
        time.sleep(3600)
    if kind == "alloc":
        try:
            bytearray(8 << 30)
        except MemoryError:
            return {"outcome": "memory", "stage": "probe"}
    return {"outcome": "ok", "stage": "probe"}


def worker_main(memory: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything else writing to stdout must not corrupt the protocol
    sys.path.insert(0, str(ROOT))
    for line in sys.stdin:
        job = json.loads(line)
        result = _probe(job["probe"]) if "probe" in job else evaluate(job["xml"], job["explicit"], job["seed"])
        protocol.write(json.dumps(result) + "\n")
        protocol.flush()


# -- the pool -------------------------------------------------------------------------------------------
class _Worker:
    def __init__(self, memory: int) -> None:
        self.stderr = tempfile.TemporaryFile()
        env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(memory)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env, cwd=ROOT,
        )  # fmt: skip
        self.job: int | None = None
        self.deadline = 0.0
        self.done = 0

    def send(self, index: int, job: dict[str, Any], timeout: float) -> None:
        assert self.proc.stdin is not None
        self.job, self.deadline = index, time.monotonic() + timeout
        self.proc.stdin.write((json.dumps(job) + "\n").encode())
        self.proc.stdin.flush()

    def stop(self) -> dict[str, Any]:
        """Kill the process; what it left on stderr."""
        self.proc.kill()
        rc = self.proc.wait()
        self.stderr.seek(0)
        tail = self.stderr.read()[-800:].decode(errors="replace")
        self.stderr.close()
        return {"returncode": rc, "message": tail}


class Pool:
    """``workers`` subprocesses each running one job at a time, replaced when they die or hang."""

    def __init__(self, workers: int = 2, timeout: float = 30.0, memory: int = MEMORY_LIMIT) -> None:
        self.size, self.timeout, self.memory = workers, timeout, memory

    def run(self, jobs: Iterable[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
        """Yield ``(job index, result)`` as jobs finish (not in order)."""
        queue = list(enumerate(jobs))[::-1]
        workers = [_Worker(self.memory) for _ in range(min(self.size, len(queue)))]
        selector = selectors.DefaultSelector()
        for w in workers:
            selector.register(w.proc.stdout, selectors.EVENT_READ, w)  # type: ignore[arg-type]

        def replace(old: _Worker) -> None:
            selector.unregister(old.proc.stdout)  # type: ignore[arg-type]
            workers.remove(old)
            new = _Worker(self.memory)
            workers.append(new)
            selector.register(new.proc.stdout, selectors.EVENT_READ, new)  # type: ignore[arg-type]

        try:
            while queue or any(w.job is not None for w in workers):
                for w in workers:
                    if w.job is None and queue:
                        w.send(*queue.pop(), self.timeout)
                wait = min(w.deadline for w in workers if w.job is not None) - time.monotonic()
                for key, _ in selector.select(max(wait, 0.0)):
                    w = key.data
                    line = w.proc.stdout.readline()
                    index, w.job = w.job, None
                    if line:
                        w.done += 1
                        result = json.loads(line)
                        if result["outcome"] == "memory" or w.done >= 200:
                            w.stop()  # a fresh heap for the next job
                            replace(w)
                    else:
                        result = {"outcome": "crash", "stage": "?", **w.stop()}
                        replace(w)
                    yield index, result
                now = time.monotonic()
                for w in [w for w in workers if w.job is not None and w.deadline <= now]:
                    index = w.job
                    result = {"outcome": "hang", "stage": "?", **w.stop()}
                    replace(w)
                    yield index, result
        finally:
            for w in workers:
                w.stop()
            selector.close()


@dataclass(frozen=True)
class Record:
    mutant: Mutant
    explicit: bool
    verdict: str
    result: dict[str, Any]

    def describe(self) -> str:
        m, form = self.mutant, "explicit" if self.explicit else "custom-op"
        text = self.result.get("message", "").strip().replace("\n", " | ")[:600]
        where = f"#{m.index} {m.base} [{m.kind}: {m.detail[:120]}] {form}"
        return f"{where}: {self.verdict} ({self.result.get('stage')}) {text}"


def campaign(
    seed: int, count: int, directory: Path, pool: Pool, start: int = 0, bases: tuple[str, ...] = BASES
) -> Iterator[Record]:
    """Mutants ``start .. start+count-1`` of ``seed``, each converted and run in both forms."""
    mutants = [mutant(seed, i, bases) for i in range(start, start + count)]
    paths = [str(m.write(directory / f"m{m.index}")) for m in mutants]
    jobs = [{"xml": p, "explicit": ex, "seed": m.index} for m, p in zip(mutants, paths) for ex in (False, True)]
    for index, result in pool.run(jobs):
        m, path = mutants[index // 2], paths[index // 2]
        yield Record(m, bool(index % 2), verdict(m, path, result), result)


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    worker_main(int(sys.argv[2]))
