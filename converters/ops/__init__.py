"""Op families. Importing this package registers every converter and kernel."""

from . import (bitwise, complex, conv, elementwise, embedding_bag, encode, fft, fold, linear, misc,  # noqa: F401
               mutation, norm, pointwise, pool, products, recurrent, reduce, resample, resample_aa, sample, scan,
               scatter, shape, sort, special)
