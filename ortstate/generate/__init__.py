"""Text generation over converted stateful LLM IRs (optimum-intel exports).

``Generator.from_dir(folder)`` converts the folder's IRs and feeds each step as optimum-intel does
(see :mod:`ortstate.decoders.feeds`); the KV cache or SSM state stays in the model's variables.
It decodes greedily, samples, or runs beam search through the model's ``beam_idx``; it can continue
from the state a generation left (``reset=False``); :class:`TextStreamer` prints text as it comes,
:class:`Chat` keeps a conversation in the cache.

What a decoder takes (its folder, config, feeding rules, state layout) is :mod:`ortstate.decoders`';
the names generation has always exported from there (``FeedRules``, ``ModelConfig``,
``find_model_files``, ...) are exported here too, and a :class:`~ortstate.errors.DecoderError` is a
:class:`GenerationError`.
"""

from ..decoders import (
    FeedRules,
    ModelConfig,
    ModelFiles,
    StateLayout,
    find_model_files,
    read_config,
    state_layout,
)
from ..errors import GenerationError
from .beam_search import Hypothesis
from .chat import Chat
from .continuous import ContinuousBatcher, KeptStream
from .encoder_decoder import Encoder, TextEmbedder
from .generator import GenerationRun, Generator
from .options import SearchOptions
from .streamer import IncrementalDecoder, TextStreamer
from .tokenizer import Tokenizer

__all__ = [
    "Chat",
    "ContinuousBatcher",
    "Encoder",
    "FeedRules",
    "GenerationError",
    "GenerationRun",
    "Generator",
    "Hypothesis",
    "IncrementalDecoder",
    "KeptStream",
    "ModelConfig",
    "ModelFiles",
    "SearchOptions",
    "StateLayout",
    "TextEmbedder",
    "TextStreamer",
    "Tokenizer",
    "find_model_files",
    "read_config",
    "state_layout",
]
