"""torch's sum/mean/var over many elements through the converter: as accurate as torch's own float32 (both against
torch in float64), where MLX's one float accumulator per output erred ~100x torch's over a 64^3 volume
(``converters/ops/reduce.py``, ``layers/_blocked_sum.py``)."""

import mlx.core as mx
import numpy as np
import pytest
import torch

import porter
from tests.converter_check import Fn


REDUCTIONS = {
    "mean over the volume": lambda x: x.mean(dim=(2, 3, 4)),
    "sum of everything": lambda x: x.sum(),
    "sum over depth and height": lambda x: x.sum(dim=(2, 3), keepdim=True),
    "var over the volume": lambda x: x.var(dim=(2, 3, 4)),
    "var_mean over the volume": lambda x: torch.var_mean(x, dim=(2, 3, 4), correction=0),
}


def _rel(a, ref):
    return float(np.abs(np.asarray(a, np.float64) - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_large_reductions_are_as_accurate_as_torchs(name):
    torch.manual_seed(0)
    x = torch.rand(2, 3, 64, 64, 64) + 0.5  # one-signed: where a single accumulator drifts most
    model = Fn(REDUCTIONS[name])
    ported = porter.convert(model, (x,), io_layout="torch")
    outputs = ported(mx.array(x.numpy()))
    outputs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
    expected = model(x.double())
    expected = expected if isinstance(expected, tuple) else (expected,)
    single = model(x)
    single = single if isinstance(single, tuple) else (single,)
    for got, exact, torch32 in zip(outputs, expected, single):
        exact = exact.numpy()
        assert got.shape == exact.shape and got.dtype == mx.float32
        assert _rel(got, exact) <= 5 * max(_rel(torch32.numpy(), exact), 6e-8), (_rel(got, exact),
                                                                                  _rel(torch32.numpy(), exact))
