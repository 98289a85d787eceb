"""The state format's names: every name the two ONNX forms give their state (op types, domain,
attributes, graph inputs and outputs), spelled here and nowhere else, the rule by which a name
ortstate makes steps aside from one the model has, how much of a layer's name it repeats, and how
a glued variable id is shown split. :mod:`ortstate.meta.model` (the metadata that
lists a model's variables) and the package, :mod:`ortstate.meta`, re-export them: the converter,
the passes and the runtime import them from the package.
"""

from __future__ import annotations

import re
from collections.abc import Container

import numpy as np

__all__ = [
    "ASSIGN",
    "CONTRIB_DOMAIN",
    "FUSED_ASSIGN",
    "FUSED_OP",
    "FUSED_READ",
    "FUSED_READ_STATES",
    "MAX_FUSED",
    "NAME_PREFIX_CHARS",
    "READ_VALUE",
    "REQUEST_INPUT",
    "SPLIT_ROWS",
    "VARIABLE_ID",
    "VARIABLE_IDS",
    "fresh_name",
    "fused_op",
    "init_flag_name",
    "length_input_name",
    "length_output_name",
    "name_prefix",
    "state_dims",
    "state_input_name",
    "state_output_name",
    "shown_id",
    "shown_name",
    "split_id",
    "split_rows_name",
]

# Custom-op form: ``ReadValue(init, request) -> value`` and ``Assign(value, request) -> token`` in
# this domain, the only one onnxruntime-extensions serves Python ops from by default.
CONTRIB_DOMAIN = "ai.onnx.contrib"
READ_VALUE = "ReadValue"
ASSIGN = "Assign"
VARIABLE_ID = "variable_id"  # the state ops' one attribute
# The int64 scalar graph input every state op takes as its key (a request's store).
REQUEST_INPUT = "ortstate.request"
# The fused variant (made on load, never saved): ``ReadValues{n}`` / ``AssignValues{n}`` for
# 2..MAX_FUSED variables of one carrier dtype, their ids a JSON list in ``variable_ids``;
# ``ReadStates{n}_{dtype}`` (1..MAX_FUSED; ``ReadStates2_float32``) reads variables whose init is
# zeros of their init shape: it takes the request key alone, the store making the zeros (its dtype
# is in its name: Python ops are told apart by their inputs' types, and it has none but the key).
FUSED_READ = "ReadValues"
FUSED_READ_STATES = "ReadStates"
FUSED_ASSIGN = "AssignValues"
VARIABLE_IDS = "variable_ids"
MAX_FUSED = 16
FUSED_OP = re.compile(rf"({FUSED_READ}|{FUSED_READ_STATES}|{FUSED_ASSIGN})(\d+)(_\w+)?")
# Not state: the int64 scalar initializers ``ortstate.split_max_rows.k{K}`` holding how many values
# (rows x K) of activations with K columns a 4-bit weight's exact int8 split takes (more take the
# f32-compute kernel): the converter writes ONNX Runtime's safe row count, the runtime sets the
# CPU's own as it loads (``ortstate.runtime.split_rows``).
# (K at most 9 digits: rows x K stays an int64, and int() never reads a run of thousands of digits).
SPLIT_ROWS = re.compile(r"ortstate\.split_max_rows\.k(\d{1,9})")


def split_rows_name(k: int) -> str:
    """The initializer holding the split's largest activations of ``k`` columns (see SPLIT_ROWS)."""
    return f"ortstate.split_max_rows.k{k}"


def fused_op(kind: str, count: int, dtype: str = "") -> str:
    """``ReadValues3``: the op type fusing ``count`` state ops of ``kind`` (FUSED_READ/FUSED_ASSIGN);
    ``ReadStates3_float32`` with the numpy ``dtype`` of a FUSED_READ_STATES."""
    return f"{kind}{count}" + (f"_{dtype}" if dtype else "")


def state_input_name(var_id: str) -> str:
    """Explicit form: the graph input carrying the variable's value into a run."""
    return f"ortstate.in.{var_id}"


def state_output_name(var_id: str) -> str:
    """Explicit form: the graph output carrying the variable's next value out of a run."""
    return f"ortstate.out.{var_id}"


def length_input_name(var_id: str) -> str:
    """Explicit form, a KV variable kept in a larger buffer: how many rows of its state input are
    its value (int64 scalar; see :mod:`ortstate.passes.kv_share`)."""
    return f"ortstate.len.{var_id}"


def length_output_name(var_id: str) -> str:
    """The same variable's rows after the run (int64 scalar output)."""
    return f"ortstate.len_out.{var_id}"


def init_flag_name(var_id: str) -> str:
    """Both forms: the bool scalar input telling a run the variable is uninitialised (computed inits)."""
    return f"ortstate.init.{var_id}"


def state_dims(shape: list[int | list[int | None]] | None, var_id: str) -> list[int | str] | None:
    """The ONNX dims of a variable's state input and output: static dims as they are, each dynamic
    one a symbol ``<id>_d<i>``; None for a dynamic rank."""
    if shape is None:
        return None
    return [d if isinstance(d, int) else f"{var_id}_d{i}" for i, d in enumerate(shape)]


