"""The machinery behind :func:`porter.validate`, one job per module.

- :mod:`.inputs`: the default input sets (the example's shapes, then a second size both models accept);
- :mod:`.hooks`: torch submodule outputs through forward hooks, compared with the port's ``trace``;
- :mod:`.grads`: gradient parity for inputs and parameters;
- :mod:`.report`: :class:`Report` (``ok``, first divergence, tables, JSON);
- :mod:`.api`: :func:`validate`, which runs them.

The bar, NaN/inf rules and layout handling are :mod:`porter.compare`'s. Importing this package imports neither
torch nor mlx.
"""

from .api import validate
from .report import Report

__all__ = ["validate", "Report"]
