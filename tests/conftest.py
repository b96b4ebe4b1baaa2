import os

import numpy as np
import pytest
import torch

# Before any test module imports mlx.core: porter hands MLX an optimized BLAS only if it is imported first.
import porter  # noqa: F401
import mlx.core as mx  # noqa: E402  (after porter: BLAS first)

# The capture's time budget (converters/capture_strategy.py) is wall-clock: on a shared, loaded CI machine it would
# make which dims stay dynamic depend on the load. Tests run without it; tests of the budget set it themselves.
os.environ.setdefault("PORTER_CAPTURE_BUDGET", "off")


@pytest.fixture(autouse=True)
def _seed():
    """Every test sees the same random data whatever ran before it (and on a re-run of that test alone)."""
    torch.manual_seed(0)
    np.random.seed(0)
    mx.random.seed(0)
