"""Torch-vs-Porter checks shared by the conv test files (test_conv*.py, test_conv_transpose.py, test_conv_f64.py)."""

import mlx.core as mx
import torch
import torch.nn.functional as F
from tests.helpers import TORCH_TO_MX, check_against_torch, torch_to_mx

import porter.layers as L
import porter.layers.functional as PF
from porter.layers.conv_weights import (
    mlx_conv_transpose_weight_to_torch,
    mlx_conv_weight_to_torch,
    torch_conv_transpose_weight_to_mlx,
    torch_conv_weight_to_mlx,
)

TORCH_CONV = {1: torch.nn.Conv1d, 2: torch.nn.Conv2d, 3: torch.nn.Conv3d}
PORTER_CONV = {1: L.Conv1d, 2: L.Conv2d, 3: L.Conv3d}
TORCH_F = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
PORTER_F = {1: PF.conv1d, 2: PF.conv2d, 3: PF.conv3d}
TORCH_CT = {1: torch.nn.ConvTranspose1d, 2: torch.nn.ConvTranspose2d, 3: torch.nn.ConvTranspose3d}
PORTER_CT = {1: L.ConvTranspose1d, 2: L.ConvTranspose2d, 3: L.ConvTranspose3d}
TORCH_CT_F = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
PORTER_CT_F = {1: PF.conv_transpose1d, 2: PF.conv_transpose2d, 3: PF.conv_transpose3d}
# (value atol/rtol, gradient atol/rtol): conv sums many products, so float32 gets a little more than the default
TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-2, 1e-2), torch.bfloat16: (6e-2, 6e-2),
       torch.float64: (1e-12, 1e-12)}  # float64: computed in float64 (layers/_conv_f64.py), torch's accuracy


def to_mx(t: torch.Tensor) -> mx.array:
    """A torch tensor's values as an MLX array of the same dtype (no layout change)."""
    return torch_to_mx(t, batched=False, channels_last=False)


def weight_numpy(t: torch.Tensor):
    """A torch weight as numpy without losing precision (float64 stays float64; bfloat16 widens exactly)."""
    t = t.detach()
    return (t if t.dtype == torch.float64 else t.float()).numpy()


def weight_to_mx(a, dtype: torch.dtype) -> mx.array:
    """A transformed numpy weight as an MLX array of the torch dtype (float64 kept: MLX reads numpy as float32)."""
    return mx.array(a, dtype=mx.float64) if dtype == torch.float64 else mx.array(a).astype(TORCH_TO_MX[dtype])


def porter_twin(tm: torch.nn.Module, nd: int, **kwargs):
    """A Porter Conv with the torch module's configuration and weights (through the converter's transform)."""
    pm = PORTER_CONV[nd](tm.in_channels, tm.out_channels, tm.kernel_size, **kwargs)
    pm.weight = weight_to_mx(torch_conv_weight_to_mlx(weight_numpy(tm.weight)), tm.weight.dtype)
    pm.bias = None if tm.bias is None else to_mx(tm.bias)
    return pm


def full_precision(module: torch.nn.Module) -> torch.nn.Module:
    """A float64 module's parameters get float64 noise: initialised in float32, they would fit in 24 mantissa bits."""
    if next(module.parameters()).dtype == torch.float64:
        with torch.no_grad():
            for p in module.parameters():
                p.add_(torch.randn_like(p) * 1e-3)
    return module


def check_module(nd, x_shape, cin, cout, k, dtype=torch.float32, seed=0, **kwargs):
    torch.manual_seed(seed)
    tm = full_precision(TORCH_CONV[nd](cin, cout, k, **kwargs).to(dtype))
    pm = porter_twin(tm, nd, **kwargs)
    x = torch.randn(x_shape, dtype=torch.float64) if dtype == torch.float64 else torch.randn(x_shape).to(dtype)
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


