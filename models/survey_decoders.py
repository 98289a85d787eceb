"""Survey every decoder family optimum-intel exports with ``--task text-generation-with-past``: does
ortstate convert it, match OpenVINO, fuse its attention, and pool its streams? (The table in
docs/models.md.) Nothing is downloaded: each family is a tiny random config saved and exported here.

Three steps, the first in a venv with torch and optimum-intel (one per transformers pin, as
``make_llm_models.py`` says), the others in the repository's::

    EXPORT_VENV/bin/python models/survey_decoders.py export OUT [FAMILY ...]  # default: every family
    .venv/bin/python models/survey_decoders.py check OUT [FAMILY ...]         # default: every export
    .venv/bin/python models/survey_decoders.py table OUT

``export`` writes ``OUT/FAMILY/hf`` (the random model), ``OUT/FAMILY/ov`` (the IR) and
``OUT/FAMILY/export.json`` (an export's error: a transformers pin, a config the family refuses);
``check`` writes ``OUT/FAMILY/check.json``: how ``ortstate.convert`` went, the attention report
(``ortstate inspect``'s), ``ortstate verify --both`` against OpenVINO, and what ``StreamPool`` made
of the model. Each family is skipped where its file exists: delete it to redo one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

SEED = 20240607
sys.path.insert(0, str(Path(__file__).resolve().parent))
from llm_families import COMMON as _BASE  # noqa: E402  (the committed families' tiny sizes)

COMMON = {
    **_BASE,
    "head_dim": 16,
    "num_local_experts": 4,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
}
# what a family's config needs on top of COMMON ("_drop": COMMON keys it refuses)
EXTRA: dict[str, dict] = {
    "falcon": {"_drop": ["head_dim"], "new_decoder_architecture": True, "num_kv_heads": 2},
    "gpt_neo": {"_drop": ["head_dim"], "attention_types": [[["global", "local"], 1]], "window_size": 4},
    # no GQA in these families: optimum's dummy past would have the wrong head count
    "gptj": {"num_key_value_heads": 4, "rotary_dim": 8, "n_inner": 128},
    "codegen": {"num_key_value_heads": 4, "rotary_dim": 8, "n_inner": 128},
    "phi": {"num_key_value_heads": 4},
    "gemma3_text": {"sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"]},
    "exaone4": {"sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"]},
    "gemma3n_text": {  # the last two layers read the caches of the first two (cross-layer sharing)
        "_drop": ["rope_parameters"],
        "num_hidden_layers": 4,
        "layer_types": ["sliding_attention", "full_attention"] * 2,
        "num_kv_shared_layers": 2,
        "sliding_window": 4,
        "hidden_size_per_layer_input": 16,
        "vocab_size_per_layer_input": 256,
        "laurel_rank": 8,
        "altup_num_inputs": 4,
        "activation_sparsity_pattern": [0.0] * 4,
    },
    "lfm2_moe": {"layer_types": ["conv", "full_attention"], "num_dense_layers": 1},
    "llama4_text": {"intermediate_size_mlp": 128, "num_local_experts": 2, "num_experts_per_tok": 1},
    # multi-head latent attention: keys of 16 + 8, values of 16 (no GQA in optimum's dummy past)
    "deepseek_v3": {
        "num_key_value_heads": 4,
        "q_lora_rank": 32,
        "kv_lora_rank": 16,
        "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 16,
        "v_head_dim": 16,
        "n_routed_experts": 4,
        "first_k_dense_replace": 1,
    },
}


def _families() -> list[str]:
    import optimum.exporters.openvino.model_configs  # noqa: F401  (registers optimum-intel's configs)
    from optimum.exporters.tasks import TasksManager
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return sorted(
        name
        for name, tasks in TasksManager._SUPPORTED_MODEL_TYPE.items()
        if "text-generation-with-past" in tasks.get("openvino", {}) and name in CONFIG_MAPPING_NAMES
    )


def export(out: Path, families: list[str]) -> None:
    import torch
    import transformers

    for family in families or _families():
        folder = out / family
        if (folder / "export.json").exists():
            continue
        folder.mkdir(parents=True, exist_ok=True)
        extra = dict(EXTRA.get(family, {}))
        drop = set(extra.pop("_drop", []))
        result: dict = {"family": family, "transformers": transformers.__version__}
        try:
            config = transformers.AutoConfig.for_model(
                family, **{k: v for k, v in {**COMMON, **extra}.items() if k not in drop}
            )
            torch.manual_seed(SEED)
            transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder / "hf")
            cli = Path(sys.executable).parent / "optimum-cli"
            cmd = [str(cli), "export", "openvino", "--model", str(folder / "hf"), "--task", "text-generation-with-past"]
            cmd += ["--weight-format", "fp32", "--disable-convert-tokenizer", str(folder / "ov")]
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
            if done.returncode:
                result["error"] = (done.stderr or done.stdout).strip().splitlines()[-1][-300:]
        except Exception as exc:  # noqa: BLE001 - a survey records every family's failure and goes on
            result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][-300:]
        (folder / "export.json").write_text(json.dumps(result, indent=1) + "\n")
        print(family, result.get("error", "exported"), flush=True)


def check(out: Path, families: list[str]) -> None:
    import ortstate
    from ortstate.convert import read_attention_report

    for family in families or sorted(p.parent.parent.name for p in out.glob("*/ov/openvino_model.xml")):
        xml, path = out / family / "ov" / "openvino_model.xml", out / family / "check.json"
        if path.exists() or not xml.exists():
            continue
        result: dict = {"family": family}
        try:
            model = ortstate.convert(str(xml))
        except ortstate.OrtStateError as exc:
            result["converts"] = str(exc)
        else:
            result["converts"] = "yes"
            rows = read_attention_report(model) or []
            result["attention"] = dict(Counter(f"{r['as']}: {r['why']}" for r in rows)) or {"no SDPA layer": 0}
            verify = [str(Path(sys.executable).parent / "ortstate"), "verify", str(xml), "--both", "--steps", "3"]
            done = subprocess.run(verify, capture_output=True, text=True, timeout=900)
            result["matches_openvino"] = done.returncode == 0
            try:
                pool = ortstate.StreamPool(model, 4, max_context=64)
                result["pool"] = getattr(pool, "batching", type(pool).__name__)
            except ortstate.OrtStateError as exc:
                result["pool"] = str(exc)
        path.write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps(result), flush=True)


def table(out: Path) -> None:
    print("| family | converts | matches OpenVINO | attention | pool |")
    print("| --- | --- | --- | --- | --- |")
    for folder in sorted(p for p in out.iterdir() if p.is_dir()):
        exported = json.loads((folder / "export.json").read_text()) if (folder / "export.json").exists() else {}
        if "error" in exported:
            print(f"| {folder.name} | not exported: {exported['error']} | | | |")
            continue
        if not (folder / "check.json").exists():
            continue
        r = json.loads((folder / "check.json").read_text())
        attention = "; ".join(f"{k} ×{n}" if n else k for k, n in r.get("attention", {}).items())
        matches = {True: "yes", False: "NO"}.get(r.get("matches_openvino"), "")
        print(f"| {folder.name} | {r['converts']} | {matches} | {attention} | {r.get('pool', '')} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("export", "check", "table"))
    parser.add_argument("out", type=Path, help="the survey's folder (one subfolder a family)")
    parser.add_argument("families", nargs="*", help="model types (default: all)")
    args = parser.parse_args(argv)
    if args.step == "export":
        export(args.out, args.families)
    elif args.step == "check":
        check(args.out, args.families)
    else:
        table(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
