"""Torch-vs-Porter checks shared by the conv test files (test_conv.py, test_conv_depthwise.py)."""

import mlx.core as mx
import torch
import torch.nn.functional as F
from helpers import TORCH_TO_MX, check_against_torch, torch_to_mx

import porter.layers as L
import porter.layers.functional as PF
from porter.layers.conv_weights import mlx_conv_weight_to_torch, torch_conv_weight_to_mlx

TORCH_CONV = {1: torch.nn.Conv1d, 2: torch.nn.Conv2d, 3: torch.nn.Conv3d}
PORTER_CONV = {1: L.Conv1d, 2: L.Conv2d, 3: L.Conv3d}
TORCH_F = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
PORTER_F = {1: PF.conv1d, 2: PF.conv2d, 3: PF.conv3d}
# (value atol/rtol, gradient atol/rtol): conv sums many products, so float32 gets a little more than the default
TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-2, 1e-2), torch.bfloat16: (6e-2, 6e-2)}


def to_mx(t: torch.Tensor) -> mx.array:
    """A torch tensor's values as an MLX array of the same dtype (no layout change)."""
    return torch_to_mx(t, batched=False, channels_last=False)


def porter_twin(tm: torch.nn.Module, nd: int, **kwargs):
    """A Porter Conv with the torch module's configuration and weights (through the converter's transform)."""
    pm = PORTER_CONV[nd](tm.in_channels, tm.out_channels, tm.kernel_size, **kwargs)
    pm.weight = mx.array(torch_conv_weight_to_mlx(tm.weight.detach().float().numpy())).astype(
        TORCH_TO_MX[tm.weight.dtype]
    )
    pm.bias = None if tm.bias is None else to_mx(tm.bias)
    return pm


def check_module(nd, x_shape, cin, cout, k, dtype=torch.float32, seed=0, **kwargs):
    torch.manual_seed(seed)
    tm = TORCH_CONV[nd](cin, cout, k, **kwargs).to(dtype)
    pm = porter_twin(tm, nd, **kwargs)
    x = torch.randn(x_shape).to(dtype)
    params = {"weight": (tm.weight, pm.weight, mlx_conv_weight_to_torch)}
    if tm.bias is not None:
        params["bias"] = (tm.bias, pm.bias, None)

    def porter_fn(xm, p):
        pm.update(p)
        return pm(xm)

    atol, rtol = TOL[dtype]
    check_against_torch(
        tm, porter_fn, x, nd=nd, params=params, atol=atol, rtol=rtol, grad_atol=atol, grad_rtol=rtol, seed=seed
    )


def check_functional(nd, x_shape, w_shape, bias, args):
    """Porter's functional conv against torch's, weight (and bias) gradients included; ``args`` as torch takes them."""
    torch.manual_seed(1)
    x = torch.randn(x_shape)
    w = torch.randn(w_shape, requires_grad=True)
    b = torch.randn(w_shape[0], requires_grad=True) if bias else None
    params = {"weight": (w, mx.array(torch_conv_weight_to_mlx(w.detach().numpy())), mlx_conv_weight_to_torch)}
    if bias:
        params["bias"] = (b, to_mx(b), None)
    check_against_torch(
        lambda xt: TORCH_F[nd](xt, w, b, **args),
        lambda xm, p: PORTER_F[nd](xm, p["weight"], p.get("bias"), **args),
        x,
        nd=nd,
        params=params,
        atol=1e-4,
        rtol=1e-4,
        grad_atol=1e-4,
        grad_rtol=1e-4,
    )
