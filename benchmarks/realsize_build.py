"""Build the real-size stateful LLM IRs of issue 12 with optimum-intel, from a random-weight config.

The model has the shape of Qwen2-0.5B (hidden 896, 24 layers, 14 heads, 2 KV heads, intermediate 4864,
vocab 151936, untied LM head) with random weights from a fixed seed: nothing is downloaded from a hub.
It is saved once with ``save_pretrained`` and exported per precision with::

    optimum-cli export openvino --model HF --task text-generation-with-past --weight-format P \\
        [--group-size 128 --ratio 1.0] --disable-convert-tokenizer OUT

into ``CACHE/ir/<precision>/``, with ``DONE`` touched last (a folder without it is incomplete and is
rebuilt). Already built precisions are skipped, so this is cheap to call before every benchmark run.

This needs torch + optimum-intel, which ortstate itself never needs: run it with the Python of a separate
venv (see ``benchmarks/requirements-realsize.txt``)::

    python3 -m venv ~/venvs/optimum
    ~/venvs/optimum/bin/pip install -r benchmarks/requirements-realsize.txt
    ~/venvs/optimum/bin/pip uninstall -y torchvision   # built for another torch; breaks transformers
    flock /tmp/realsize.lock ~/venvs/optimum/bin/python benchmarks/realsize_build.py [--cache DIR] [int4 ...]

Each export takes a few minutes and several GB of RAM on 2 cores (the model is 0.5B parameters in f32).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

PRECISIONS = ("int4", "int8", "fp16", "fp32")  # build order: what the benchmark needs first
SEED = 20240607
DEFAULT_CACHE = Path(os.environ.get("ORTSTATE_REALSIZE_CACHE", "~/.cache/ortstate/realsize")).expanduser()
MODEL = "qwen2-0.5b-random"
CONFIG = {
    "vocab_size": 151936,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}
EXPORT_ARGS = {
    "int4": ["--weight-format", "int4", "--group-size", "128", "--ratio", "1.0"],
    "int8": ["--weight-format", "int8"],
    "fp16": ["--weight-format", "fp16"],
    "fp32": ["--weight-format", "fp32"],
}
DONE = "DONE"


def ir_dir(cache: Path, precision: str) -> Path:
    """Where the IR of one precision lives (``openvino_model.xml`` / ``.bin`` inside)."""
    return cache / "ir" / precision


def ir_ready(cache: Path, precision: str) -> bool:
    """True when the IR of ``precision`` was completely built (its ``DONE`` marker exists)."""
    return (ir_dir(cache, precision) / DONE).is_file()


def _log(msg: str) -> None:
    print(f"[realsize_build] {msg}", file=sys.stderr, flush=True)


def build_hf(cache: Path) -> Path:
    """Save the random-weight transformers model once (seeded) under ``CACHE/hf``."""
    hf = cache / "hf"
    if (hf / DONE).is_file():
        return hf
    import torch
    import transformers

    _log(f"building the random-weight Qwen2 model in {hf}")
    if hf.exists():
        shutil.rmtree(hf)
    torch.manual_seed(SEED)
    config = transformers.Qwen2Config(**CONFIG)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.eval()
    model.save_pretrained(hf)
    (hf / DONE).write_text(json.dumps({"seed": SEED, "config": CONFIG}) + "\n")
    return hf


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("torch", "transformers", "optimum", "optimum-intel", "nncf", "openvino"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "missing"
    return out


def export(cache: Path, precision: str) -> Path:
    """Export one precision with ``optimum-cli`` into a temp folder, then move it in place with ``DONE``."""
    out = ir_dir(cache, precision)
    if ir_ready(cache, precision):
        _log(f"{precision}: already built in {out}")
        return out
    hf = build_hf(cache)
    tmp = out.with_name(out.name + ".partial")
    for stale in (tmp, out):
        if stale.exists():
            shutil.rmtree(stale)
    cli = Path(sys.executable).parent / "optimum-cli"
    cmd = [str(cli), "export", "openvino", "--model", str(hf), "--task", "text-generation-with-past"]
    cmd += [*EXPORT_ARGS[precision], "--disable-convert-tokenizer", str(tmp)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    _log(f"{precision}: {' '.join(cmd[1:])}")
    started = time.time()
    subprocess.run(cmd, check=True, env=env)
    seconds = time.time() - started
    meta = {
        "model": MODEL,
        "precision": precision,
        "seed": SEED,
        "config": CONFIG,
        "export_args": EXPORT_ARGS[precision],
        "export_seconds": round(seconds, 1),
        "versions": _versions(),
    }
    (tmp / "realsize.json").write_text(json.dumps(meta, indent=1) + "\n")
    tmp.rename(out)
    (out / DONE).write_text("")
    size = (out / "openvino_model.bin").stat().st_size
    _log(f"{precision}: done in {seconds:.0f} s, openvino_model.bin {size / 1e6:,.0f} MB")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "precisions", nargs="*", metavar="PRECISION", help=f"any of {', '.join(PRECISIONS)} (default: all)"
    )
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"cache folder (default {DEFAULT_CACHE})")
    args = parser.parse_args(argv)
    try:
        import optimum.intel  # noqa: F401
        import torch  # noqa: F401
    except ImportError as exc:
        parser.error(f"needs torch and optimum-intel ({exc}); see benchmarks/requirements-realsize.txt")
    unknown = sorted(set(args.precisions) - set(PRECISIONS))
    if unknown:
        parser.error(f"unknown precision {', '.join(unknown)}: choose from {', '.join(PRECISIONS)}")
    for precision in args.precisions or PRECISIONS:
        export(args.cache.expanduser(), precision)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
