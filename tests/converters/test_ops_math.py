"""Activations, pointwise arithmetic, statistics, norms, scans, products, shuffles, one_hot and recurrent cells
through the converter, against torch on the same data at two sizes (NaN, infinities, boundary values and huge
magnitudes on purpose), with gradients to the inputs for the differentiable ones and half-precision runs."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import porter
from porter.compare import assert_close
from tests.converter_check import assert_matches, check_converted, run_ported

torch.manual_seed(0)


def _special(x, lambd=0.5):
    """``x`` with boundary values of the shrinks, NaN, +-inf and huge magnitudes written into its first entries."""
    flat = x.reshape(-1)
    values = [lambd, -lambd, 0.0, float("nan"), float("inf"), -float("inf"), 100.0, -100.0, 1e30, -1e30]
    flat[:len(values)] = torch.tensor(values[:flat.numel()])
    return x


# ---------------------------------------------------------------------------------------------------- activations
class Activations(nn.Module):
    """Each activation on the raw input (exact boundary values reach it) and after a conv (channels-last)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)
        self.rrelu = nn.RReLU(0.1, 0.3)

    def forward(self, x):
        outs = []
        for v in (x, self.conv(x)):
            outs += [F.celu(v, 0.5), F.selu(v), F.logsigmoid(v), F.hardshrink(v, 0.5), F.softshrink(v, 0.5),
                     F.threshold(v, 0.5, -2.0), self.rrelu(v), torch.selu_(v.clone()),  # and the in-place forms
                     F.celu(v.clone(), 2.0, inplace=True), F.threshold(v.clone(), -0.5, 3.0, inplace=True),
                     F.rrelu(v.clone(), 0.2, 0.4, inplace=True)]
        return tuple(outs)


def test_activations_match_torch_at_two_sizes():
    check_converted(Activations().eval(), _special(torch.randn(2, 3, 5, 6) * 3), torch.randn(1, 3, 7, 4) * 3)


def test_activation_gradients():
    model = Activations().eval()
    x = torch.randn(2, 3, 5, 6) * 3
    ported = porter.convert(model, x, io_layout="torch")
    _assert_input_grads(ported, model, (x,))


def test_rrelu_in_training_mode_is_refused_by_name():
    model = nn.Sequential(nn.Conv2d(3, 3, 1), nn.RReLU())
    model.train()
    for p in model.parameters():
        p.requires_grad_(False)

    class Inference(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, x):
            return F.rrelu(self.inner[0](x), training=True)

    with pytest.raises(Exception, match="training"):
        porter.convert(Inference().eval(), torch.randn(1, 3, 4, 4))


# ---------------------------------------------------------------------------------------------------- pointwise
class Pointwise(nn.Module):
    def forward(self, a, b, c):
        return (torch.addcmul(a, b, c, value=0.5), torch.addcdiv(a, b, c, value=-2.0),
                torch.lerp(a, b, 0.3), torch.lerp(a, b, 0.7), torch.lerp(a, b, c),
                torch.hypot(a, b), torch.fmod(a, 0.7), torch.fmod(a, b), torch.fmod(a * 10, -3.0),
                # the in-place forms
                a.clone().addcmul_(b, c), a.clone().addcdiv_(b, c, value=0.25), a.clone().lerp_(b, 0.6),
                a.clone().lerp_(b, c), a.clone().hypot_(c), a.clone().fmod_(1.5), a.clone().fmod_(c))


def _pointwise_inputs(*shape):
    a, b, c = (torch.randn(*shape) * 4 for _ in range(3))
    a.reshape(-1)[:4] = torch.tensor([1e30, -float("inf"), float("nan"), 3e25])
    b.reshape(-1)[:4] = torch.tensor([2e30, float("nan"), 1.0, -4e25])  # hypot(-inf, nan) = inf; no overflow
    return a, b, c


def test_pointwise_match_torch_at_two_sizes():
    check_converted(Pointwise().eval(), _pointwise_inputs(2, 3, 5), _pointwise_inputs(4, 1, 7))


def test_pointwise_gradients():
    model = Pointwise().eval()
    inputs = tuple(torch.randn(2, 3, 5) * 2 for _ in range(3))
    ported = porter.convert(model, inputs, io_layout="torch")
    _assert_input_grads(ported, model, inputs, skip_outputs=(6, 7, 8, 14, 15))  # fmod: torch's gradient is its own


