"""What runs, decided from bookkeeping alone: the scheduling of a pool of streams and of the
generations on it, apart from anything that runs (vLLM's split: the scheduler is pure bookkeeping,
the executor only runs).

Pure: no numpy, no ONNX Runtime, no pool (``tests/test_imports.py`` checks it), so each decision is
tested alone, on tables of plans:

- :mod:`.requests`: generation requests waiting and running, admission against the pool's rows
  and the one KV budget, prompts fed in chunks; what ``ortstate.generate``'s engine runs each tick;
- :mod:`.budget`: the KV budget in positions, and which stream makes room when a step would pass it;
- :mod:`.runs`: which steps of a KV pool share one run;
- :mod:`.rounds`: which of the steps and commands queued for a pool's loop run in its next round,
  and when that round starts.

The mechanics that apply the decisions (the pool's arena and runs, its loop's thread and queue, the
generation's feeds and sampling) stay in ``ortstate.streams`` and ``ortstate.generate``.
"""
