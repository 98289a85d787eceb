"""What an optimum-intel stateful decoder takes, in one place: ``generate``, ``bench``, ``verify`` and
``export`` all read a decoder through this package.

- :mod:`~ortstate.decoders.model_dir`: which IRs of an export folder play which part, and the token
  ids and search defaults of its ``config.json`` / ``generation_config.json``;
- :mod:`~ortstate.decoders.inputs`: a model's inputs (:class:`InputSpec`, read from an IR or a
  session) and random values that fit them, for every tool that feeds a model;
- :mod:`~ortstate.decoders.feeds`: the feeding rules, step by step (what optimum-intel feeds);
- :mod:`~ortstate.decoders.ir_inputs`: what the graph says about feeding it (the window
  ``cache_position`` indexes, its vocabulary, whether it is fed as a decoder at all);
- :mod:`~ortstate.decoders.state_layout`: how its variables follow rows and tokens (beam reorder
  through ``beam_idx``, attention caches, recurrent states);
- :mod:`~ortstate.decoders.synthetic`: made-up inputs for any IR, a decoder's by its feeding rules
  (:class:`SyntheticInputs`, the one builder ``bench`` and ``verify`` feed through).

It reads IR graphs and files, never ONNX or a session: it sits on :mod:`ortstate.ir`, under the
tools that run models. Its errors are :class:`~ortstate.errors.DecoderError`.
"""

from ..errors import DecoderError
from .feeds import KNOWN_INPUTS, MAMBA_FAMILY, FeedRules
from .inputs import InputSpec, concrete_shape, input_specs, random_inputs
from .ir_inputs import cache_position_window, decoder_rules, empty_start_states, logits_size
from .model_dir import SEARCH_KEYS, ModelConfig, ModelFiles, find_model_files, read_config, read_json_object
from .state_layout import StateLayout, state_layout
from .synthetic import SyntheticInputs, decoder_steps

__all__ = [
    "KNOWN_INPUTS",
    "MAMBA_FAMILY",
    "SEARCH_KEYS",
    "DecoderError",
    "FeedRules",
    "InputSpec",
    "ModelConfig",
    "ModelFiles",
    "StateLayout",
    "SyntheticInputs",
    "cache_position_window",
    "concrete_shape",
    "decoder_rules",
    "decoder_steps",
    "empty_start_states",
    "find_model_files",
    "input_specs",
    "logits_size",
    "random_inputs",
    "read_config",
    "read_json_object",
    "state_layout",
]