def test_integer_fmod_keeps_the_dividends_sign():
    class IntFmod(nn.Module):
        def forward(self, a, b):
            return torch.fmod(a, b), torch.fmod(a, 3)

    a = torch.tensor([[7, -7, 6, -6, 0]])
    b = torch.tensor([[3, 3, -4, -4, 5]])
    ported = porter.convert(IntFmod().eval(), (a, b), io_layout="torch")
    for got, want in zip(run_ported(ported, (a, b)), IntFmod()(a, b)):
        np.testing.assert_array_equal(got, want.numpy())


# ---------------------------------------------------------------------------------------------------- statistics
class Statistics(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = self.conv(x)
        v, m = torch.var_mean(y, dim=(2, 3), keepdim=True)
        s, m2 = torch.std_mean(y, dim=1, correction=0)
        s2, m3 = torch.std_mean(y)
        return v, m, s, m2, torch.var_mean(y, dim=-1, correction=2)[0], s2, m3, *torch.std_mean(y, 2, True)


def test_var_mean_and_std_mean_match_torch_at_two_sizes():
    check_converted(Statistics().eval(), torch.randn(2, 3, 7, 6), torch.randn(1, 3, 5, 9))


# ---------------------------------------------------------------------------------------------------- rms_norm
class RMSNorms(nn.Module):
    """Over channels after a permute to channels-last (ConvNeXt-style), over (H, W) without weight, eps given
    and eps=None (the dtype's epsilon)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3)
        self.channels = nn.RMSNorm(6)
        self.spatial = nn.RMSNorm([4, 5], eps=1e-3, elementwise_affine=False)
        with torch.no_grad():
            self.channels.weight.normal_()  # starts at one: randomised so the weight is tested

    def forward(self, x):
        y = self.conv(x)
        a = self.channels(y.permute(0, 2, 3, 1))
        b = self.spatial(y)
        return a, b, F.rms_norm(y, (y.shape[-1],), eps=None)


def test_rms_norm_matches_torch():
    model = RMSNorms().eval()
    ported = check_converted(model, torch.randn(2, 3, 6, 7))
    x = torch.randn(3, 3, 6, 7)
    assert_matches(ported, model, (x,))
    _assert_input_grads(ported, model, (x,))


def test_rms_norm_modules_become_mlx_rms_norm_layers_that_save_and_load(tmp_path):
    import mlx.nn as mnn
    from mlx.utils import tree_flatten

    from porter.layers import RMSNorm

    model = RMSNorms().eval()
    ported = porter.convert(model, torch.randn(2, 3, 6, 7), io_layout="torch")
    assert isinstance(ported.channels, RMSNorm) and isinstance(ported.channels, mnn.RMSNorm)
    assert (ported.channels.eps, ported.spatial.eps, ported.spatial.normalized_shape) == (None, 1e-3, (4, 5))
    assert "weight" not in ported.spatial
    assert [k for k, _ in tree_flatten(ported.parameters())] == list(model.state_dict())
    porter.save(ported, tmp_path / "m")
    loaded = porter.load(tmp_path / "m")
    assert isinstance(loaded.channels, RMSNorm) and loaded.spatial.eps == 1e-3
    x = torch.randn(1, 3, 6, 7)  # RMSNorm([4, 5]) fixes the spatial size
    with torch.no_grad():
        want = model(x)
    for got, w in zip(run_ported(loaded, (x,)), want):
        assert_close(got, w.numpy())


def test_rms_norm_layer_validates_its_arguments():
    from porter.layers import RMSNorm
    from porter.layers.functional import rms_norm

    for bad in (0, (4, -1), (), True, 2.5):
        with pytest.raises(ValueError, match="normalized_shape"):
            RMSNorm(bad)
    with pytest.raises(ValueError, match="eps"):
        RMSNorm(4, eps=-1.0)
    with pytest.raises(ValueError, match="does not end with"):
        rms_norm(mx.zeros((2, 3)), 4)
    with pytest.raises(ValueError, match="'weight' must have shape"):
        rms_norm(mx.zeros((2, 4)), 4, mx.ones((3,)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rms_norm_half_precision(dtype):
    model = nn.Sequential(nn.Linear(8, 16), nn.RMSNorm(16)).eval()
    with torch.no_grad():
        model[1].weight.normal_()
    model = model.to(dtype)
    x = torch.randn(3, 5, 8).to(dtype)
    ported = porter.convert(model, x, io_layout="torch")
    (got,) = run_ported(ported, (x,))
    assert got.dtype == {torch.float16: np.float16, torch.bfloat16: np.float32}[dtype] or dtype == torch.bfloat16
    with torch.no_grad():
        want = model(x).float().numpy()
    assert_close(np.asarray(got, np.float32), want, rtol=2e-2, what=str(dtype))


# ---------------------------------------------------------------------------------------------------- scans
class Scans(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 1)

    def forward(self, x, flags):
        y = self.conv(x)
        return (torch.cumprod(y, 1), torch.cumprod(x, -1), torch.logcumsumexp(x, 2), torch.logcumsumexp(y, 1),
                torch.cumprod(flags, 0), torch.cumsum(y, 3))


def _scan_inputs(n, h, w):
    x = torch.randn(n, 3, h, w)
    x[0, 0, 0, :2] = -float("inf")  # logcumsumexp over leading -inf entries
    x[0, 1, 1, 1] = 0.0  # a zero in the products
    return x, torch.randint(-2, 3, (4, h), dtype=torch.int32)  # int32 products accumulate in int64 as torch's


def test_scans_match_torch_at_two_sizes():
    check_converted(Scans().eval(), _scan_inputs(2, 4, 5), _scan_inputs(1, 6, 3))


# ---------------------------------------------------------------------------------------------------- products
class Products(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 1)
        self.bilinear = nn.Bilinear(5, 4, 6)
        self.no_bias = nn.Bilinear(5, 5, 2, bias=False)

    def forward(self, x, m, v):
        y = self.conv(x)
        flat = y.mean((2, 3))
        return (F.cosine_similarity(y, y.flip(1), dim=1),  # over channels, in the conv's layout
                F.cosine_similarity(flat[:, None, :], flat[None, :, :], dim=-1),  # broadcast (N, 1, C) x (1, N, C)
                F.cosine_similarity(flat, torch.zeros_like(flat)),  # a zero vector: the eps clamp
                self.bilinear(flat, v), self.no_bias(y.permute(0, 2, 3, 1), y.permute(0, 2, 3, 1)),
                torch.mv(m, v[0]), torch.dot(v[0], v[-1]), torch.vdot(v[0], v[0]))


def _product_inputs(n, h, w):
    return torch.randn(n, 3, h, w), torch.randn(7, 4), torch.randn(n, 4)


def test_products_match_torch_at_two_sizes():
    check_converted(Products().eval(), _product_inputs(2, 4, 5), _product_inputs(3, 3, 6))


def test_product_gradients():
    model = Products().eval()
    inputs = _product_inputs(2, 4, 5)
    ported = porter.convert(model, inputs, io_layout="torch")
    _assert_input_grads(ported, model, inputs, skip_outputs=(2,))  # zero vector: torch's clamp is under no_grad


# ---------------------------------------------------------------------------------------------------- shuffles
class Shuffles(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 1)
        self.shuffle = nn.ChannelShuffle(3)

    def forward(self, x):
        return self.shuffle(self.conv(x)), F.channel_shuffle(x.repeat(1, 2, 1, 1), 2)


def test_channel_shuffle_matches_torch_exactly():
    model = Shuffles().eval()
    ported = porter.convert(model, torch.randn(2, 3, 5, 4), io_layout="torch")
    for x in (torch.randn(2, 3, 5, 4), torch.randn(1, 3, 3, 7)):
        with torch.no_grad():
            want = model(x)
        got = run_ported(ported, (x,))
        np.testing.assert_array_equal(got[1], want[1].numpy())  # a pure permutation: exact
        assert_close(got[0], want[0].numpy())


# ---------------------------------------------------------------------------------------------------- one_hot
class OneHot(nn.Module):
    def forward(self, labels, x):
        return F.one_hot(labels, 5), F.one_hot(x.argmax(-1), 7)


def test_one_hot_matches_torch_exactly_and_refuses_out_of_range_classes():
    model = OneHot().eval()
    labels, x = torch.randint(0, 5, (3, 4)), torch.randn(2, 6, 7)
    ported = porter.convert(model, (labels, x), io_layout="torch")
    for inputs in ((labels, x), (torch.randint(0, 5, (6, 2)), torch.randn(3, 2, 7))):
        got = run_ported(ported, inputs)
        for g, w in zip(got, model(*inputs)):
            assert g.dtype == np.int64
            np.testing.assert_array_equal(g, w.numpy())
    for bad in (torch.tensor([[0, 5]]), torch.tensor([[-1, 2]])):
        with pytest.raises(RuntimeError):
            model(bad, x)  # torch refuses as well
        with pytest.raises(ValueError, match="one_hot: class value"):
            ported(mx.array(bad.numpy()), mx.array(x.numpy()))


# ---------------------------------------------------------------------------------------------------- cells
class Cells(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTMCell(5, 4)
        self.gru = nn.GRUCell(5, 3, bias=False)
        self.rnn = nn.RNNCell(5, 6, nonlinearity="relu")
        self.tanh_rnn = nn.RNNCell(5, 2)

    def forward(self, x, h, c):
        h1, c1 = self.lstm(x, (h, c))
        h2, c2 = self.lstm(x, (h1, c1))  # a second step from the first's states
        return h2, c2, self.gru(x), self.rnn(x), self.gru(x[0]), self.tanh_rnn(x)  # x[0]: unbatched


def _cell_inputs(n):
    return torch.randn(n, 5), torch.randn(n, 4), torch.randn(n, 4)


def test_recurrent_cells_match_torch_at_two_batch_sizes():
    model = Cells().eval()
    ported = check_converted(model, _cell_inputs(3), _cell_inputs(5))
    _assert_input_grads(ported, model, _cell_inputs(2))


# ---------------------------------------------------------------------------------------------------- helpers
def _assert_input_grads(ported, model, inputs, skip_outputs=()):
    """d(sum_i <out_i, w_i>)/d(inputs) of the port against torch's (float inputs; io_layout="torch")."""
    inputs = tuple(t.detach().clone() for t in inputs)
    with torch.no_grad():
        outs = torch.utils._pytree.tree_leaves(model(*inputs))
    weights = [torch.randn(o.shape) if i not in skip_outputs and o.is_floating_point() else None
               for i, o in enumerate(outs)]
    leaves = [t.clone().requires_grad_() if t.is_floating_point() else t for t in inputs]
    outs = torch.utils._pytree.tree_leaves(model(*leaves))
    sum(((o * w).sum() for o, w in zip(outs, weights) if w is not None), torch.zeros(())).backward()
    floating = [i for i, t in enumerate(inputs) if t.is_floating_point()]
    mw = [mx.array(w.numpy()) if w is not None else None for w in weights]

    def loss(*xs):
        args = [mx.array(t.numpy()) for t in inputs]
        for i, x in zip(floating, xs):
            args[i] = x
        out = ported(*args)
        out = out if isinstance(out, (tuple, list)) else (out,)
        return sum(((o * w).sum() for o, w in zip(out, mw) if w is not None), mx.array(0.0))

    grads = mx.grad(loss, argnums=tuple(range(len(floating))))(*[mx.array(inputs[i].numpy()) for i in floating])
    grads = grads if isinstance(grads, (tuple, list)) else (grads,)
    for i, g in zip(floating, grads):
        assert_close(np.array(g), leaves[i].grad.numpy(), rtol=1e-4, what=f"gradient to input {i}")


@pytest.mark.parametrize("axis", [1, -3, 3, -1])
def test_channel_shuffle_kernel_takes_a_negative_axis(axis):
    """An artifact may record the shuffle's axis counted from the end: same permutation as torch's, on either path
    (the native copy for the last axis, reshape-swap otherwise); an axis out of range is a ValueError."""
    from porter.converters.ops.misc import k_channel_shuffle

    x = torch.randn(2, 6, 5, 6)
    dim = axis % 4
    want = F.channel_shuffle(x.movedim(dim, 1), 3).movedim(1, dim)
    np.testing.assert_array_equal(np.array(k_channel_shuffle(mx.array(x.numpy()), axis=axis, groups=3)), want.numpy())
    with pytest.raises(ValueError, match="out of range"):
        k_channel_shuffle(mx.array(x.numpy()), axis=4 if axis > 0 else -5, groups=3)
