"""Op families. Importing this package registers every converter and kernel."""

from . import (bitwise, complex, conv, elementwise, embedding_bag, encode, fft, fold, linalg, linalg_more,  # noqa: F401
               linear, losses, misc, mutation, norm, numeric, pointwise, pool, products, recurrent, reduce, resample,
               resample_aa, sample, scan, scatter, scatter_more, shape, sort, special, special_poly, stochastic)
from . import copies  # noqa: F401,E402  (last: aliases of converters the families above registered)
