"""Op families. Importing this package registers every converter and kernel."""

from . import bitwise, conv, elementwise, linear, misc, mutation, norm, pool, reduce, resample, shape  # noqa: F401
