"""What the float16 OpInfo sweep found, held to torch's own half-precision results.

Torch's CPU kernels compute these half ops in float32 (their opmath type) and round once; so does the port. The
two may still sum in a different order, so each value is held to torch's within 1 ulp of the half format (torch's
result, rounded once from a float32 value, is itself within 1/2 ulp of the float32 result).

* ``linalg.vector_norm`` with a finite ``ord`` summed ``|x|^ord`` in half: ``|8.5|^6`` overflowed to inf where
  torch's norm is 8.5 (and ``ord=1``/``2`` sums lost bits).
* ``renorm``: torch's decomposition upcasts half with ``prims.convert_element_type``, which was refused.
"""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn

import porter

_MX = {torch.float16: mx.float16, torch.bfloat16: mx.bfloat16}

HALF_CASES = {
    "vector_norm": lambda x: (torch.linalg.vector_norm(x, 6, dim=-1), torch.linalg.vector_norm(x, 2),
                              torch.linalg.vector_norm(x, 1, dim=(0, 2), keepdim=True), x.norm(3.5, dim=1),
                              torch.linalg.vector_norm(x[0, 0, 0], 6)),  # 0-d: the sweep's case
    "renorm": lambda x: (torch.renorm(x, 2, 1, 5.0), torch.renorm(x, 1, 0, 20.0)),
}


class HalfCase(nn.Module):
    def __init__(self, name):
        super().__init__()
        self.name = name

    def forward(self, x):
        return HALF_CASES[self.name](x)


def _inputs(shape, dtype, seed):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 6
    x.view(-1)[0] = -8.4766  # |x|^6 = 3.7e5: beyond float16's 65504
    return x.to(dtype)


def _half_ulp(values, dtype):
    """The spacing of ``dtype`` at ``|values|`` (float64), subnormal spacing near 0."""
    exponent = np.floor(np.log2(np.maximum(np.abs(values), torch.finfo(dtype).tiny)))
    return 2.0 ** (exponent - {torch.float16: 10, torch.bfloat16: 7}[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", sorted(HALF_CASES))
def test_half_ops_match_torchs_half_results(name, dtype):
    model = HalfCase(name)
    ported = porter.convert(model, (_inputs((2, 3, 5), dtype, 0),), io_layout="torch")
    for shape, seed in (((2, 3, 5), 1), ((3, 4, 7), 2)):
        x = _inputs(shape, dtype, seed)
        outs = ported(mx.array(x.float().numpy()).astype(_MX[dtype]))  # io_layout="torch": no transposes
        for i, (got, want) in enumerate(zip(outs, model(x))):
            assert got.shape == tuple(want.shape), (name, i)
            assert got.dtype == _MX[want.dtype], (name, i)
            w = want.double().numpy()
            g = np.array(got.astype(mx.float32)).astype(np.float64)
            assert np.isfinite(w).all() and np.isfinite(g).all(), (name, i)
            err, ulp = np.abs(g - w), _half_ulp(w, dtype)
            assert (err <= ulp).all(), f"{name} output {i}: {(err / ulp).max():.1f} ulps off torch's {dtype}"


class ScalarArithmetic(nn.Module):
    """Python numbers a half dtype does not hold exactly: 1e30 (inf in half; XLNet's ``score - 1e30 * mask``),
    1e-8 (0 in half), 1/3, 1/sqrt(8) as factors and divisors; 7e4 (past float16's 65504) and 0.1 added, which torch
    rounds to the half dtype first."""

    def forward(self, x, mask):
        return x - 1e30 * mask, x * 1e-8, 1e-8 * x, 7e4 - x, x + 0.1, x / 3.0, x * 0.3535533905932738


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_scalar_arithmetic_keeps_the_number_in_float32_as_torch(dtype):
    """torch's CPU mul and div of a half tensor by a number compute in float32 and round once (add and sub round
    the number first): the port gives torch's values exactly, infinities where torch has them and no NaN (before:
    MLX's ``inf * 0`` in the masked product, 0 for ``x * 1e-8``)."""
    model = ScalarArithmetic()

    def inputs(shape, seed):
        gen = torch.Generator().manual_seed(seed)
        return torch.randn(*shape, generator=gen).mul(6).to(dtype), (torch.rand(*shape, generator=gen) < 0.5).to(dtype)

    ported = porter.convert(model, inputs((2, 3), 0), io_layout="torch")
    for shape, seed in (((2, 3), 1), ((4, 5), 2)):
        x, mask = inputs(shape, seed)
        outs = ported(*(mx.array(t.float().numpy()).astype(_MX[dtype]) for t in (x, mask)))
        for i, (got, want) in enumerate(zip(outs, model(x, mask))):
            assert got.dtype == _MX[want.dtype], i
            np.testing.assert_array_equal(np.array(got.astype(mx.float32)), want.float().numpy(), err_msg=f"output {i}")
