"""Regenerate the tiny optimum-intel stateful LLM IRs under ``models/llm/`` and their OpenVINO references.

Nothing is downloaded from a model hub: each model is built from a tiny random ``transformers`` config
(``llm_families.py``, seeded), saved with ``save_pretrained`` and exported by ``optimum-cli export
openvino`` (optimum-intel 2.2.0, ``--disable-convert-tokenizer``). The greedy reference is then run
with OpenVINO alone (``llm_reference.py``).

optimum-intel pins some architectures to a transformers range, so three venvs are used, each made with
torch pinned in the same install command (a local CPU build), then ``pip uninstall -y torchvision``::

    python3 -m venv .venv-llm      # transformers 5.5.4: llama*, gpt2, qwen2, qwen3, phi3, mistral,
    .venv-llm/bin/pip install "torch==2.13.0" "optimum-intel[openvino]==2.2.0" "transformers==5.5.4"
    # .venv-llm-52:  transformers==5.2.0  (mamba, falcon_mamba, lfm2, qwen3_5)
    # .venv-llm-457: transformers==4.57.6 (gemma2, zamba2, qwen3_next, dbrx)
    # .venv-llm-50:  transformers==5.0.0  (gemma3n_text)
    #   ... mixtral, granitemoehybrid, whisper, t5, gpt_oss, xglm, gpt_neox_japanese use .venv-llm

Usage (each family with the venv of its pin; families of another pin are skipped)::

    .venv-llm/bin/python models/make_llm_models.py [FAMILY ...]
    .venv-llm-52/bin/python models/make_llm_models.py mamba falcon_mamba lfm2 qwen3_5
    .venv-llm-457/bin/python models/make_llm_models.py gemma2 zamba2 qwen3_next dbrx
    .venv-llm-50/bin/python models/make_llm_models.py gemma3n_text
    python3 models/make_llm_models.py --readme      # rewrite models/llm/README.md from the references

Each ``models/llm/<name>/`` gets the IR(s), ``config.json``, ``generation_config.json``,
``reference.json``, ``logits.npy`` (last-position logits of every greedy step, ``[steps, batch, vocab]``),
``states.npz`` (every variable after the last step; f16 when over 16384 elements) and, for
encoder-decoders, ``encoder_input.npy`` / ``encoder_output.npy``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from llm_families import BY_NAME, FAMILIES, PINS, Family  # noqa: E402

SEED = 20240607
NEW_TOKENS = 8
PROMPT_LEN = 5
MIN_MARGIN = 0.02  # retry another prompt when two logits are closer than this (argmax too fragile)
MIN_DISTINCT = 4  # ... or when greedy decoding mostly repeats one token
BIG_STATE = 16384  # elements
OUT = HERE / "llm"
KEEP = ("config.json", "generation_config.json")


def _build_hf(fam: Family, hf_dir: Path):
    import torch
    import transformers

    config = getattr(transformers, fam.config_class)(**fam.config)
    torch.manual_seed(SEED)
    model = getattr(transformers, fam.model_class).from_config(config)
    model.eval()
    model.save_pretrained(hf_dir)
    return model


def _hf_check(fam: Family, model, folder: Path, ref: dict) -> float:
    """Max |logits| difference between the torch model (no cache, whole sequence) and OpenVINO's steps."""
    import torch

    prompt = ref["prompt_ids"]
    seq = torch.tensor([row + toks[:-1] for row, toks in zip(prompt, ref["new_tokens"])])
    with torch.no_grad():
        if fam.kind in ("decoder", "vlm"):
            logits = model(input_ids=seq).logits
        else:
            dtype = np.float32 if fam.kind == "whisper" else np.int64
            enc = torch.from_numpy(np.load(folder / "encoder_input.npy").astype(dtype))
            key = "input_features" if fam.kind == "whisper" else "input_ids"
            logits = model(**{key: enc}, decoder_input_ids=seq).logits
    ours = np.load(folder / "logits.npy")  # [steps, batch, vocab]
    theirs = logits[:, len(prompt[0]) - 1 :, :].permute(1, 0, 2).float().numpy()
    return float(np.max(np.abs(ours - theirs)))


