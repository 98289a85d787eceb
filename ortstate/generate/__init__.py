"""Greedy text generation over converted stateful LLM IRs (optimum-intel exports).

``Generator.from_dir(folder)`` converts the folder's IRs and feeds each step as optimum-intel does
(see :mod:`ortstate.generate.feeds`); the KV cache or SSM state stays in the model's variables.
"""

from .encoder_decoder import Encoder, TextEmbedder
from .feeds import FeedRules, InputSpec, input_specs
from .generator import GenerationRun, Generator
from .model_dir import GenerationError, ModelConfig, ModelFiles, find_model_files, read_config

__all__ = [
    "Encoder",
    "FeedRules",
    "GenerationError",
    "GenerationRun",
    "Generator",
    "InputSpec",
    "ModelConfig",
    "ModelFiles",
    "TextEmbedder",
    "find_model_files",
    "input_specs",
    "read_config",
]
