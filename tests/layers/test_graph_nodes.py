"""How many MLX graph nodes a layer call builds (issue 15: each costs ~10 us to run on the CPU stream, a batch-1
forward is hundreds of them): native ops take strided inputs without a ``Contiguous`` node in front, and a 1x1 conv
or a linear is one node with its bias. Torch checks the numbers; the counts need the native kernels."""

import io
import re

import mlx.core as mx
import numpy as np
import pytest
import torch

from porter.layers import Conv2d, Linear, _native

from tests.helpers import mx_to_numpy, torch_to_mx


def _counted(backend) -> bool:
    """Node counts are the native kernels' (the layers suite runs every test on both paths; on the pure-MLX one only
    the numbers are checked)."""
    return backend == "native" and _native._fused_blas()


def _nodes(y) -> list:
    dot = io.StringIO()
    mx.export_to_dot(dot, y)
    return re.findall(r'label ="([A-Za-z]+)"', dot.getvalue())


def test_strided_input_needs_no_contiguous_node(backend):
    x = mx.random.normal((2, 5, 6, 8), key=mx.random.key(0))
    mx.eval(x)
    view = x.transpose(0, 2, 1, 3)  # strided: the op copies it inside its own eval
    y = _native.relu(view) if _counted(backend) else mx.maximum(view, 0)
    if _counted(backend):
        assert _nodes(y) == ["Transpose", "PorterRelu"], _nodes(y)
    np.testing.assert_array_equal(np.array(y), np.array(torch.relu(torch.from_numpy(np.array(x)).permute(0, 2, 1, 3))))


@pytest.mark.parametrize("stride", [1, 2])
def test_pointwise_conv_with_bias_is_one_node(backend, stride):
    torch.manual_seed(0)
    tconv = torch.nn.Conv2d(40, 24, 1, stride=stride)
    conv = Conv2d(40, 24, 1, stride=stride)
    conv.eval()  # inference: a training-mode layer adds the gradient-order gate (layers/_grad_order.py)
    conv.update({"weight": mx.array(tconv.weight.detach().permute(0, 2, 3, 1).numpy()),
                 "bias": mx.array(tconv.bias.detach().numpy())})
    tx = torch.randn(2, 40, 9, 11)
    y = conv(torch_to_mx(tx, True))
    kinds = _nodes(y)
    if _counted(backend):
        assert kinds.count("PorterBlasLinear") == 1 and len(kinds) == (1 if stride == 1 else 2), kinds  # + a Slice
    np.testing.assert_allclose(mx_to_numpy(y, True), tconv(tx).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_linear_over_a_3d_input_is_one_node(backend):
    torch.manual_seed(1)
    tlin = torch.nn.Linear(300, 50)
    lin = Linear(300, 50)
    lin.eval()  # inference: a training-mode layer adds the gradient-order gate (layers/_grad_order.py)
    lin.update({"weight": mx.array(tlin.weight.detach().numpy()), "bias": mx.array(tlin.bias.detach().numpy())})
    tx = torch.randn(2, 9, 300)
    y = lin(mx.array(tx.numpy()))
    if _counted(backend):
        assert _nodes(y) == ["PorterBlasLinear"], _nodes(y)
    np.testing.assert_allclose(np.array(y), tlin(tx).detach().numpy(), rtol=1e-5, atol=1e-5)
