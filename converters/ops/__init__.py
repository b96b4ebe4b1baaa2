"""Op families. Importing this package registers every converter and kernel."""

from . import (bitwise, conv, elementwise, fold, linear, misc, mutation, norm, pool, recurrent, reduce, resample,  # noqa: F401
               sample, scatter, shape, sort)
