"""Ctrl-C (SIGINT) while a model runs: ``KeyboardInterrupt`` in the caller after the run, no variable
changed, the process alive. Each scenario runs in its own interpreter (an abort must not take pytest
down) with a thread sending SIGINT to the process every 0-2 ms."""

from __future__ import annotations

import pytest
from isolated import outcome, run_isolated

SENDER = """
import os, random, signal, threading, time
import numpy as np
import ortstate

stop, started = threading.Event(), threading.Event()

def sender():
    rng = random.Random(7)
    started.wait()
    while not stop.is_set():
        time.sleep(rng.uniform(0, 0.002))
        os.kill(os.getpid(), signal.SIGINT)

threading.Thread(target=sender, daemon=True).start()

def finish(message):
    stop.set()
    while True:  # a signal still in flight must not cut the report short
        try:
            time.sleep(0.05)
            print(message, flush=True)
            return
        except KeyboardInterrupt:
            pass
"""

RUNS = (
    SENDER
    + """
import sys
model = ortstate.convert("models/accumulator/model.xml", explicit_state=sys.argv[1] == "explicit")
session = ortstate.StatefulSession(model, form=sys.argv[1])
x = np.ones((1, 3), np.float32)

def committed():
    # acc = k * x after k committed runs (shape [1, 0] before the first)
    state = session.query_state()[0].state
    k = int(state[0, 0]) if state.size else 0
    assert np.array_equal(state, k * x) or (k == 0 and state.shape == (1, 0)), state
    return k

k, inside = 0, 0
started.set()
for _ in range(20000):
    if inside >= 40:
        break
    try:
        try:
            out = session.run(None, {"x": x})
        except KeyboardInterrupt:
            inside += 1
            assert committed() == k, "an interrupted run changed a variable"
            continue
        now = committed()
        assert now == k + 1 and np.array_equal(out[0], now * x), (now, k)
        k = now
    except KeyboardInterrupt:  # landed in this loop, outside run: the run before it committed or not
        now = committed()
        assert now in (k, k + 1), (now, k)
        k = now
finish(f"OK runs={k} interrupted={inside}")
"""
)


@pytest.mark.parametrize("form", ["custom-op", "explicit"])
def test_ctrl_c_during_runs(form: str) -> None:
    proc = run_isolated(RUNS, form)
    assert proc.returncode == 0, outcome(proc)
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("OK"), outcome(proc)
    assert int(line.split("interrupted=")[1]) >= 40, line  # the scenario did interrupt runs


GENERATION = (
    SENDER
    + """
import json
from ortstate.generate import Generator
folder = "models/llm/llama"
gen = Generator.from_dir(folder, form="custom-op")
case = json.load(open(f"{folder}/reference.json"))
prompt, want = case["prompt_ids"][0], case["new_tokens"][0]
done, interrupted = 0, 0
started.set()
while done < 3 or interrupted < 10:
    try:
        tokens = gen.generate(prompt, max_new_tokens=len(want), stop_at_eos=False)
    except KeyboardInterrupt:
        interrupted += 1
        continue
    assert tokens == want, (tokens, want)  # an interrupted generation left nothing behind
    done += 1
    if done > 200:
        break
finish(f"OK generated={done} interrupted={interrupted}")
"""
)


def test_ctrl_c_during_generation() -> None:
    proc = run_isolated(GENERATION)
    assert proc.returncode == 0, outcome(proc)
    assert proc.stdout.strip().splitlines()[-1].startswith("OK"), outcome(proc)
