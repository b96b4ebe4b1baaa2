"""Converters from captured torch graphs to MLX (``porter.converters``).

Importing this package does not import torch; :func:`convert` and :func:`inspect_model` import it when called.
"""

from .api import InspectReport, convert, inspect_model
from .errors import CaptureError, UnusedArraysWarning
from .registry import UnsupportedOpsError, supported_ops
from .runtime import PortedModel, TrainModeError
from .limits import ResourceLimitError, max_elements, set_max_elements
from .schema import ArtifactError
from .serialize import load, save

__all__ = [
    "convert",
    "inspect_model",
    "InspectReport",
    "UnsupportedOpsError",
    "CaptureError",
    "PortedModel",
    "TrainModeError",
    "save",
    "load",
    "supported_ops",
    "ArtifactError",
    "UnusedArraysWarning",
    "ResourceLimitError",
    "max_elements",
    "set_max_elements",
]
