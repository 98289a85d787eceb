"""Ctrl-C (SIGINT) while a model runs: ``KeyboardInterrupt`` in the caller after the run, no variable
changed, the process alive. Each scenario runs in its own interpreter (an abort must not take pytest
down) with a thread sending SIGINT to the process every 0-2 ms.

The scenario installs Python's ``KeyboardInterrupt`` handler itself before it relies on it: a
process started with SIGINT ignored (a background job of a non-interactive shell, ``nohup``, some
CI runners) passes that on, and Python then leaves SIGINT ignored. Each test starts its scenario
both ways, so it holds however pytest itself was started."""

from __future__ import annotations

import signal

import pytest
from isolated import outcome, run_isolated

STARTS = {"default": signal.SIG_DFL, "ignored": signal.SIG_IGN}  # SIGINT as the scenario inherits it

SENDER = """
import os, random, signal, threading, time
import numpy as np
import ortstate

# What an interactive start gives Python; inherited SIG_IGN would make every SIGINT below vanish.
signal.signal(signal.SIGINT, signal.default_int_handler)

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


@pytest.mark.parametrize("start", sorted(STARTS))
@pytest.mark.parametrize("form", ["custom-op", "explicit"])
def test_ctrl_c_during_runs(form: str, start: str) -> None:
    proc = run_isolated(RUNS, form, sigint=STARTS[start])
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


@pytest.mark.parametrize("start", sorted(STARTS))
def test_ctrl_c_during_generation(start: str) -> None:
    proc = run_isolated(GENERATION, sigint=STARTS[start])
    assert proc.returncode == 0, outcome(proc)
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("OK"), outcome(proc)
    assert int(line.split("interrupted=")[1]) >= 10, line  # the scenario did interrupt generations
