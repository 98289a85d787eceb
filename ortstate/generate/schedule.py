"""What one tick of continuous batching runs: a pure function of the requests' progress.

As vLLM's scheduler and OpenVINO GenAI's do: every request that has a token to feed decodes in
the tick (one batched run in the pool), and the prompts waiting to be fed get chunks of at most
``max_num_batched_tokens`` tokens in all, oldest first, so a long prompt is fed over several
ticks and never holds the decoding requests back by more than one chunk. A model whose prompt
must go in one run (its feeding rules index a window of the prompt, as the mamba family's
``cache_position`` does) gets its whole prompt in one chunk, one such prompt per tick.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Progress", "Tick", "schedule"]


@dataclass(frozen=True)
class Progress:
    """Where a request is: ``prompt_left`` prompt tokens not yet fed; ``decoding``: it has a
    generated token to feed. Requests are given oldest first."""

    rid: int
    prompt_left: int
    decoding: bool


@dataclass(frozen=True)
class Tick:
    """The requests decoding one token, and the prompt chunks ``(rid, tokens)`` fed in this tick."""

    decode: tuple[int, ...]
    chunks: tuple[tuple[int, int], ...]

    @property
    def empty(self) -> bool:
        return not self.decode and not self.chunks


def schedule(requests: Sequence[Progress], max_num_batched_tokens: int, chunked: bool = True) -> Tick:
    """The tick to run next for ``requests`` (oldest first).

    Args:
        max_num_batched_tokens: prompt tokens fed in one tick, all prompts together (>= 1).
        chunked: prompts may be split; else a prompt goes whole (one per tick past the budget).
    """
    decode = tuple(r.rid for r in requests if r.decoding)
    budget = max_num_batched_tokens
    chunks: list[tuple[int, int]] = []
    for r in requests:
        if r.decoding or r.prompt_left <= 0:
            continue
        if budget <= 0:
            break
        if chunked:
            take = min(r.prompt_left, budget)
        elif chunks and r.prompt_left > budget:
            break
        else:
            take = r.prompt_left
        chunks.append((r.rid, take))
        budget -= take
    return Tick(decode, tuple(chunks))
