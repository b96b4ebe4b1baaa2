"""Whole twins converted in float64 compute in float64: each model and its example in float64, the port's outputs
within 1e-10 of torch's float64 (relative to the largest), and the gradients of the input and every parameter too,
with Porter's native kernels and with MLX ops only (export mode's path). A float32-accurate op anywhere (MLX's
float64 exp, sigmoid, erf and softmax are ~1e-7 off) misses the bar by two orders or more; measured here: <= 3e-15.

Twins whose torch code itself computes in float32 under a float64 model are left out, since torch's float64 output
is then float32-accurate too: HF Llama's and T5's RMS norms (``.to(torch.float32)``) and diffusers' timestep
embedding (a float32 ``arange``)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
import torch

import porter
from porter.layers import _native
from porter.validation.grads import grad_parity
from tests.converter_check import run_ported
from tests.models import REGISTRY, make_inputs
from tests.models.swin3d import swin3d_small
from tests.models.unseen import UNSEEN

BAR = 1e-10
# an analytically zero gradient (a key bias under softmax, a conv bias before a norm) is rounding noise, ~1e-15
GRAD_FLOOR = 1e-12


def _spec(name):
    """(model, float64 example inputs)."""
    if name == "swin3d":  # the Swin Transformer (3-d: torchvision's Swin3D), windows shifted and padded
        torch.manual_seed(0)
        return swin3d_small(), (torch.randn(1, 3, 4, 16, 16, generator=torch.Generator().manual_seed(1)),)
    spec = REGISTRY[name] if name in REGISTRY else UNSEEN[name]
    return spec.builder(), make_inputs(spec.inputs, seed=1)


# ViT (MultiheadAttention, GELU), ConvNeXt (depthwise 7x7, LayerNorm, GELU, layer scale), a Swin, the CRNN (a
# bidirectional LSTM), BERT (additive finfo.min mask, erf GELU), EfficientNet (SiLU, sigmoid squeeze-excitation)
NAMES = ["vit", "convnext", "swin3d", "crnn", "bert", "efficientnet"]


@pytest.mark.parametrize("native", [True, False], ids=["native", "mlx_ops"])
@pytest.mark.parametrize("name", NAMES)
def test_float64_port_is_float64_accurate(name, native):
    model, inputs = _spec(name)
    model = model.double().eval()
    inputs = tuple(t.double() if t.is_floating_point() else t for t in inputs)
    ported = porter.convert(model, inputs, io_layout="torch", dynamic="static")
    with torch.no_grad():
        expected = torch.utils._pytree.tree_leaves(model(*inputs))
    with _native.use_native(native):
        actual = run_ported(ported, inputs)
        report = grad_parity(model, ported, inputs, rtol=BAR, atol=GRAD_FLOOR, seed=0)
    for a, e in zip(actual, expected):
        e = e.numpy()
        assert a.dtype == np.float64
        assert np.abs(a - e).max() <= BAR * np.abs(e).max()
    assert report["ok"], [r for r in report["inputs"] + report["parameters"] if not r["ok"]][:3]
    assert report["parameters"], "no parameter gradients were compared"
