"""Write ``models/llm/README.md`` from the ``reference.json`` files (stdlib only)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

SIZE_KEYS = (
    "hidden_size",
    "n_embd",
    "d_model",
    "intermediate_size",
    "n_inner",
    "d_ff",
    "num_hidden_layers",
    "n_layer",
    "num_layers",
    "encoder_layers",
    "decoder_layers",
    "num_attention_heads",
    "n_head",
    "num_heads",
    "encoder_attention_heads",
    "num_key_value_heads",
    "num_local_experts",
    "num_experts",
    "state_size",
    "mamba_d_state",
    "vocab_size",
)
CORE = {"Const", "Parameter", "Result"}

HEADER = """# Tiny optimum-intel stateful LLM IRs

Made by `models/make_llm_models.py` (random tiny configs from `models/llm_families.py`, no hub download;
optimum-intel 2.2.0, OpenVINO {ov}). Each folder holds the IR(s), `config.json`, `reference.json` (prompt,
OpenVINO greedy tokens, inputs, variables, feeding conventions, OpenVINO config), `logits.npy`
(last-position logits of every step, `[steps, batch, vocab]`), `states.npz` (all variables after the
last step) and, for encoder-decoders, `encoder_input.npy` / `encoder_output.npy`. The decoder-only
folders also hold a `tokenizer.json` and `tokenizer_config.json` (with a chat template) made by
`models/make_tokenizers.py` (a BPE trained on the repository's docs, no download).
`tests/test_llm_models_reference.py` replays every reference with OpenVINO alone.

References use `{{"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}}`, plus
`"DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"` for int8/int4 weights. Prompt: 5 ids (encoder-decoders: the
decoder start token + 4 ids), 8 new tokens, batch 1. `min margin` is the smallest top-1/top-2 logit gap
seen while decoding: a converter within 1e-3 must reproduce the tokens.
"""


NOTES = """
## Notes

- Every family of the list exported; none failed. Venvs: transformers 5.5.4 (llama*, gpt2, qwen2, qwen3,
  phi3, mistral, mixtral, granitemoehybrid, whisper, llava, gpt_oss, xglm, gpt_neox_japanese), 5.2.0
  (mamba, falcon_mamba, lfm2, qwen3_5), 4.57.6 (gemma2, zamba2, qwen3_next, t5), 5.0.0 (gemma3n_text);
  torch 2.13.0, optimum-intel 2.2.0, nncf 3.4.0.
- `torch_max_abs_diff` in each `reference.json`: OpenVINO's step logits against the torch model run on the
  whole sequence without cache (~1e-6 for fp32; fp16/int8/int4 compare against the *unquantized* torch
  model, so 2e-3 / 9e-2 / 0.6 there only say the weights were compressed).
- Whisper: optimum's dummy audio is 3000 frames, so the encoder keeps 1500 positions (`input_features`
  `[1, 16, 3000]`, stored as f16 in `encoder_input.npy`, fed as f32). Its 4 cross-attention variables
  (`variable_type="dynamic"`, init computed from `encoder_hidden_states`) are `[1, 2, 1500, 16]` and are
  stored as f16 in `states.npz` (the test compares them to 1e-3).
- T5 uses transformers 4.57.6: transformers 5 forces `tie_word_embeddings=True` on T5 (the random model
  then echoes the last token).
- zamba2 keeps `num_key_value_heads == num_attention_heads`: with GQA, optimum's dummy past cache has the
  wrong head count and tracing fails (`Sizes of tensors must match except in dimension 2. Expected size 4
  but got size 2`).
- mistral, gemma2 and gpt_oss (on its sliding layer) use `sliding_window=4`, shorter than prompt + new
  tokens, so the window mask is exercised (all agree with torch).
