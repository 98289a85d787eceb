"""What a pool's loop (``streams/loop.py``) runs of what was queued for it: its *round*, and when.

The queue holds steps (``submit``: one step of a stream) and commands (``call``: a function between
two runs, acting on a stream, on every stream (:data:`ALL`), or on none), in the order they came. A
round takes them in that order:

- the steps waiting form a tick: every waiting stream steps once (its oldest step), at most
  ``max_batch`` streams; a stream's next step, and the steps past ``max_batch``, wait for the next
  round, and so does everything after a command that must follow them;
- a command runs in its place, between ticks: one that names a stream stepping in the tick being
  gathered (or :data:`ALL`, with any step gathered) runs after that tick, which runs first; one
  that names a stream with a step left for the next round (or :data:`ALL`, with any step left)
  waits for the next round, with everything after it.

A round starts once a command waits, ``max_batch`` streams wait to step, or ``max_delay`` after the
first step queued (:func:`ready`); when steps came in while the last round ran, at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ALL", "Queued", "Round", "plan_round", "ready"]

ALL = object()  # a command's stream when it concerns every stream


@dataclass(frozen=True)
class Queued:
    """A queued item as the round sees it: a step (``command`` False) or a command, of stream
    ``sid`` (None: none; :data:`ALL`: every one); ``dropped``: its caller no longer waits."""

    command: bool
    sid: Any
    dropped: bool = False


@dataclass
class Round:
    """The round: ``actions`` in order (``("tick", [item indices])``: those steps in one tick;
    ``("call", index)``: that command), and the items ``later`` left for the next round."""

    actions: list[tuple[str, Any]] = field(default_factory=list)
    later: list[int] = field(default_factory=list)


def plan_round(items: Sequence[Queued], max_batch: int) -> Round:
    """The round of ``items`` (in the order they were queued)."""
    plan = Round()
    tick: dict[Any, int] = {}  # stream -> its step's index, in the tick being gathered
    held: set[Any] = set()  # streams with a step left for the next round
    for k, item in enumerate(items):
        if item.dropped:
            continue
        if not item.command:
            if item.sid in tick or item.sid in held or len(tick) >= max_batch:
                plan.later.append(k)
                held.add(item.sid)
            else:
                tick[item.sid] = k
            continue
        if item.sid is ALL and plan.later or item.sid in held:
            plan.later += [j for j in range(k, len(items)) if not items[j].dropped]
            break
        if tick and (item.sid is ALL or item.sid in tick):
            plan.actions.append(("tick", list(tick.values())))
            tick = {}
        plan.actions.append(("call", k))
    if tick:
        plan.actions.append(("tick", list(tick.values())))
    return plan


def ready(commands: int, stepping: int, max_batch: int, left: float) -> bool:
    """Whether a round of queued items starts now: a command waits, ``max_batch`` streams wait to
    step, or the first step's ``max_delay`` is over (``left``: its seconds still to wait)."""
    return bool(commands) or stepping >= max_batch or left <= 0
