"""What ``ortstate generate`` prints: new tokens as they come (stdout) and the latency summary (stderr)."""

from __future__ import annotations

import sys

import numpy as np

from ..generate import GenerationRun

__all__ = ["STOPPED", "IdPrinter", "latency_summary", "write_out"]


class IdPrinter:
    """Streams token ids to stdout, space-separated."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, token: int) -> None:
        sys.stdout.write(f"{' ' if self.count else ''}{token}")
        sys.stdout.flush()
        self.count += 1


def write_out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


STOPPED = {
    "eos": "stopped at eos",
    "stop_token": "stopped at a stop token",
    "stop_string": "stopped at a stop string",
    "grammar": "stopped: the JSON answer is complete",
    "max_new_tokens": "max new tokens reached",
}


def latency_summary(run: GenerationRun, form: str) -> str:
    """One line: prefill time, decode median/p90 per token, why it stopped."""
    parts = []
    if run.encoder_seconds:
        parts.append(f"encoder {run.encoder_seconds * 1e3:.2f} ms")
    plural = "s" * (run.prompt_tokens != 1)
    parts.append(f"prefill {run.prefill_seconds * 1e3:.2f} ms ({run.prompt_tokens} prompt token{plural})")
    decode = np.asarray(run.decode_seconds) * 1e6
    if decode.size:
        median, p90 = np.median(decode), np.percentile(decode, 90)
        tokens = f"{decode.size} token{'s' * (decode.size != 1)}"
        parts.append(f"decode {tokens}: median {median:.0f} µs, p90 {p90:.0f} µs per token")
    how = [f"{form} form"]
    if run.seed is not None:
        how.append(f"sampled with seed {run.seed}")
    if run.beams is not None:
        best = run.beams[0][0].score if run.beams and run.beams[0] else float("nan")
        how.append(f"{sum(len(b) for b in run.beams)} beams, best score {best:.4f}")
    how.append(STOPPED.get(run.stop_reason, run.stop_reason))
    return f"ortstate: {'; '.join(parts)} ({', '.join(how)})"
