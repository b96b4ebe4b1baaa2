"""Op families. Importing this package registers every converter and kernel."""

from . import (bitwise, conv, elementwise, fold, linear, misc, mutation, norm, pool, reduce, resample, scatter,  # noqa: F401
               shape, sort)
