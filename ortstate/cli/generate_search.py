"""``ortstate generate``'s search flags, and the :class:`~ortstate.generate.SearchOptions` keywords
they make (checked before the model is converted)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..generate import GenerationError, SearchOptions

__all__ = ["add_search_options", "flag", "search_options"]


def add_search_options(parser: argparse.ArgumentParser) -> None:
    """The search flags (transformers' names, and vLLM's/OpenAI's for what transformers lacks)."""
    search = parser.add_argument_group("search (as transformers' generate())")
    search.add_argument("--do-sample", action="store_true", help="sample the next token (default: greedy)")
    search.add_argument("--temperature", type=float, metavar="T", help="divide the scores by T > 0 before sampling")
    search.add_argument(
        "--top-k", type=int, metavar="K", help="sample from the K most likely tokens (default 50; 0 or -1: all)"
    )
    search.add_argument(
        "--top-p", type=float, metavar="P", help="sample from the most likely tokens holding probability P, in (0, 1]"
    )
    search.add_argument(
        "--min-p",
        type=float,
        metavar="P",
        help="sample only from tokens at least P times as likely as the most likely one, in [0, 1] (default 0)",
    )
    search.add_argument("--seed", type=int, metavar="S", help="seed the sampling (the summary shows the seed used)")
    search.add_argument(
        "--choices",
        type=int,
        metavar="N",
        help="sample N answers to the prompt (vLLM's n; one prefill), printed one per line at the end",
    )
    _add_adjusting(search)
    search.add_argument(
        "--num-beams", type=int, metavar="N", help="beam search with N beams (prints the best at the end)"
    )
    search.add_argument(
        "--length-penalty",
        type=float,
        metavar="L",
        help="beam scores divide by length ** L (default 1; > 0 favours longer)",
    )
    search.add_argument(
        "--stop",
        action="append",
        metavar="TEXT",
        help="stop when the generated text contains TEXT (needs the tokenizer)",
    )
    search.add_argument("--stop-id", action="append", type=int, metavar="N", help="stop after token id N (like eos)")
    search.add_argument(
        "--json-schema",
        metavar="FILE",
        help='answer JSON valid against the JSON schema in FILE ({"type": "object"}: any JSON object), '
        "stopping when it is complete (needs tokenizer.json and the structured extra; not with --num-beams)",
    )


def _add_adjusting(search: Any) -> None:
    """The flags that change greedy decoding's scores too (penalties, bias, min tokens)."""
    search.add_argument(
        "--repetition-penalty",
        type=float,
        metavar="R",
        help="penalise tokens already in the prompt or the output (R > 1: less repetition)",
    )
    search.add_argument(
        "--presence-penalty",
        type=float,
        metavar="X",
        help="OpenAI's: subtract X from every token already generated, in [-2, 2] (> 0: fewer repeats)",
    )
    search.add_argument(
        "--frequency-penalty",
        type=float,
        metavar="X",
        help="OpenAI's: subtract X per time a token was generated, in [-2, 2]",
    )
    search.add_argument(
        "--logit-bias",
        action="append",
        metavar="ID=BIAS",
        help="add BIAS, in [-100, 100], to token ID's score (repeatable; 100 forces it, -100 bans it)",
    )
    search.add_argument(
        "--min-tokens",
        type=int,
        metavar="N",
        help="generate at least N tokens: eos and --stop-id tokens are masked and --stop ignored until then",
    )


SAMPLING_FLAGS = ("temperature", "top_k", "top_p", "min_p", "seed", "n")


def search_options(args: argparse.Namespace) -> dict[str, Any]:
    """The search keywords the command line gives (checked; those not given are left out).

    Raises:
        UsageError: a value out of range, or a sampling parameter without --do-sample.
    """
    given = {
        "do_sample": True if args.do_sample else None,
        "temperature": args.temperature,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "seed": args.seed,
        "min_p": args.min_p,
        "n": args.choices,
        "repetition_penalty": args.repetition_penalty,
        "presence_penalty": args.presence_penalty,
        "frequency_penalty": args.frequency_penalty,
        "logit_bias": None if args.logit_bias is None else _logit_bias(args.logit_bias),
        "min_tokens": args.min_tokens,
        "num_beams": args.num_beams,
        "length_penalty": args.length_penalty,
        "stop_token_ids": args.stop_id,
        "stop_strings": args.stop,
        "json_schema": None if args.json_schema is None else _read_schema(args.json_schema),
    }
    given = {k: v for k, v in given.items() if v is not None}
    stray = [flag(k) for k in SAMPLING_FLAGS if k in given and not args.do_sample]
    if stray:
        raise UsageError(f"{', '.join(stray)} appl{'ies' if len(stray) == 1 else 'y'} to sampling: add --do-sample")
    if "length_penalty" in given and given.get("num_beams", 1) <= 1:
        raise UsageError("--length-penalty applies to beam search: add --num-beams N (N > 1)")
    try:
        SearchOptions.build(**given).check_tokens(None, args.max_new_tokens)
    except GenerationError as exc:
        raise UsageError(f"{flag(exc.field)}: {exc}" if exc.field else str(exc)) from None
    return given


def _read_schema(path: str) -> Any:
    """``--json-schema FILE``'s JSON (SearchOptions checks it is a schema within the bounds)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"--json-schema {path}: cannot read it ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"--json-schema {path}: not a JSON file ({' '.join(str(exc).split())})") from None
    except RecursionError:
        raise UsageError(f"--json-schema {path}: nested too deep") from None


def flag(keyword: str) -> str:
    """The command-line flag of a generation keyword (an error's ``field``)."""
    named = {"stop_strings": "--stop", "stop_token_ids": "--stop-id", "n": "--choices"}
    return named.get(keyword, "--" + keyword.replace("_", "-"))


def _logit_bias(given: list[str]) -> dict[Any, Any]:
    """``--logit-bias ID=BIAS`` flags as a mapping (its values are checked by SearchOptions)."""
    bias: dict[Any, Any] = {}
    for text in given:
        token, _, value = text.partition("=")
        try:
            bias[int(token)] = float(value)
        except ValueError:
            raise UsageError(
                f"--logit-bias expects ID=BIAS (a token id and a number in [-100, 100]), got {text!r}"
            ) from None
    return bias