def check_functional(nd, x_shape, w_shape, bias, args, dtype=torch.float32, seed=1):
    """Porter's functional conv against torch's, weight (and bias) gradients included; ``args`` as torch takes them."""
    torch.manual_seed(seed)
    x = torch.randn(x_shape, dtype=dtype)
    w = torch.randn(w_shape, dtype=dtype, requires_grad=True)
    b = torch.randn(w_shape[0], dtype=dtype, requires_grad=True) if bias else None
    params = {"weight": (w, weight_to_mx(torch_conv_weight_to_mlx(weight_numpy(w)), dtype), mlx_conv_weight_to_torch)}
    if bias:
        params["bias"] = (b, to_mx(b), None)
    check_against_torch(
        lambda xt: TORCH_F[nd](xt, w, b, **args),
        lambda xm, p: PORTER_F[nd](xm, p["weight"], p.get("bias"), **args),
        x,
        nd=nd,
        params=params,
        atol=TOL[dtype][0],
        rtol=TOL[dtype][1],
        grad_atol=TOL[dtype][0],
        grad_rtol=TOL[dtype][1],
    )


# ---------------------------------------------------------------------------------------------------- transposed
def porter_transpose_twin(tm: torch.nn.Module, nd: int, **kwargs):
    """A Porter ConvTranspose with the torch module's configuration and weights (through the converter's transform)."""
    pm = PORTER_CT[nd](tm.in_channels, tm.out_channels, tm.kernel_size, **kwargs)
    pm.weight = weight_to_mx(torch_conv_transpose_weight_to_mlx(weight_numpy(tm.weight), tm.groups), tm.weight.dtype)
    pm.bias = None if tm.bias is None else to_mx(tm.bias)
    return pm


def check_transpose_module(nd, x_shape, cin, cout, k, dtype=torch.float32, seed=0, output_size=None, **kwargs):
    """Torch module vs Porter module; ``output_size`` is torch's (spatial sizes), passed to both forwards."""
    torch.manual_seed(seed)
    tm = full_precision(TORCH_CT[nd](cin, cout, k, **kwargs).to(dtype))
    pm = porter_transpose_twin(tm, nd, **kwargs)
    x = torch.randn(x_shape, dtype=torch.float64) if dtype == torch.float64 else torch.randn(x_shape).to(dtype)
    groups = tm.groups
    params = {"weight": (tm.weight, pm.weight, lambda g: mlx_conv_transpose_weight_to_torch(g, groups))}
    if tm.bias is not None:
        params["bias"] = (tm.bias, pm.bias, None)

    def porter_fn(xm, p):
        pm.update(p)
        return pm(xm, output_size=output_size)

    atol, rtol = TOL[dtype]
    check_against_torch(
        lambda xt: tm(xt, output_size=output_size),
        porter_fn,
        x,
        nd=nd,
        params=params,
        atol=atol,
        rtol=rtol,
        grad_atol=atol,
        grad_rtol=rtol,
        seed=seed,
    )


def check_transpose_functional(nd, x_shape, w_shape, bias, groups, args, dtype=torch.float32, seed=2):
    """Porter's functional transposed conv against torch's, weight (and bias) gradients included.

    ``w_shape`` is torch's ``(C_in, C_out / groups, *k)``; ``args`` follow the bias in torch's order (stride,
    padding, output_padding, groups, dilation).
    """
    torch.manual_seed(seed)
    x = torch.randn(x_shape, dtype=dtype)
    w = torch.randn(w_shape, dtype=dtype, requires_grad=True)
    b = torch.randn(w_shape[1] * groups, dtype=dtype, requires_grad=True) if bias else None
    w_m = weight_to_mx(torch_conv_transpose_weight_to_mlx(weight_numpy(w), groups), dtype)
    params = {"weight": (w, w_m, lambda g: mlx_conv_transpose_weight_to_torch(g, groups))}
    if bias:
        params["bias"] = (b, to_mx(b), None)
    atol, rtol = TOL[dtype]
    check_against_torch(
        lambda xt: TORCH_CT_F[nd](xt, w, b, *args),
        lambda xm, p: PORTER_CT_F[nd](xm, p["weight"], p.get("bias"), *args),
        x,
        nd=nd,
        params=params,
        atol=atol,
        rtol=rtol,
        grad_atol=atol,
        grad_rtol=rtol,
    )