def _export(fam: Family, hf_dir: Path, out_dir: Path) -> None:
    cli = Path(sys.executable).parent / "optimum-cli"
    cmd = [
        str(cli),
        "export",
        "openvino",
        "--model",
        str(hf_dir),
        "--task",
        fam.task,
        "--weight-format",
        fam.weight_format,
        "--disable-convert-tokenizer",
        *fam.export_args,
        str(out_dir),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run(cmd, check=True, env=env)


def _prompts(fam: Family, attempt: int, length: int) -> list[list[int]]:
    rng = np.random.default_rng(SEED + attempt)
    return [rng.integers(3, fam.config.get("vocab_size", 256), size=length).tolist()]


def _port_dtype(port) -> np.dtype:
    return port.get_element_type().to_dtype()


def _ir_summary(xml: Path) -> dict:
    from llm_reference import ir_ops, ir_variables

    return {"ops": dict(sorted(ir_ops(xml).items())), "variables": ir_variables(xml)}


def _reference(fam: Family, folder: Path) -> dict:
    import openvino as ov
    from llm_reference import embedder, greedy, ov_config_for, ports

    core = ov.Core()
    config = ov_config_for(fam.weight_format)
    xmls = sorted(p.name for p in folder.glob("*.xml"))
    extra: dict[str, np.ndarray] = {}
    encoder: dict = {}
    decoder_xml = "openvino_model.xml"
    if fam.kind in ("whisper", "t5"):
        decoder_xml = "openvino_decoder_model.xml"
        enc = core.compile_model(folder / "openvino_encoder_model.xml", "CPU", config)
        rng = np.random.default_rng(SEED)
        if fam.kind == "whisper":
            frames = 2 * fam.config["max_source_positions"]
            # stored as f16 (half the bytes); the values fed are exactly those f16 values in f32
            feats = rng.standard_normal((1, fam.config["num_mel_bins"], frames)).astype(np.float16)
            enc_inputs = {"input_features": feats}
        else:
            ids = rng.integers(3, fam.config["vocab_size"], size=(1, 6)).astype(np.int64)
            enc_inputs = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
            extra["encoder_attention_mask"] = np.ones_like(ids)
        enc_inputs = {k: v for k, v in enc_inputs.items() if k in {p.get_any_name() for p in enc.inputs}}
        typed = {p.get_any_name(): enc_inputs[p.get_any_name()].astype(_port_dtype(p)) for p in enc.inputs}
        hidden = np.array(enc.create_infer_request().infer(typed)["last_hidden_state"], dtype=np.float32)
        extra["encoder_hidden_states"] = hidden
        np.save(folder / "encoder_input.npy", next(iter(enc_inputs.values())))
        np.save(folder / "encoder_output.npy", hidden)
        encoder = {
            "ir": "openvino_encoder_model.xml",
            "input_file": "encoder_input.npy",
            "input_name": next(iter(enc_inputs)),
            "extra_inputs": sorted(set(enc_inputs) - {next(iter(enc_inputs))}),
            "output_file": "encoder_output.npy",
            "inputs": ports(enc, "inputs"),
            "outputs": ports(enc, "outputs"),
        }
    embed = None
    embeddings_xml = ""
    if fam.kind == "vlm":
        decoder_xml, embeddings_xml = "openvino_language_model.xml", "openvino_text_embeddings_model.xml"
        embed = embedder(core.compile_model(folder / embeddings_xml, "CPU", config))
    dec = core.compile_model(folder / decoder_xml, "CPU", config)
    decoding = {"attention_mask": "full", "cache_position": "arange", **fam.decoding}
    start = [int(fam.config["decoder_start_token_id"])] if fam.kind in ("whisper", "t5") else []
    # first prompt whose argmaxes are robust and whose tokens vary (a repeated token can hide a stale cache)
    chosen = None
    for attempt in range(8):
        prompt = [start + row for row in _prompts(fam, attempt, PROMPT_LEN - len(start))]
        run = greedy(dec, decoding, prompt, NEW_TOKENS, extra, embed)
        if run["min_margin"] >= MIN_MARGIN:
            chosen = chosen or (prompt, run)
            if len(set(run["tokens"][0])) >= MIN_DISTINCT:
                chosen = (prompt, run)
                break
    prompt, run = chosen or (prompt, run)
    np.save(folder / "logits.npy", run["logits"])
    # big states (Whisper's cross-attention K/V over 1500 frames) are stored as f16 to keep folders small
    states = {k: v.astype(np.float16) if v.size > BIG_STATE else v for k, v in run["states"].items()}
    np.savez(folder / "states.npz", **states)
    from importlib.metadata import version

    return {
        "family": fam.name,
        "model_type": json.loads((folder / "config.json").read_text())["model_type"],
        "config_class": fam.config_class,
        "config": fam.config,
        "weight_format": fam.weight_format,
        "task": fam.task,
        "export_args": ["--weight-format", fam.weight_format, "--disable-convert-tokenizer", *fam.export_args],
        "versions": {
            "transformers": version("transformers"),
            "optimum_intel": version("optimum-intel"),
            "openvino": version("openvino"),
        },
        "ov_config": config,
        "irs": {x: _ir_summary(folder / x) for x in xmls},
        "decoder_ir": decoder_xml,
        "embeddings_ir": embeddings_xml,
        "inputs": ports(dec, "inputs"),
        "outputs": ports(dec, "outputs"),
        "decoding": decoding,
        "encoder": encoder,
        "prompt_ids": prompt,
        "new_tokens": run["tokens"],
        "min_top2_margin": run["min_margin"],
        "logits_file": "logits.npy",
        "states_file": "states.npz",
        "final_state_shapes": {k: list(v.shape) for k, v in sorted(run["states"].items())},
    }


def make(fam: Family) -> None:
    folder = OUT / fam.name
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir, ov_dir = Path(tmp) / "hf", Path(tmp) / "ov"
        model = _build_hf(fam, hf_dir)
        _export(fam, hf_dir, ov_dir)
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        for path in sorted(ov_dir.iterdir()):
            if path.suffix in (".xml", ".bin") or path.name in KEEP:
                shutil.copy2(path, folder / path.name)
    ref = _reference(fam, folder)
    try:
        ref["torch_max_abs_diff"] = _hf_check(fam, model, folder, ref)
    except Exception as exc:  # the torch cross-check is advisory; the reference is OpenVINO's
        ref["torch_max_abs_diff"] = f"not computed: {type(exc).__name__}: {exc}"[:300]
    ref["size_bytes"] = sum(p.stat().st_size for p in folder.iterdir()) + 0
    (folder / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    ref["size_bytes"] = sum(p.stat().st_size for p in folder.iterdir())
    (folder / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    print(
        f"{fam.name}: tokens {ref['new_tokens']} margin {ref['min_top2_margin']:.4f} size {ref['size_bytes']} "
        f"torch diff {ref['torch_max_abs_diff']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", help="family names (default: all of this venv's pin)")
    parser.add_argument("--readme", action="store_true", help="only rewrite models/llm/README.md")
    args = parser.parse_args(argv)
    if args.readme:
        from llm_readme import write_readme

        write_readme(OUT)
        return 0
    import transformers

    pin = next((k for k, v in PINS.items() if v == transformers.__version__), None)
    chosen = [BY_NAME[n] for n in args.families] if args.families else FAMILIES
    failed = []
    for fam in chosen:
        if fam.pin != pin:
            print(f"{fam.name}: skipped (needs transformers {PINS[fam.pin]}, have {transformers.__version__})")
            continue
        try:
            make(fam)
        except Exception as exc:  # keep going: one family's export error must not stop the others
            failed.append(fam.name)
            print(f"{fam.name}: FAILED {type(exc).__name__}: {exc}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
