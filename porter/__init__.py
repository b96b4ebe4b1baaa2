"""Porter: port PyTorch models to MLX.

Importing :mod:`porter` never imports torch; conversion entry points import it lazily.
"""

__version__ = "0.1.0"
