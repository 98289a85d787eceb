"""Which fields of an OpenAI request ``ortstate serve`` applies, which it takes only at their neutral
value, and which cannot change the output; any other field is refused (400 naming it), so that no
field a client sends is silently ignored.

A field given as null counts as absent (some clients send every optional field).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["NO_EFFECT", "REFUSED", "SEARCH_FIELDS", "short", "unsupported"]

# OpenAI's fields that cannot change the output: accepted and left alone (parallel_tool_calls:
# a forced tool is one call)
NO_EFFECT = frozenset(
    {"user", "metadata", "store", "service_tier", "safety_identifier", "prompt_cache_key", "parallel_tool_calls"}
)
# the fields handed to SearchOptions under the same name (it checks their values, naming the field)
SEARCH_FIELDS = (
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "min_tokens",
    "n",
    "stop_token_ids",
)
# what both endpoints apply; each adds its own (prompt / messages, its max and logprobs fields)
_APPLIED = frozenset(
    {"model", "temperature", "top_p", "seed", "stop", "stream", "stream_options", "ignore_eos", "logprobs",
     "return_token_ids", "response_format", *SEARCH_FIELDS}
)  # fmt: skip

REFUSED = {  # field -> what it would need; refused unless absent, null or its neutral value
    "echo": ("echo is not supported", (None, False)),
    "best_of": ("best_of is not supported (n choices are n samples)", (None, 1)),
    "suffix": ("suffix is not supported", (None, "")),
    "tools": ("tools are a chat field (/v1/chat/completions)", (None, [])),
    "functions": ("functions are not supported (send tools)", (None, [])),
    "tool_choice": ("tool_choice is a chat field (/v1/chat/completions)", (None, "none")),
    "function_call": ("function_call is not supported (send tool_choice)", (None, "none")),
}


def unsupported(body: Mapping[str, Any], own: frozenset[str]) -> tuple[str, str] | None:
    """What to refuse in ``body``, as (message, field), or None: a field of :data:`REFUSED` (but the
    endpoint's ``own``) given other than its neutral value, or one neither applied (both endpoints'
    fields and ``own``), in :data:`REFUSED`, nor without effect (:data:`NO_EFFECT`)."""
    for key, (why, neutral) in REFUSED.items():
        if key not in own and body.get(key) not in neutral:
            return why, key
    unknown = [k for k, v in body.items() if v is not None and k not in own and not _known(k)]
    if unknown:
        names = ", ".join(short(k) for k in unknown[:5])
        return f"field(s) not supported: {names} (this server refuses what it does not apply)", str(unknown[0])[:64]
    return None


def _known(key: Any) -> bool:
    return key in _APPLIED or key in REFUSED or key in NO_EFFECT


def short(value: Any) -> str:
    """``value``'s repr, cut to 60 characters (what an error message shows of a client's value)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