- gpt_oss's attention has sinks (one learned logit per head joining the softmax: ScaledDotProductAttention's
  sixth input); xglm's and gpt_neox_japanese's are eager (batched MatMul/Softmax, no
  ScaledDotProductAttention), and gpt_neox_japanese takes no `position_ids`; gemma3n_text's last two
  layers attend over the caches of its first two (`num_kv_shared_layers=2`: 4 variables for 4
  attention layers). They were added for the stream pool: docs/models.md lists how every
  optimum-intel decoder family converts and pools.
- llava (optional VLM): the language model takes `inputs_embeds`; the reference feeds the text-only
  prompt and each new token through `openvino_text_embeddings_model.xml`. The vision IR is kept but
  unused by the reference.
- Prompts: the first of 8 seeded random prompts whose top-1/top-2 logit gap stays >= 0.02 at every step
  and whose 8 tokens hold >= 4 distinct ids (falls back to the first robust prompt).
"""


def _sizes(config: dict) -> str:
    config = {**config.get("text_config", {}), **config}
    return ", ".join(f"{k}={config[k]}" for k in SIZE_KEYS if k in config)


def _feeds(ref: dict) -> str:
    names = [i["name"] for i in ref["inputs"]]
    notes = []
    if "attention_mask" in names:
        notes.append(f"mask {ref['decoding']['attention_mask']}")
    if "cache_position" in names:
        notes.append(f"cache_position {ref['decoding']['cache_position']}")
    return ", ".join(names) + (f" ({'; '.join(notes)})" if notes else "")


def write_readme(llm_dir: Path) -> None:
    refs = [json.loads(p.read_text()) for p in sorted(llm_dir.glob("*/reference.json"))]
    ov_version = refs[0]["versions"]["openvino"] if refs else "?"
    lines = [HEADER.format(ov=ov_version), "## Models\n"]
    lines.append("| folder | model_type | transformers | config | weights | variables | size | min margin |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    total = 0
    all_ops: Counter[str] = Counter()
    used_in: dict[str, set[str]] = {}
    for ref in refs:
        variables = [v for info in ref["irs"].values() for v in info["variables"]]
        shapes = Counter(v["shape"] for v in variables)
        var_text = f"{len(variables)}: " + ", ".join(f"{n}× `{s}`" for s, n in shapes.items())
        total += ref["size_bytes"]
        lines.append(
            f"| `{ref['family']}` | {ref['model_type']} | {ref['versions']['transformers']} | {_sizes(ref['config'])} "
            f"| {ref['weight_format']} | {var_text} | {ref['size_bytes'] / 1024:.0f} KiB "
            f"| {ref['min_top2_margin']:.3f} |"
        )
        for info in ref["irs"].values():
            all_ops.update(info["ops"])
            for op in info["ops"]:
                used_in.setdefault(op, set()).add(ref["family"])
    lines.append(f"\nTotal: {total / 1024:.0f} KiB in {len(refs)} folders.\n")
    lines.append("## Decoder inputs per family\n")
    lines.append("| folder | decoder IR inputs (feeding) | outputs |")
    lines.append("| --- | --- | --- |")
    for ref in refs:
        outs = ", ".join(o["name"] for o in ref["outputs"])
        lines.append(f"| `{ref['family']}` | {_feeds(ref)} | {outs} |")
    lines.append("\n## Ops per IR (type-version: count, from the XML, loop bodies included)\n")
    for ref in refs:
        for xml, info in ref["irs"].items():
            ops = ", ".join(f"{k} {v}" for k, v in info["ops"].items() if k.split("-")[0] not in CORE)
            lines.append(f"- `{ref['family']}/{xml}`: {ops}")
    lines.append("\n## All op types across the IRs\n")
    lines.append("| op | layers | folders |")
    lines.append("| --- | --- | --- |")
    for op in sorted(all_ops):
        fams = sorted(used_in[op])
        where = "all" if len(fams) == len(refs) else ", ".join(fams)
        lines.append(f"| {op} | {all_ops[op]} | {where} |")
    lines.append(NOTES)
    (llm_dir / "README.md").write_text("\n".join(lines) + "\n")
