"""Op families. Importing this package registers every converter and kernel."""

from . import (bitwise, conv, elementwise, embedding_bag, encode, fold, linear, misc, mutation, norm,  # noqa: F401
               pointwise, pool, products, recurrent, reduce, resample, sample, scan, scatter, shape, sort)