# The most characters of a layer's name that ortstate repeats (see name_prefix); real names have
# at most a few hundred.
NAME_PREFIX_CHARS = 1000


def name_prefix(name: str) -> str:
    """A layer's name as ortstate repeats it, in the names it makes from it (the layer's ONNX nodes
    and values; :func:`fresh_name` keeps them unique) and in messages (``layer 'NAME' (id N)``, the
    id telling it apart): whole, or its first :data:`NAME_PREFIX_CHARS` characters.

    A layer becomes many nodes and values, and a loop body's every port and edge is placed by its
    loop's name: a name of 100,000 characters on a Split into 10,000 outputs would otherwise write
    a billion characters.
    """
    return name[:NAME_PREFIX_CHARS]


def fresh_name(base: str, taken: Container[str], tried: dict[str, int] | None = None) -> str:
    """``base``, or where the model already uses it, ``base_N`` for the first free N from 1.

    The one rule by which every name ortstate makes (the names above, and the converter's own
    value names) steps aside from a name the model already has; ``taken`` is every name of the
    model, subgraphs included (ONNX forbids defining a name twice anywhere in a model).

    ``tried`` (kept by a caller that adds each name it is given to a ``taken`` that only grows)
    remembers per base the first N not yet seen taken, so a thousand names of one base cost a
    thousand lookups, not half a million: the names given are the same.
    """
    if base not in taken:
        return base
    n = tried.get(base, 1) if tried is not None else 1
    while f"{base}_{n}" in taken:
        n += 1
    if tried is not None:
        tried[base] = n + 1
    return f"{base}_{n}"


def split_id(var_id: str) -> tuple[str, str] | None:
    """The input and output names an id OpenVINO's ``MakeStateful`` glued together, split back:
    ``("past_key_values.1.value", "present.1.value")`` for ``past_key_values.1.valuepresent.1.value``;
    None for an id that is not such a pair (``acc``).

    The IR keeps no split, so it is found in the id alone: the cut whose two sides (at least two
    characters each) share the most leading plus trailing characters, when those are at least two
    and at least half of the shorter side (``h_in``/``h_out``, ``cache_params.past.ssm.1``/
    ``cache_params.present.ssm.1``).
    """
    # Linear in the id's length (an id is the file's to choose, 100,000 characters or more): what
    # each cut's two sides share at the start and at the end is read off two Z-arrays, one of the id
    # and one of it reversed, instead of comparing the sides anew at every cut.
    size = len(var_id)
    if size < 4:
        return None
    cuts = np.arange(2, size - 1)
    shorter = np.minimum(cuts, size - cuts)
    head = np.minimum(_prefix_runs(var_id)[cuts], shorter)  # var_id[cut:] against var_id: common start
    score = head + np.minimum(_prefix_runs(var_id[::-1])[size - cuts], shorter - head)  # [:cut]: common end
    score[(score < 2) | (2 * score < shorter)] = -1
    best = int(np.argmax(score))  # the first cut of the best score, as the rule says
    return None if score[best] < 0 else (var_id[: cuts[best]], var_id[cuts[best] :])


def shown_id(var_id: str) -> str:
    """A variable id as messages print it, quoted (:func:`shown_name`): ``'acc'``, or a glued pair
    split (:func:`split_id`), ``'past_key_values.1.value' -> 'present.1.value'``."""
    pair = split_id(var_id)
    return f"{shown_name(pair[0])} -> {shown_name(pair[1])}" if pair else shown_name(var_id)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def shown_name(name: str) -> str:
    """A name as a message quotes it, on one line of bounded length whatever the name: control
    characters escaped (``'\\n'``), and a name longer than :data:`NAME_PREFIX_CHARS` shown as its
    first ones, ``...``, its last 20 (names differing at their end stay apart) and its length."""
    if len(name) > NAME_PREFIX_CHARS:
        return f"{shown_name(name[:NAME_PREFIX_CHARS])[:-1]}...{shown_name(name[-20:])[1:]} ({len(name)} characters)"
    return "'" + _CONTROL.sub(lambda m: repr(m.group())[1:-1], name) + "'"


def _prefix_runs(text: str) -> np.ndarray:
    """The Z-array of ``text``: entry ``i`` is how many leading characters ``text[i:]`` shares with
    ``text`` (entry 0 is the length). Linear time: each comparison that matches moves the rightmost
    match ``right`` forward, so matches total at most ``len(text)``; past ``right``, the positions
    up to the next one holding ``text[0]`` share nothing, skipped at ``str.find``'s speed."""
    size = len(text)
    runs = [0] * size
    if not size:
        return np.zeros(0, np.int64)
    runs[0] = size
    first, left, right, i = text[0], 0, 0, 1
    while i < size:
        if i >= right:
            i = text.find(first, i)
            if i < 0:
                break
            run = 0
        else:
            run = min(right - i, runs[i - left])
        while i + run < size and text[run] == text[i + run]:
            run += 1
        runs[i] = run
        if i + run > right:
            left, right = i, i + run
        i += 1
    return np.array(runs, np.int64)
