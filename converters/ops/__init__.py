"""Op families. Importing this package registers every converter and kernel."""

from . import conv, elementwise, linear, norm, pool, reduce, resample, shape  # noqa: F401
