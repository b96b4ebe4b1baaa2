import os
import sys

import torch

# Before any test module imports mlx.core: porter hands MLX an optimized BLAS only if it is imported first.
import porter  # noqa: F401

sys.path.insert(0, os.path.dirname(__file__))  # `from helpers import ...` in every test file

torch.manual_seed(0)
