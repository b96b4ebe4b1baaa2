"""``porter.validate``: run a torch model and its port on the same inputs and say where they differ.

The implementation lives in :mod:`porter.validation` (inputs, hooks, gradients, report) and :mod:`porter.compare`
(the accuracy bar, NaN/inf rules, layouts); this module keeps the names ``porter.validate`` has always offered.

The bar, for each compared tensor: ``max|porter - torch| <= max(rtol * max|torch|, atol)``, i.e. the error
relative to the tensor's largest magnitude, with ``atol`` as a floor for tensors that are all (nearly) zero.

Importing this module imports neither torch nor mlx: both are imported when :func:`validate` runs.
"""

from porter.compare import compare as _compare  # noqa: F401  (the bar, under its old name)
from porter.compare import parse_layout  # noqa: F401
from porter.validation import Report, validate

__all__ = ["validate", "Report"]
