"""Benchmark cases for the max-type pools: MaxPool1d/2d/3d (with and without indices), AdaptiveMaxPool2d and
FractionalMaxPool2d, plus mlx.nn.MaxPool2d on the same input for comparison (its ratio is also against torch)."""

import mlx.core as mx
import mlx.nn as mnn
import torch
import torch.nn.functional as F

import porter.layers as L
from benchmarks.layers import case

BIG = (8, 64, 112, 112)  # a ResNet stem's max pool, torch layout
SMALL = (2, 16, 28, 28)

for shape, tag in ((BIG, "big"), (SMALL, "small")):
    case(f"max_pool2d 3/2/1 {tag}", shape, lambda: lambda x: F.max_pool2d(x, 3, 2, 1), lambda: L.MaxPool2d(3, 2, 1))
    case(
        f"max_pool2d 3/2/1 indices {tag}", shape,
        lambda: lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), lambda: L.MaxPool2d(3, 2, 1, return_indices=True),
    )
    case(f"max_pool2d mlx.nn 3/2/1 {tag}", shape, lambda: lambda x: F.max_pool2d(x, 3, 2, 1),
         lambda: mnn.MaxPool2d(3, 2, 1))

case("max_pool2d 2/2 big", BIG, lambda: lambda x: F.max_pool2d(x, 2), lambda: L.MaxPool2d(2))
case("max_pool2d mlx.nn 2/2 big", BIG, lambda: lambda x: F.max_pool2d(x, 2), lambda: mnn.MaxPool2d(2))
case("max_pool2d 3/2/1 dil2 ceil", BIG, lambda: lambda x: F.max_pool2d(x, 3, 2, 1, 2, True),
     lambda: L.MaxPool2d(3, 2, 1, 2, ceil_mode=True))
case("max_pool1d 3/2/1", (16, 64, 4096), lambda: lambda x: F.max_pool1d(x, 3, 2, 1), lambda: L.MaxPool1d(3, 2, 1))
case("max_pool1d 3/2/1 indices", (16, 64, 4096), lambda: lambda x: F.max_pool1d(x, 3, 2, 1, return_indices=True),
     lambda: L.MaxPool1d(3, 2, 1, return_indices=True))
case("max_pool3d 3/2/1", (2, 32, 32, 56, 56), lambda: lambda x: F.max_pool3d(x, 3, 2, 1), lambda: L.MaxPool3d(3, 2, 1))
case("max_pool3d 3/2/1 indices", (2, 32, 32, 56, 56), lambda: lambda x: F.max_pool3d(x, 3, 2, 1, return_indices=True),
     lambda: L.MaxPool3d(3, 2, 1, return_indices=True))
case("adaptive_max_pool2d 7x7 (56->7)", (8, 256, 56, 56), lambda: lambda x: F.adaptive_max_pool2d(x, 7),
     lambda: L.AdaptiveMaxPool2d(7))
case("adaptive_max_pool2d 5x5 (56->5, uneven)", (8, 256, 56, 56), lambda: lambda x: F.adaptive_max_pool2d(x, 5),
     lambda: L.AdaptiveMaxPool2d(5))


def _fractional_pair():
    samples = torch.rand(8, 64, 2)
    samples_m = mx.array(samples.numpy())
    t = lambda x: F.fractional_max_pool2d(x, 3, output_size=(80, 80), _random_samples=samples)  # noqa: E731
    pool = L.FractionalMaxPool2d(3, output_size=(80, 80))
    m = lambda x: pool(x, random_samples=samples_m)  # noqa: E731
    return t, m


case("fractional_max_pool2d 3 (112->80)", BIG, lambda: _fractional_pair()[0], lambda: _fractional_pair()[1])

# small inputs: per-op cost dominates (below the fusing size the pools take one window array and an argmax)
case("adaptive_max_pool2d 5x5 indices small", SMALL, lambda: lambda x: F.adaptive_max_pool2d(x, 5, True),
     lambda: L.AdaptiveMaxPool2d(5, return_indices=True))


def _fractional_small_pair():
    samples = torch.rand(SMALL[0], SMALL[1], 2)
    samples_m = mx.array(samples.numpy())
    t = lambda x: F.fractional_max_pool2d(x, 3, output_size=(14, 14), return_indices=True,  # noqa: E731
                                          _random_samples=samples)
    pool = L.FractionalMaxPool2d(3, output_size=(14, 14), return_indices=True)
    m = lambda x: pool(x, random_samples=samples_m)  # noqa: E731
    return t, m


case("fractional_max_pool2d 3 indices small", SMALL, lambda: _fractional_small_pair()[0],
     lambda: _fractional_small_pair()[1])
