"""torch 2.13's CPU instance norm backward is wrong when its grad_output is channels-last-strided and its input is
contiguous (fuzz seed 2000: InstanceNorm2d -> ``flatten(2).transpose(1, 2)`` -> multi-head attention, whose (L, N, E)
gradient makes the norm's ``(1, N*C, H, W)`` view channels-last at any batch). The port's gradient is the analytic
one; the fuzzer's oracle hands torch's norms a contiguous grad_output (``model_fuzz.contiguous_norm_grads``)."""

import copy

import mlx.core as mx
import numpy as np
import torch
from torch import nn

import porter
from tests.model_fuzz import contiguous_norm_grads


class NormAttention(nn.Module):
    """Instance norm over an image, its positions as tokens, self-attention over them."""

    def __init__(self, channels: int = 6):
        super().__init__()
        self.norm = nn.InstanceNorm2d(channels, affine=True)
        self.attn = nn.MultiheadAttention(channels, 2, batch_first=True)
        with torch.no_grad():  # weight 1 / bias 0 would hide a wrong affine gradient
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.normal_()

    def forward(self, x):
        tokens = self.norm(x).flatten(2).transpose(1, 2)
        return self.attn(tokens, tokens, tokens, need_weights=False)[0]


def test_instance_norm_into_attention_gradient_is_torchs_analytic_one():
    torch.manual_seed(0)
    model = NormAttention().double().eval()
    x = torch.randn(2, 6, 5, 7, dtype=torch.float64)
    g = torch.randn(2, 35, 6, dtype=torch.float64)
    ported = porter.convert(model, (x,), io_layout="torch")

    def torch_grad(contiguous: bool):
        xt = x.clone().requires_grad_()
        hooks = contiguous_norm_grads(model) if contiguous else []
        (model(xt) * g).sum().backward()
        for hook in hooks:
            hook.remove()
        return xt.grad.numpy()

    port = np.array(mx.grad(lambda a: (ported(a) * mx.array(g.numpy())).sum())(mx.array(x.numpy())))
    # 1e-6: the port's float64 attention is float64 to ~1e-8 only (the bug is off by O(1))
    np.testing.assert_allclose(port, torch_grad(contiguous=True), rtol=1e-6, atol=1e-6)
    # the analytic gradient, by torch's own float64 finite differences, at the largest disagreement
    broken = torch_grad(contiguous=False)
    at = np.unravel_index(np.argmax(np.abs(broken - port)), x.shape)
    step = torch.zeros_like(x)
    step[at] = 1e-6
    with torch.no_grad():
        numeric = ((model(x + step) * g).sum() - (model(x - step) * g).sum()).item() / 2e-6
    assert abs(port[at] - numeric) < 1e-6 * max(1.0, abs(numeric))


def test_torch_gradcheck_fails_exactly_where_its_autograd_disagrees_with_the_port():
    """torch alone, at batch 1 (the plain transpose is enough there): when torch fixes the kernel, both flip."""
    torch.manual_seed(1)
    norm = nn.InstanceNorm2d(4).double()
    x = torch.randn(1, 4, 3, 5, dtype=torch.float64, requires_grad=True)
    g = torch.randn(1, 15, 4, dtype=torch.float64)
    (norm(x).flatten(2).transpose(1, 2) * g).sum().backward()
    strided = x.grad.clone()
    x.grad = None
    norm(x).backward(g.transpose(1, 2).reshape(1, 4, 3, 5).contiguous())
    broken = (strided - x.grad).abs().max().item() > 1e-6
    ok = torch.autograd.gradcheck(lambda t: copy.deepcopy(norm)(t).flatten(2).transpose(1, 2), (x.detach().clone()
                                  .requires_grad_(),), raise_exception=False)
    assert broken != ok
