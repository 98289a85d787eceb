"""Passes that make a model batchable by the stream pool: many streams, one row each, in one run.

- :mod:`.relax`: every dim that could be the batch made dynamic (as OpenVINO's ``set_batch``);
- :mod:`.unpin`: reshapes that restate their input's shape read the batch at run time;
- :mod:`.shape_math`: shape arithmetic every run computes the same way, folded;
- :mod:`.axes`: the batch followed through the graph by shape inference, to every output and
  variable (with :mod:`.legible`: what shape inference cannot see by itself, told it);
- :mod:`.row_init`: a variable's init flag made one per row;
- :mod:`.row_index`: the inputs that index rows of the batch (the beam reorder's);
- :mod:`.pool_form`: all of them in their order, what the pool loads.

Not imported by :mod:`ortstate.passes` itself: only the stream pool needs them.
"""

from .pool_form import PoolForm, pool_form
from .row_index import row_index_inputs

__all__ = ["PoolForm", "pool_form", "row_index_inputs"]
