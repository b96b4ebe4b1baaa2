"""Op families. Importing this package registers every converter and kernel."""

from . import (bitwise, conv, elementwise, encode, fold, linear, misc, mutation, norm, pointwise, pool,  # noqa: F401
               products, recurrent, reduce, resample, sample, scan, scatter, shape, sort)
