"""Porter: port PyTorch models to MLX.

Importing :mod:`porter` never imports torch; conversion entry points import it lazily.
"""

__version__ = "0.1.0"

# Imported eagerly (it imports neither torch nor mlx at module level) so that the name `porter.validate` is the
# function: a lazy import would let the submodule `porter/validate.py` shadow it after `import porter.validate`.
from porter.validate import Report, validate  # noqa: E402
