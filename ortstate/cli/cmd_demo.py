"""``ortstate demo``: the streaming character-LSTM demo (see :mod:`ortstate.cli.demo`)."""

from __future__ import annotations

from . import demo
from .command import Command

DESCRIPTION = """\
Convert a tiny stateful character LSTM (an OpenVINO IR shipped with ortstate, made stateful with
MakeStateful as OpenVINO users do) and stream generated text one character per step through
StatefulSession: the LSTM state lives in the variables, not in the inputs. Then reset_state() and
show that a new stream starts fresh, and print the per-step latency. With openvino installed the
same IR runs in OpenVINO side by side and the demo reports whether both produced the same text.

examples:
  ortstate demo
  ortstate demo --prompt "Errors should" --chars 200
  ortstate demo --form custom-op --no-openvino   # through the Python state ops
  ortstate demo --seed 3          # sample instead of greedy decoding"""

COMMAND = Command(
    "demo", "stream text from a stateful char-LSTM converted from OpenVINO IR", DESCRIPTION, demo.configure, demo.run
)
