"""Compressed weights as ONNX Runtime runs them: MatMulNBits, GatherBlockQuantized, f16 + Cast.

One job a module: ``weights`` (what a recognised weight is), ``recognise`` (the IR patterns of
compressed weights), ``plan`` (which MatMuls run together, decided up front), ``pack`` (their
bytes, pure numpy), ``nbits`` (their initializers and the ``MatMulNBits`` node), ``exact_split`` (the
exact int8 split), ``emitted`` (what is written, once a weight), ``emit`` (what translators call).

Why these ops, measured with ``benchmarks/weights_kernels.py`` (ONNX Runtime 1.31 CPU, AVX2):

- ``com.microsoft`` ``MatMulNBits`` is emitted directly rather than standard blocked
  ``DequantizeLinear`` + ``MatMul``: ONNX Runtime fuses the latter into the same kernel, but at
  ``session.qdq_matmulnbits_accuracy_level``, whose default 4 quantizes the activations to int8
  (logits move ~1e-2 from OpenVINO's exact results), and a plain ONNX Runtime user would not know
  to set it. Written directly, ``accuracy_level`` 0 computes ``(q - zp) * scale`` in f32 exactly
  as OpenVINO's CPU plugin does; the file also keeps OpenVINO's ``[N, K]`` layout (DQ's blocked
  form is ``[K, N]``: a transpose at conversion and another when ORT fuses it).
- 4-bit codes go in as stored: OpenVINO packs u4 two a byte, the first value in the low nibble,
  which is ``MatMulNBits``' ``B`` layout, so the bytes are the ``.bin``'s (i4 flips each nibble's
  top bit: ``q + 8``).
- Decoding (at most ``SPLIT_MAX_ROWS`` rows of activations) runs the int8 kernels
  (``accuracy_level`` 4), which ONNX Runtime makes 1.5x (4-bit) to 20x (8-bit) faster than its
  f32-compute ones on AVX2, on activations split exactly into three parts whose int8
  quantization loses nothing that f32 would keep (:func:`~.exact_split.int8_grid_parts`): the result is
  OpenVINO's exact one to f32 rounding. More rows (a prompt) run a 4-bit weight's f32-compute
  kernel, faster there, through an ``If`` on the row count.
- 8-bit weights are written as they are (``MatMulNBits`` bits=8) and split up to
  ``SPLIT8_MAX_ROWS`` rows: ONNX Runtime 1.31 has no fast f32-compute 8-bit kernel on x86 (at
  ``accuracy_level`` 0 it dequantizes all of B on every call). Beyond that (a long prompt) the
  split's three partial results per row would outgrow the weight itself (a 151936-row LM head:
  7 GB of partials for 4,000 tokens), so the weight is dequantized to f32 in the run
  (``DequantizeLinear``, blocked) for one f32 ``MatMul``. Where the split cannot be built (an
  input of unknown rank) an int8 weight runs
  as one 4-bit ``MatMulNBits`` over twice the rows, its high and low nibbles: ``q - zp = 16 (hi -
  zp_hi) + (lo - zp_lo)`` with ``zp = 16 zp_hi + zp_lo``, scales ``16 s`` and ``s``, then the two
  halves added (exact, the int8 weight's memory). With ``int8_activations`` (an explicit option,
  what OpenVINO's default CPU config does) the activations are quantized once: int8 runs as
  ``MatMulNBits`` bits=8 and int4 at ``accuracy_level`` 4.
- Embeddings: ``GatherBlockQuantized`` dequantizes the gathered rows in f32 and gives zeros for
  out-of-range indices (negative ones count from the end): OpenVINO's Gather-8, with no guard.
- f16/bf16 weights stay in their type in the file and reach f32 through a Cast (which ONNX
  Runtime folds at load for a MatMul: its CPU provider has no f32-activation kernel over f16
  weights); a Gather gathers the f16 rows first, so tables stay f16 in memory.
"""

from .emit import MIN_EXPANDED, float_weight, gather_quantized, matmul_quantized, record_expanded
from .emitted import EmittedWeights
from .exact_split import SPLIT8_MAX_ROWS, SPLIT_MAX_ROWS
from .nbits import MS_DOMAIN
from .recognise import WeightPlan, plan_weights, weight_source
from .weights import CompressedInput, FloatWeight, QuantizedWeight

__all__ = [
    "MIN_EXPANDED",
    "MS_DOMAIN",
    "SPLIT8_MAX_ROWS",
    "SPLIT_MAX_ROWS",
    "CompressedInput",
    "EmittedWeights",
    "FloatWeight",
    "QuantizedWeight",
    "WeightPlan",
    "float_weight",
    "gather_quantized",
    "matmul_quantized",
    "plan_weights",
    "record_expanded",
    "weight_source",
]
