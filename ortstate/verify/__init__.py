"""Step OpenVINO and ortstate side by side on one IR and compare every output and variable.

- :mod:`~ortstate.verify.run`: the run (N steps, a reset, N more) in each form, and the comparison;
- :mod:`~ortstate.verify.inputs`: what is fed to both (a decoder's by its feeding rules, any other
  model's random), checked against the model's Parameters;
- :mod:`~ortstate.verify.reference`: OpenVINO's side, imported only when needed
  (``pip install '.[verify]'``).
"""

from .inputs import DEFAULT_DIM, VerifyInputs
from .reference import OV_CONFIG
from .run import DEFAULT_ATOL, DEFAULT_RTOL, Check, FormResult, VerifyResult, compare, load_openvino, verify

__all__ = [
    "DEFAULT_ATOL",
    "DEFAULT_DIM",
    "DEFAULT_RTOL",
    "OV_CONFIG",
    "Check",
    "FormResult",
    "VerifyInputs",
    "VerifyResult",
    "compare",
    "load_openvino",
    "verify",
]
