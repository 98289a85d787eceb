"""``ortstate export``: an optimum-intel LLM folder as a folder onnxruntime-genai or optimum loads."""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

from ..errors import UsageError
from ..export import LAYOUTS, ExportNotice, export
from .command import EXIT_OK, Command
from .report import progress

DESCRIPTION = """\
Export the decoder-only LLM of an optimum-intel folder (openvino_model.xml + config.json) as a
folder another tool loads as it is: the decoder as ONNX in the ecosystem's convention (inputs
input_ids, attention_mask, position_ids when the model has it, past_key_values.N.key|value;
outputs logits, present.N.key|value; the first step fed an empty past [batch, kv_heads, 0,
head_dim]; no beam_idx: the caller reorders the past between beam-search steps), with compressed
weights kept compressed, plus
  --layout genai    genai_config.json (model type, head size, KV heads, layers, context length,
                    token ids, search defaults from generation_config.json) and the tokenizer files
                    (tokenizer_config.json given a tokenizer_class where it has none), once genai's
                    own tokenizer is seen to encode and decode test texts as tokenizer.json does:
                    onnxruntime_genai.Model(OUT_DIR) (onnxruntime-genai: the genai extra)
  --layout optimum  config.json, generation_config.json and the tokenizer files as they are:
                    optimum.onnxruntime.ORTModelForCausalLM.from_pretrained(OUT_DIR)
A folder without tokenizer files exports with a notice (token-id generation needs none); so does
one whose tokenizer genai reads otherwise (left out, never written wrong; the notice names the
first text that differs), and one exported without onnxruntime-genai installed (written
unchecked). Families whose state is not only a KV cache (mamba, hybrid SSM models),
encoder-decoders (Whisper, T5) and vision-language models are refused, saying why. genai needs a
context length: a model whose config.json gives none (bloom: ALiBi attention, no
max_position_embeddings) is refused unless --context-length gives one; a value larger than
config.json's own is refused (the model was made for no more positions), a smaller one bounds
generation. All files are written to temporary files and replace those in OUT_DIR together once
all are written; one that cannot be written is an error naming it, exit code 2, leaving OUT_DIR as
it was.

examples:
  ortstate export qwen2-ov/ qwen2-genai/                  # for onnxruntime-genai (the default)
  ortstate export qwen2-ov/ qwen2-ort/ --layout optimum   # for optimum's ORTModelForCausalLM
  ortstate export bloom-ov/ bloom-genai/ --context-length 2048"""


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_dir", metavar="MODEL_DIR", help="an optimum-intel export folder of a decoder-only LLM")
    p.add_argument("out_dir", metavar="OUT_DIR", help="where to write (created if missing; same-named files replaced)")
    p.add_argument(
        "--layout", choices=LAYOUTS, default=LAYOUTS[0], help="which tool's folder to write (default: genai)"
    )
    p.add_argument(
        "--context-length",
        type=int,
        metavar="N",
        help="genai: the context length genai_config.json gives (and bounds max_length with), for a model whose "
        "config.json gives none (bloom: ALiBi, no max_position_embeddings), or a smaller one; at most "
        "config.json's own (default: config.json's max_position_embeddings, n_positions, ...)",
    )
    p.add_argument(
        "--int8-activations",
        action="store_true",
        help="compressed (int4/int8) weights compute on int8-quantized activations: faster, logits move ~1e-2",
    )


def run(args: argparse.Namespace) -> int:
    source = Path(args.model_dir)
    if not source.is_dir():
        raise UsageError(f"{source}: no such directory")
    if args.context_length is not None:
        if args.layout != LAYOUTS[0]:
            raise UsageError(f"--context-length applies to --layout {LAYOUTS[0]} (optimum reads config.json)")
        if args.context_length < 1:
            raise UsageError(f"--context-length must be at least 1, got {args.context_length}")
    start = time.perf_counter()
    progress(f"exporting {source} for {args.layout}")
    with warnings.catch_warnings():  # its notices are printed below, once
        warnings.simplefilter("ignore", ExportNotice)
        done = export(
            source,
            args.out_dir,
            layout=args.layout,
            int8_activations=args.int8_activations,
            context_length=args.context_length,
        )
    for notice in done.notices:
        print(f"ortstate: notice: {notice}", file=sys.stderr)
    cache = done.cache
    print(
        f"{source} -> {done.folder} ({args.layout}): {done.family or 'decoder'}, {cache.layers} layers, "
        f"KV cache {cache.kv_heads}x{cache.head_size} {cache.dtype}; {', '.join(done.files)}; "
        f"{time.perf_counter() - start:.2f} s"
    )
    return EXIT_OK


COMMAND = Command("export", "an optimum-intel LLM folder for onnxruntime-genai or optimum", DESCRIPTION, configure, run)
