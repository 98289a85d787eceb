"""Build the real-size stateful LLM IRs of issue 12 with optimum-intel, from a random-weight config.

The model has the shape of Qwen2-0.5B (hidden 896, 24 layers, 14 heads, 2 KV heads, intermediate 4864,
vocab 151936, untied LM head) with random weights from a fixed seed: nothing is downloaded from a hub.
It is saved once with ``save_pretrained`` and exported per precision with::

    optimum-cli export openvino --model HF --task text-generation-with-past --weight-format P \\
        [--group-size 128 --ratio 1.0] --disable-convert-tokenizer OUT

into ``CACHE/ir/<precision>/``, with ``DONE`` touched last (a folder without it is incomplete and is
rebuilt). Already built precisions are skipped, so this is cheap to call before every benchmark run.

Other shapes of the same model are *variants* (:data:`VARIANTS`: a name, the config keys it changes, and
the folder of its own under ``CACHE``); ``--variant wide`` builds ``qwen2-0.5b-random-mha`` (full
multi-head KV: 14 KV heads, a 7× larger cache) into ``CACHE/qwen2-0.5b-random-mha/{hf,ir}``. The
default variant keeps ``CACHE/hf`` and ``CACHE/ir``.

This needs torch + optimum-intel, which ortstate itself never needs: run it with the Python of a separate
venv (see ``benchmarks/requirements-realsize.txt``)::

    python3 -m venv ~/venvs/optimum
    ~/venvs/optimum/bin/pip install -r benchmarks/requirements-realsize.txt
    ~/venvs/optimum/bin/pip uninstall -y torchvision   # built for another torch; breaks transformers
    flock /tmp/realsize.lock ~/venvs/optimum/bin/python -m benchmarks real-size-build [--cache DIR] \
        [--variant wide] [int4 ...]

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PRECISIONS = ("int4", "int8", "fp16", "fp32")  # build order: what the benchmark needs first
SEED = 20240607
DEFAULT_CACHE = Path(os.environ.get("ORTSTATE_REALSIZE_CACHE", "~/.cache/ortstate/realsize")).expanduser()
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


@dataclass(frozen=True)
class Variant:
    """One shape of the model: the keys of :data:`CONFIG` it changes and where it is cached.

    Attributes:
        model: its name in results (and its folder under the cache, unless it is the default).
        description: a few words for reports.
        overrides: :data:`CONFIG` keys it sets.
        own_folder: False for the default variant only (it keeps ``CACHE/hf`` and ``CACHE/ir``).
    """

    model: str
    description: str
    overrides: dict[str, Any] = field(default_factory=dict)
    own_folder: bool = True

    @property
    def config(self) -> dict[str, Any]:
        """The transformers config of this variant."""
        return {**CONFIG, **self.overrides}


VARIANTS = {
    "default": Variant(
        "qwen2-0.5b-random", "Qwen2-0.5B shape, random weights (14 heads, 2 KV heads)", own_folder=False
    ),
    "wide": Variant(
        "qwen2-0.5b-random-mha",
        "Qwen2-0.5B shape with full multi-head KV (14 KV heads: a 7× larger cache), random weights",
        {"num_key_value_heads": 14},
    ),
}
DEFAULT_VARIANT = "default"
MODEL = VARIANTS[DEFAULT_VARIANT].model


def model_dir(cache: Path, variant: str = DEFAULT_VARIANT) -> Path:
    """The folder of one variant: its ``hf/``, ``ir/`` (and the benchmark's scratch ``onnx/``)."""
    v = VARIANTS[variant]
    return cache / v.model if v.own_folder else cache


def ir_dir(cache: Path, precision: str, variant: str = DEFAULT_VARIANT) -> Path:
    """Where the IR of one precision lives (``openvino_model.xml`` / ``.bin`` inside)."""
    return model_dir(cache, variant) / "ir" / precision


def ir_ready(cache: Path, precision: str, variant: str = DEFAULT_VARIANT) -> bool:
    """True when the IR of ``precision`` was completely built (its ``DONE`` marker exists)."""
    return (ir_dir(cache, precision, variant) / DONE).is_file()


def _log(msg: str) -> None:
    print(f"[realsize_build] {msg}", file=sys.stderr, flush=True)


def build_hf(cache: Path, variant: str = DEFAULT_VARIANT) -> Path:
    """Save the random-weight transformers model once (seeded) under the variant's ``hf``."""
    hf = model_dir(cache, variant) / "hf"
    if (hf / DONE).is_file():
        return hf
    import torch
    import transformers

    config = VARIANTS[variant].config
    _log(f"building the random-weight Qwen2 model {VARIANTS[variant].model} in {hf}")
    if hf.exists():
        shutil.rmtree(hf)
    torch.manual_seed(SEED)
    model = transformers.AutoModelForCausalLM.from_config(transformers.Qwen2Config(**config))
    model.eval()
    model.save_pretrained(hf)
    (hf / DONE).write_text(json.dumps({"seed": SEED, "config": config}) + "\n")
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


def export(cache: Path, precision: str, variant: str = DEFAULT_VARIANT) -> Path:
    """Export one precision with ``optimum-cli`` into a temp folder, then move it in place with ``DONE``."""
    out = ir_dir(cache, precision, variant)
    if ir_ready(cache, precision, variant):
        _log(f"{precision}: already built in {out}")
        return out
    hf = build_hf(cache, variant)
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
        "model": VARIANTS[variant].model,
        "variant": variant,
        "precision": precision,
        "seed": SEED,
        "config": VARIANTS[variant].config,
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
    parser.add_argument(
        "--variant",
        choices=VARIANTS,
        default=DEFAULT_VARIANT,
        help="the model's shape: " + "; ".join(f"{k}: {v.model}, {v.description}" for k, v in VARIANTS.items()),
    )
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
        export(args.cache.expanduser(), precision, args.variant)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
