"""Benchmark cases: average pools, adaptive average pools, LP pools and max unpooling (torch NCHW vs Porter NHWC).

Run: ``python benchmarks/layers.py --filter avg`` (or ``lp_pool``, ``unpool``). ``mlx.nn.AvgPool2d`` is listed
only where its semantics match torch's: without padding (with padding it divides border windows by the full kernel,
which torch does only with count_include_pad=True and never in ceil mode).
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as mnn
import numpy as np
import torch
import torch.nn.functional as F

from benchmarks.layers import case
from porter.layers import (
    AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d, AvgPool1d, AvgPool2d, AvgPool3d, LPPool2d, MaxUnpool2d,
)

# ------------------------------------------------------------------------------------------------ avg pool
case("avg_pool2d 3/2/1", (8, 64, 112, 112), lambda: torch.nn.AvgPool2d(3, 2, 1), lambda: AvgPool2d(3, 2, 1))
case("avg_pool2d 3/2/1 small", (2, 16, 28, 28), lambda: torch.nn.AvgPool2d(3, 2, 1), lambda: AvgPool2d(3, 2, 1))
case("avg_pool2d 3/2/1 cip=False ceil", (8, 64, 112, 112),
     lambda: torch.nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),
     lambda: AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False))
case("avg_pool2d 2/2/0", (8, 64, 112, 112), lambda: torch.nn.AvgPool2d(2), lambda: AvgPool2d(2))
# mlx.nn.AvgPool2d has torch's semantics only without padding (it always divides by the full kernel)
case("avg_pool2d 2/2/0 [mlx.nn]", (8, 64, 112, 112), lambda: torch.nn.AvgPool2d(2), lambda: mnn.AvgPool2d(2))
case("avg_pool2d 3/2/0", (8, 64, 112, 112), lambda: torch.nn.AvgPool2d(3, 2), lambda: AvgPool2d(3, 2))
case("avg_pool2d 3/2/0 [mlx.nn]", (8, 64, 112, 112), lambda: torch.nn.AvgPool2d(3, 2), lambda: mnn.AvgPool2d(3, 2))
case("avg_pool1d 3/2/1", (8, 64, 4096), lambda: torch.nn.AvgPool1d(3, 2, 1), lambda: AvgPool1d(3, 2, 1))
case("avg_pool3d 3/2/1", (2, 32, 16, 56, 56), lambda: torch.nn.AvgPool3d(3, 2, 1), lambda: AvgPool3d(3, 2, 1))

# ------------------------------------------------------------------------------------------------ adaptive avg
case("adaptive_avg_pool2d (1,1)", (8, 512, 7, 7), lambda: torch.nn.AdaptiveAvgPool2d((1, 1)),
     lambda: AdaptiveAvgPool2d((1, 1)))
case("adaptive_avg_pool2d (1,1) 56x56", (8, 256, 56, 56), lambda: torch.nn.AdaptiveAvgPool2d((1, 1)),
     lambda: AdaptiveAvgPool2d((1, 1)))
case("adaptive_avg_pool2d (7,7) from 14x14", (8, 512, 14, 14), lambda: torch.nn.AdaptiveAvgPool2d((7, 7)),
     lambda: AdaptiveAvgPool2d((7, 7)))
case("adaptive_avg_pool2d (7,7) from 10x10", (8, 512, 10, 10), lambda: torch.nn.AdaptiveAvgPool2d((7, 7)),
     lambda: AdaptiveAvgPool2d((7, 7)))
case("adaptive_avg_pool1d 5 from 23", (8, 64, 23), lambda: torch.nn.AdaptiveAvgPool1d(5),
     lambda: AdaptiveAvgPool1d(5))
case("adaptive_avg_pool3d (2,3,3)", (2, 64, 8, 14, 14), lambda: torch.nn.AdaptiveAvgPool3d((2, 3, 3)),
     lambda: AdaptiveAvgPool3d((2, 3, 3)))

# ------------------------------------------------------------------------------------------------ LP pool
case("lp_pool2d p=2 3/2", (8, 64, 56, 56), lambda: torch.nn.LPPool2d(2, 3, 2), lambda: LPPool2d(2, 3, 2))
case("lp_pool2d p=3 2/2 ceil", (8, 64, 55, 55), lambda: torch.nn.LPPool2d(3, 2, 2, ceil_mode=True),
     lambda: LPPool2d(3, 2, 2, ceil_mode=True))


# ------------------------------------------------------------------------------------------------ max unpool
def _unpool_pair(shape, k):
    """Pooled values are the benchmark input; indices come from torch's max pool of a fixed random map."""
    n, c, h, w = shape
    rng = np.random.default_rng(1)
    source = torch.from_numpy(rng.standard_normal((n, c, h * k, w * k)).astype(np.float32))
    _, idx = F.max_pool2d(source, k, return_indices=True)
    idx_mx = mx.array(np.ascontiguousarray(np.moveaxis(idx.numpy(), 1, -1)))

    def make_torch():
        layer = torch.nn.MaxUnpool2d(k)
        return lambda x: layer(x, idx)

    def make_porter():
        layer = MaxUnpool2d(k)
        return lambda x: layer(x, idx_mx)

    return make_torch, make_porter


case("max_unpool2d 2", (8, 64, 56, 56), *_unpool_pair((8, 64, 56, 56), 2))
case("max_unpool2d 2 small", (2, 16, 14, 14), *_unpool_pair((2, 16, 14, 14), 2))
