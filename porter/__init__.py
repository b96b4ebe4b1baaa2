"""Porter: port PyTorch models to MLX.

Importing :mod:`porter` never imports torch; conversion entry points import it lazily.
"""

__version__ = "0.1.0"

# First, before anything imports mlx.core: give MLX an optimized BLAS on Linux (see porter/_blas.py).
from porter import _blas  # noqa: E402

_blas.configure()

from porter._runtime import get_cache_limit, runtime_info, set_cache_limit  # noqa: E402

from porter import _runtime  # noqa: E402

_runtime.configure_cache()

# name -> (module, attribute); resolved on first access so `import porter` stays light and torch-free
_LAZY = {
    "convert": ("porter.converters", "convert"),
    "save": ("porter.converters", "save"),
    "load": ("porter.converters", "load"),
    "inspect_model": ("porter.converters", "inspect_model"),
    "PortedModel": ("porter.converters", "PortedModel"),
    "UnsupportedOpsError": ("porter.converters", "UnsupportedOpsError"),
    "CaptureError": ("porter.converters", "CaptureError"),
    "ArtifactError": ("porter.converters", "ArtifactError"),
    "UnusedArraysWarning": ("porter.converters", "UnusedArraysWarning"),
    "TrainModeError": ("porter.converters", "TrainModeError"),
    "set_max_elements": ("porter.converters", "set_max_elements"),
    "max_elements": ("porter.converters", "max_elements"),
    "update_weights": ("porter.update", "update_weights"),
    "UpdateResult": ("porter.update", "UpdateResult"),
    "WeightsUpdateError": ("porter.converters.weights_update", "WeightsUpdateError"),
    "export_function": ("porter.export", "export_function"),
    "ExportError": ("porter.export", "ExportError"),
    "ExportReport": ("porter.export", "ExportReport"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'porter' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY))

# Imported eagerly (it imports neither torch nor mlx at module level) so that the name `porter.validate` is the
# function: a lazy import would let the submodule `porter/validate.py` shadow it after `import porter.validate`.
from porter.validate import Report, validate  # noqa: E402
