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
