"""The ONNX Runtime session options ortstate chooses for a model when the caller gives none.

One choice so far, measured on 2 cores (``benchmarks/concurrency.py``; the measurements are in
``benchmarks/README.md``, "Concurrency", and ``docs/performance.md``): ONNX Runtime's CPU memory
arena hands out every intermediate tensor under one mutex per session. A recurrent model steps in
tens of µs with many small tensors, so requests stepped from several threads on one session
serialise on that mutex: with the arena they ran no faster than from one thread, without it they
scaled, and one thread is a little faster without it too. Decoders whose caches grow every step
allocate large, changing buffers the arena recycles (one stream is slower without it), so they keep
it: the arena goes off only for models whose variables all have static shapes. (Serving many decode
streams from several threads is the exception: there the arena costs more than it saves; callers
who do that pass their own ``sess_options`` with ``enable_cpu_mem_arena = False``.)
"""

from __future__ import annotations

import onnxruntime as ort

from ..meta import ModelMeta

__all__ = [
    "copy_session_options",
    "default_session_options",
    "log_severity",
    "quiet_session_options",
    "set_log_severity",
    "static_states",
    "tune_session_options",
]

# ONNX Runtime logs a failed run itself (a red ``[E:onnxruntime:...]`` line) before raising, and warns
# about graph inputs that have initializers, which the explicit form's graphs have by design. ortstate
# raises a RunError carrying ONNX Runtime's whole reason, so by default only fatal messages (4) get
# through; ``set_log_severity`` (the CLI's ``--verbose``) lets them through again.
_log_severity = 4


def static_states(meta: ModelMeta) -> bool:
    """True if the model has variables and every one has a fully static shape."""
    return bool(meta.variables) and all(
        v.shape is not None and all(isinstance(d, int) for d in v.shape) for v in meta.variables
    )


def tune_session_options(options: ort.SessionOptions, meta: ModelMeta) -> ort.SessionOptions:
    """Apply ortstate's choices for this model to ``options`` (in place) and return them."""
    if static_states(meta):
        options.enable_cpu_mem_arena = False
    return options


def set_log_severity(level: int) -> None:
    """Set the severity from which ONNX Runtime's own log is shown, for the sessions ortstate makes
    without ``sess_options`` from now on: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal (the default).

    Sessions given ``sess_options`` log as those options say.

    Raises:
        ValueError: ``level`` is not 0..4.
    """
    global _log_severity
    if not isinstance(level, int) or not 0 <= level <= 4:
        raise ValueError(f"log severity must be 0 (verbose) .. 4 (fatal), got {level!r}")
    _log_severity = level


def log_severity() -> int:
    """The severity set by :func:`set_log_severity` (4, fatal only, by default)."""
    return _log_severity


def quiet_session_options() -> ort.SessionOptions:
    """New ``SessionOptions`` logging from :func:`log_severity` on (quiet by default)."""
    options = ort.SessionOptions()
    options.log_severity_level = _log_severity
    return options


def default_session_options(meta: ModelMeta) -> ort.SessionOptions:
    """What :class:`~ortstate.StatefulSession` uses without ``sess_options``: quiet, and tuned."""
    return tune_session_options(quiet_session_options(), meta)


# What ``SessionOptions`` lets Python read back: its properties, and config entries by key.
_PROPERTIES = (
    "enable_cpu_mem_arena enable_mem_pattern enable_mem_reuse enable_profiling execution_mode execution_order "
    "graph_optimization_level inter_op_num_threads intra_op_num_threads log_severity_level log_verbosity_level "
    "logid optimized_model_filepath profile_file_prefix use_deterministic_compute use_per_session_threads"
).split()
# The session config keys of onnxruntime 1.31 (onnxruntime_session_options_config_keys.h) that apply
# to the CPU execution provider; the bindings cannot list the entries a caller set.
_CONFIG_KEYS = (
    "session.disable_prepacking session.use_env_allocators session.load_model_format "
    "session.save_model_format session.set_denormal_as_zero session.enable_quant_qdq_cleanup "
    "session.disable_quant_qdq session.disable_double_qdq_remover session.disable_qdq_constant_folding "
    "session.enable_dq_matmulnbits_fusion session.qdq_matmulnbits_accuracy_level "
    "session.qdq_matmulnbits_block_size session.qdqisint8allowed session.x64quantprecision "
    "session.inter_op.allow_spinning session.intra_op.allow_spinning session.inter_op.spin_duration_us "
    "session.intra_op.spin_duration_us session.inter_op.spin_backoff_max "
    "session.intra_op.spin_backoff_max session.force_spinning_stop session.intra_op_thread_affinities "
    "session.dynamic_block_base session.use_device_allocator_for_initializers "
    "session.allow_released_opsets_only session.strict_shape_type_inference "
    "session.disable_aot_function_inlining session.disable_cpu_ep_fallback "
    "session.function_expansion_byte_limit session.function_expansion_node_limit "
    "session.graph_optimizations_loop_level session.prepack.enable_parallel "
    "session.use_ort_model_bytes_directly session.use_ort_model_bytes_for_initializers "
    "session.optimized_model_external_initializers_file_name "
    "session.optimized_model_external_initializers_min_size_in_bytes "
    "session.save_external_prepacked_constant_initializers session.collect_node_memory_stats_to_file "
    "session.record_ep_graph_assignment_info session.debug_layout_transformation "
    "optimization.enable_gelu_approximation optimization.disable_specified_optimizers "
    "optimization.enable_cast_chain_elimination optimization.constant_folding_max_output_size_in_bytes "
    "optimization.minimal_build_optimizations mlas.disable_kleidiai mlas.qnbit.force_fp32 "
    "mlas.use_lut_gemm ep.context_enable ep.context_file_path ep.context_embed_mode ep.enable_weightless"
).split()


def copy_session_options(options: ort.SessionOptions) -> ort.SessionOptions:
    """A new ``SessionOptions`` with ``options``' properties and session config entries.

    The session registers the custom-op library on (and hands large initializers to) options of its
    own, so the caller's stay usable for other sessions: registering the library twice on one
    ``SessionOptions`` makes every later session on it fail with "Conflicting kernel". What the
    bindings cannot read back does not carry over: free dimension overrides, initializers and
    custom-op libraries added to ``options``, and config entries of keys not listed here.
    """
    copy = ort.SessionOptions()
    for name in _PROPERTIES:
        setattr(copy, name, getattr(options, name))
    for key in _CONFIG_KEYS:
        try:
            value = options.get_session_config_entry(key)
        except RuntimeError:  # not set
            continue
        copy.add_session_config_entry(key, value)
    return copy
