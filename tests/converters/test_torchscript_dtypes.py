"""TorchScript passes a ``dtype=`` argument as its c10 ScalarType code (``softmax(x, -1, dtype=torch.float64)`` is
``aten::softmax(%x, %dim, 7)``). The capture turns each code into the dtype name the converters read; before, the
code reached the artifact and the port failed at run ('unknown dtype 7'). Scripted and traced, against torch."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import porter

DTYPES = [torch.float64, torch.float16, torch.bfloat16, torch.float32, torch.int32, torch.int64]


class WithDtypes(nn.Module):
    def forward(self, x):
        return (F.softmax(x, -1, dtype=torch.float64), F.log_softmax(x, 1, dtype=torch.float64),
                x.cumsum(1, dtype=torch.float64), x.sum(1, keepdim=True, dtype=torch.float64),
                x.mean(1, keepdim=True, dtype=torch.float64), (x * 10).cumsum(1, dtype=torch.int32),
                x.prod(1, dtype=torch.float64))


@pytest.mark.parametrize("how", ["script", "trace"])
def test_dtype_arguments_of_a_torchscript_model(how):
    model = WithDtypes()
    x = torch.randn(2, 5)
    frozen = torch.jit.script(model) if how == "script" else torch.jit.trace(model, x)
    port = porter.convert(frozen, x, io_layout="torch")
    y = torch.randn(2, 5)
    for i, (a, e) in enumerate(zip(port(mx.array(y.numpy())), model(y))):
        assert str(a.dtype).replace("mlx.core.", "") == str(e.dtype).replace("torch.", ""), (i, a.dtype, e.dtype)
        np.testing.assert_allclose(np.array(a), e.numpy(), rtol=1e-6, atol=1e-6, err_msg=f"output {i}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_each_code_maps_to_its_dtype(dtype):
    class Cast(nn.Module):
        def forward(self, x):
            return x.sum(1, dtype=dtype)

    x = torch.randn(2, 3) * 4
    port = porter.convert(torch.jit.trace(Cast(), x), x, io_layout="torch")
    out = port(mx.array(x.numpy()))
    assert str(out.dtype).replace("mlx.core.", "") == str(dtype).replace("torch.", "")
    expected = Cast()(x)
    np.testing.assert_allclose(np.array(out.astype(mx.float64)), expected.double().numpy(), rtol=1e-2, atol=1e-2)
