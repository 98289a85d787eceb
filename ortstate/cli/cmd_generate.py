"""``ortstate generate``: greedy text generation with a converted optimum-intel LLM folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..generate import GenerationError, GenerationRun, Generator, find_model_files
from .args import UsageError, add_form_option, add_verbose_option, load_npy
from .command import EXIT_OK, Command
from .report import progress

DESCRIPTION = """\
Convert the OpenVINO IRs of an optimum-intel export folder (a stateful decoder, plus its encoder or
text-embeddings model when it has one) and greedy-decode from a prompt. The KV cache / SSM state
stays in the model's variables; each step feeds only the new token, with the attention mask,
positions and beam_idx the model's inputs call for. New tokens stream to stdout as they come; the
latency summary (prefill, decode median/p90 per token) goes to stderr.

--prompt TEXT needs the folder's tokenizer.json and the 'tokenizers' package; --prompt-ids needs
neither. Encoder-decoders (Whisper, T5) take --encoder-input FILE.npy (default: the folder's
encoder_input.npy) and start from the decoder start token unless --prompt-ids says otherwise.

examples:
  ortstate generate models/llm/llama --prompt-ids 18,152,24,240,209
  ortstate generate models/llm/mamba --prompt-ids 163,36,172 --max-new-tokens 32 --form custom-op
  ortstate generate models/llm/whisper --encoder-input features.npy
  ortstate generate path/to/export --prompt "Once upon a time" --ignore-eos"""

ENCODER_INPUT_FILE = "encoder_input.npy"
TOKENIZER_FILE = "tokenizer.json"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_dir", metavar="MODEL_DIR", help="an optimum-intel export folder (IRs + config.json)")
    prompt = p.add_mutually_exclusive_group()
    prompt.add_argument("--prompt-ids", metavar="IDS", help="the prompt's token ids, comma-separated: 1,2,3")
    prompt.add_argument("--prompt", metavar="TEXT", help="the prompt as text (needs MODEL_DIR/tokenizer.json)")
    p.add_argument(
        "--max-new-tokens", "-n", type=int, default=16, metavar="N", help="at most N new tokens (default 16)"
    )
    add_form_option(p)
    p.add_argument("--encoder-input", metavar="FILE.npy", help="the encoder's input (Whisper/T5)")
    p.add_argument("--ignore-eos", action="store_true", help="do not stop at the end-of-sequence token")
    add_verbose_option(p)


def _parse_ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(" ", "").split(",") if t != ""]
    except ValueError:
        ids = []
    if not ids:
        raise UsageError(f"--prompt-ids expects comma-separated integers, e.g. --prompt-ids 1,2,3; got {text!r}")
    return ids


def load_tokenizer(model_dir: Path) -> Any:
    """The folder's ``tokenizer.json`` through the ``tokenizers`` package, imported only now."""
    path = model_dir / TOKENIZER_FILE
    if not path.is_file():
        raise UsageError(f"{path}: no such file (--prompt needs the model's tokenizer; use --prompt-ids instead)")
    try:
        import tokenizers
    except ImportError:
        raise UsageError(
            "--prompt needs the 'tokenizers' package (pip install tokenizers); or use --prompt-ids"
        ) from None
    try:
        return tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001 - tokenizers raises its own exception types
        raise UsageError(f"{path}: not a readable tokenizer ({' '.join(str(exc).split())})") from None


def _encoder_input(args: argparse.Namespace, model_dir: Path, generator: Generator) -> np.ndarray | None:
    if generator.encoder is None:
        if args.encoder_input:
            raise UsageError("--encoder-input applies to encoder-decoder models only (Whisper, T5)")
        return None
    path = Path(args.encoder_input) if args.encoder_input else model_dir / ENCODER_INPUT_FILE
    if not args.encoder_input:
        if not path.is_file():
            raise UsageError(f"{model_dir} is an encoder-decoder: give its input with --encoder-input FILE.npy")
        print(f"ortstate: note: encoder input from {path} (--encoder-input to choose)", file=sys.stderr)
    value = load_npy(path, generator.encoder.main.name)
    want = generator.encoder.main.rank
    if want is not None and value.ndim != want:
        raise UsageError(
            f"{path}: encoder input '{generator.encoder.main.name}' has rank {want}, the file holds {list(value.shape)}"
        )
    return value


def _prompt(args: argparse.Namespace, generator: Generator, tokenizer: Any) -> list[int]:
    if tokenizer is not None:
        ids = list(tokenizer.encode(args.prompt).ids)
        if not ids:
            raise UsageError("--prompt: the tokenizer made no tokens of that text")
    elif args.prompt_ids is not None:
        ids = _parse_ids(args.prompt_ids)
    elif generator.encoder is not None and generator.config.decoder_start_token_id is not None:
        ids = [generator.config.decoder_start_token_id]
    elif generator.encoder is not None:
        raise UsageError(
            "no decoder_start_token_id in generation_config.json or config.json: "
            "give the decoder's first token(s) with --prompt-ids"
        )
    else:
        raise UsageError("give the prompt with --prompt-ids 1,2,3 (or --prompt TEXT with a tokenizer.json)")
    vocab = generator.vocab_size
    bad = [t for t in ids if t < 0 or (vocab is not None and t >= vocab)]
    if bad:
        raise UsageError(f"prompt token id(s) {', '.join(map(str, bad))} outside the vocabulary (0..{vocab - 1})")
    return ids


class _Printer:
    """Streams token ids, or text decoded by the tokenizer (the whole text each time: merges change it)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.tokens: list[int] = []
        self.text = ""

    def __call__(self, token: int) -> None:
        self.tokens.append(token)
        if self.tokenizer is None:
            piece = f"{' ' if len(self.tokens) > 1 else ''}{token}"
        else:
            text = self.tokenizer.decode(self.tokens)
            piece = text[len(self.text) :] if text.startswith(self.text) else text
            self.text = text
        sys.stdout.write(piece)
        sys.stdout.flush()


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
    stop = "stopped at eos" if run.stop_reason == "eos" else "max new tokens reached"
    return f"ortstate: {'; '.join(parts)} ({form} form, {stop})"


def run(args: argparse.Namespace) -> int:
    model_dir = Path(args.model_dir)
    if not model_dir.exists():
        raise UsageError(f"{model_dir}: no such directory")
    if args.max_new_tokens < 1:
        raise UsageError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
    if args.prompt_ids is not None:
        _parse_ids(args.prompt_ids)  # a typo fails before the conversion
    try:
        find_model_files(model_dir)
    except GenerationError as exc:
        raise UsageError(str(exc)) from None
    tokenizer = load_tokenizer(model_dir) if args.prompt is not None else None
    progress(f"converting {model_dir}")
    generator = Generator.from_dir(model_dir, form=args.form)
    encoder_input = _encoder_input(args, model_dir, generator)
    prompt = _prompt(args, generator, tokenizer)
    notes = generator.notes(stop_at_eos=not args.ignore_eos)
    if notes:
        print(f"ortstate: note: {model_dir}: {'; '.join(notes)}", file=sys.stderr)
    generator.generate(
        prompt,
        args.max_new_tokens,
        stream=_Printer(tokenizer),
        encoder_input=encoder_input,
        stop_at_eos=not args.ignore_eos,
    )
    print(flush=True)
    assert generator.last_run is not None
    print(latency_summary(generator.last_run, generator.session.form), file=sys.stderr)
    return EXIT_OK


COMMAND = Command("generate", "greedy-decode with a converted optimum-intel LLM folder", DESCRIPTION, configure, run)
