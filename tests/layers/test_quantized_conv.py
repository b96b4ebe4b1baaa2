"""QuantizedConv1d/2d/3d against torch: torch's conv with the dequantized weight (float32 round-off, gradients
included) and torch's conv with the original weight (within a bound computed from the dequantization error);
to_quantized / nn.quantize / quantize_model and their float fallback.

Every test runs through both ways of computing (quantized matmul over unfolded patches, dequantize + float conv)
and, through tests/layers/conftest.py, with and without the native kernels.
"""

import copy
import re
import warnings

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
import torch
from tests.conv_helpers import TORCH_CONV, porter_twin
from tests.helpers import check_against_torch, mx_to_numpy, torch_to_mx

import porter.layers as L
import porter.layers.quantized_conv as Q
from porter.layers.conv_weights import mlx_conv_weight_to_torch

pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same'")

QUANT = {1: L.QuantizedConv1d, 2: L.QuantizedConv2d, 3: L.QuantizedConv3d}
UNIT_ROUNDOFF = 2.0**-24


@pytest.fixture(params=["matmul", "dequantize"])
def strategy(request, monkeypatch):
    monkeypatch.setattr(Q, "STRATEGY", request.param)
    return request.param


def make_pair(nd, cin, cout, k, group_size, bits, seed=0, dtype=torch.float32, **kwargs):
    """A torch conv (bias re-randomised, not torch's small init), its Porter twin and the twin quantized."""
    torch.manual_seed(seed)
    tm = TORCH_CONV[nd](cin, cout, k, **kwargs).to(dtype)
    if tm.bias is not None:
        with torch.no_grad():
            tm.bias.uniform_(-1.0, 1.0)
    pm = porter_twin(tm, nd, **kwargs)
    return tm, pm, QUANT[nd].from_conv(pm, group_size, bits)


def torch_with_weight(tm, weight_mlx: mx.array, bias=True):
    """A copy of torch conv ``tm`` whose weight is an MLX-layout array (bias kept, or dropped)."""
    twin = copy.deepcopy(tm)
    w = np.array(weight_mlx.astype(mx.float32)) if weight_mlx.dtype != mx.float64 else np.array(weight_mlx)
    with torch.no_grad():
        twin.weight.copy_(torch.from_numpy(mlx_conv_weight_to_torch(w)).to(tm.weight.dtype))
    if not bias:
        twin.bias = None
    return twin


def check_quantized(nd, x_shape, cin, cout, k, group_size, bits, **kwargs):
    tm, pm, qm = make_pair(nd, cin, cout, k, group_size, bits, **kwargs)
    w_deq = qm.dequantized_weight()
    t_deq = torch_with_weight(tm, w_deq)
    params = {"bias": (t_deq.bias, qm.bias, None)} if tm.bias is not None else None

    def porter_fn(xm, p=None):
        if p:
            qm.update(p)
        return qm(xm)

    # a second input size through the same module: every spatial dim 3 longer
    second = x_shape[: len(x_shape) - nd] + tuple(s + 3 for s in x_shape[len(x_shape) - nd:])
    for shape in (x_shape, second):
        x = torch.randn(shape)
        # 1) the kernel: torch's conv with the dequantized weight, values and gradients (input, bias)
        check_against_torch(t_deq, porter_fn, x, nd=nd, params=params)
        # 2) quantization: |y - torch(x; w)| <= conv(|x|, |w - w_deq|) (+ round-off of both convs)
        y = mx_to_numpy(qm(torch_to_mx(x, x.ndim == nd + 2)), x.ndim == nd + 2)
        exact = tm(x).detach().numpy()
        delta = torch_with_weight(tm, mx.abs(pm.weight - w_deq), bias=False)
        magnitude = torch_with_weight(tm, mx.abs(pm.weight), bias=False)
        bound = delta(x.abs()).detach().numpy()
        reduction = qm.reduction + 1
        roundoff = 2 * reduction * UNIT_ROUNDOFF * (magnitude(x.abs()).detach().numpy() + 1.0)
        err = np.abs(y - exact)
        assert np.all(err <= bound + roundoff), f"error {err.max()} over the bound at {np.argmax(err - bound)}"
        assert err.max() > 0  # the weight really was quantized


# (input shape in torch layout, in_channels, out_channels, kernel_size, group_size, bits, kwargs)
CASES_1D = [
    ((2, 32, 9), 32, 8, 3, 32, 4, {}),
    ((2, 64, 10), 64, 16, 4, 128, 8, dict(stride=3)),
    ((1, 32, 11), 32, 8, 4, 64, 4, dict(padding="same")),  # asymmetric: 1 before, 2 after
    ((1, 32, 11), 32, 8, 2, 64, 8, dict(padding="same", dilation=3)),
    ((2, 64, 9), 64, 8, 3, 32, 8, dict(groups=2, padding=1, padding_mode="reflect")),
    ((32, 7), 32, 4, 2, 64, 4, dict(padding=1, padding_mode="circular", bias=False)),  # unbatched
    ((1, 4, 40), 4, 4, 32, 32, 4, dict(groups=4, padding=2)),  # depthwise, 32 taps
    ((2, 32, 13), 32, 8, 3, 32, 8, dict(stride=2, dilation=2, padding=2, padding_mode="replicate")),
    ((2, 32, 12), 32, 8, 4, 128, 4, dict(padding="valid", stride=2)),
]

CASES_2D = [
    ((2, 32, 7, 9), 32, 8, 3, 32, 4, dict(padding=1)),
    ((1, 64, 6, 7), 64, 16, 1, 64, 8, {}),
    ((2, 64, 9, 8), 64, 16, 1, 64, 4, dict(stride=2, bias=False)),
    ((1, 32, 8, 7), 32, 8, (4, 3), 128, 4, dict(padding="same", dilation=(1, 2))),
    ((2, 32, 9, 9), 32, 16, 3, 32, 8, dict(stride=2, padding=1)),
    ((1, 64, 7, 7), 64, 32, 3, 32, 4, dict(groups=2, padding=1, padding_mode="replicate")),
    ((1, 8, 10, 10), 8, 8, (4, 8), 32, 4, dict(groups=8, padding=(2, 3))),  # depthwise
    ((32, 5, 6), 32, 4, 3, 32, 8, dict(padding=1)),  # unbatched
    ((1, 32, 9, 9), 32, 8, 3, 32, 4, dict(dilation=2, padding=2)),
    ((1, 32, 16, 16), 32, 16, 3, 32, 4, dict(padding=1)),  # Winograd-sized (native dequantize path)
    ((1, 32, 6, 7), 32, 8, 2, 128, 8, dict(padding=(1, 2), padding_mode="reflect")),
]

CASES_3D = [
    ((1, 32, 4, 5, 6), 32, 8, 3, 32, 4, dict(padding=1)),
    ((1, 16, 5, 6, 5), 16, 8, 2, 128, 8, dict(stride=(1, 2, 2))),
    ((1, 64, 3, 4, 5), 64, 16, 3, 32, 8, dict(groups=2, padding=1, padding_mode="circular")),
    ((32, 3, 4, 5), 32, 4, 1, 32, 4, {}),  # unbatched
    ((1, 32, 5, 5, 5), 32, 8, (1, 2, 2), 64, 4, dict(padding="same", dilation=(1, 2, 1))),
    ((1, 32, 4, 6, 5), 32, 8, (1, 1, 4), 128, 8, dict(padding="valid", padding_mode="reflect")),
]


@pytest.mark.parametrize("x_shape, cin, cout, k, gs, bits, kwargs", CASES_1D)
def test_quantized_conv1d(strategy, x_shape, cin, cout, k, gs, bits, kwargs):
    check_quantized(1, x_shape, cin, cout, k, gs, bits, **kwargs)


@pytest.mark.parametrize("x_shape, cin, cout, k, gs, bits, kwargs", CASES_2D)
def test_quantized_conv2d(strategy, x_shape, cin, cout, k, gs, bits, kwargs):
    check_quantized(2, x_shape, cin, cout, k, gs, bits, **kwargs)


@pytest.mark.parametrize("x_shape, cin, cout, k, gs, bits, kwargs", CASES_3D)
def test_quantized_conv3d(strategy, x_shape, cin, cout, k, gs, bits, kwargs):
    check_quantized(3, x_shape, cin, cout, k, gs, bits, **kwargs)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_dequantization_error_within_one_step(group_size, bits):
    """Affine quantization puts each weight on one of 2**bits levels ``scale`` apart: |w - w_deq| <= |scale| per
    group (MLX shifts the grid so that the group's edge value is exact, so an error can exceed half a step)."""
    _, pm, qm = make_pair(2, 64, 8, 2, group_size, bits)
    assert qm.weight.dtype == mx.uint32 and qm.weight.shape == (8, 256 * bits // 32)
    assert qm.scales.shape == qm.biases.shape == (8, 256 // group_size)
    w = np.array(pm.weight).reshape(8, -1, group_size)
    err = np.abs(w - np.array(qm.dequantized_weight()).reshape(8, -1, group_size))
    step = np.abs(np.array(qm.scales))[..., None]
    assert np.all(err <= step * (1 + 1e-5) + 1e-7)
    assert err.max() > 0.25 * step.min()
    # the step is the group's range over 2**bits - 1 levels (to a few percent)
    np.testing.assert_allclose(step[..., 0], np.ptp(w, axis=-1) / (2**bits - 1), rtol=0.07)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("rows, k, group_size", [(8, 96, 32), (5, 256, 64), (3, 384, 128), (64, 4608, 64)])
def test_dequantize_matches_mlx_bit_for_bit(rows, k, group_size, bits):
    """The layer's dequantize (the native pass on the CPU variant, mx.dequantize on the other) is MLX's exactly."""
    w = mx.random.normal((rows, k)) * mx.random.uniform(0.01, 10.0, (rows, 1))
    packed, scales, biases = mx.quantize(w, group_size, bits)
    expected = np.array(mx.dequantize(packed, scales, biases, group_size, bits))
    np.testing.assert_array_equal(np.array(Q.dequantize(packed, scales, biases, group_size, bits)), expected)


@pytest.mark.parametrize("bits, group_size", [(4, 32), (8, 64), (4, 128)])
def test_dequantize_gradients_to_scales_and_biases(bits, group_size):
    """Unfrozen scales and biases get torch's gradients of ``w = scale * q + bias`` (q unpacked here with numpy)."""
    rows, k = 6, 256
    packed, scales, biases = mx.quantize(mx.random.normal((rows, k)), group_size, bits)
    words = np.array(packed).astype(np.uint64)
    per_word = 32 // bits
    q = np.stack([(words >> (bits * t)) & (2**bits - 1) for t in range(per_word)], -1).reshape(rows, k)
    g = np.random.default_rng(0).standard_normal((rows, k)).astype(np.float32)

    def loss(s, b):
        return (Q.dequantize(packed, s, b, group_size, bits) * mx.array(g)).sum()

    ds, db = mx.grad(loss, argnums=(0, 1))(scales, biases)
    s_t = torch.tensor(np.array(scales), requires_grad=True)
    b_t = torch.tensor(np.array(biases), requires_grad=True)
    w_t = (s_t[..., None] * torch.from_numpy(q.astype(np.float32)).reshape(rows, -1, group_size)
           + b_t[..., None]).reshape(rows, k)
    (w_t * torch.from_numpy(g)).sum().backward()
    np.testing.assert_allclose(np.array(ds), s_t.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(np.array(db), b_t.grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.native_only
def test_native_dequantize_used_and_checked():
    """On the CPU with the kernels built, float32 weights take the native pass; bad operands raise by name."""
    from porter.layers import _native

    packed, scales, biases = mx.quantize(mx.random.normal((4, 64)), 32, 4)
    assert Q.NATIVE_DEQUANTIZE and _native.active()
    np.testing.assert_array_equal(np.array(_native.dequantize(packed, scales, biases, 32, 4)),
                                  np.array(mx.dequantize(packed, scales, biases, 32, 4)))
    with pytest.raises(ValueError, match=r"\[porter.dequantize_affine\] bits must be 4 or 8"):
        _native.dequantize(packed, scales, biases, 32, 3)
    with pytest.raises(ValueError, match=r"scales and biases must be float32 \(rows, K / group_size\)"):
        _native.dequantize(packed, scales[:, :1], biases, 32, 4)
    with pytest.raises(ValueError, match=r"w must be a 2-d uint32 array"):
        _native.dequantize(packed.astype(mx.int32), scales, biases, 32, 4)


def test_quantized_conv_nan_placement(strategy):
    """A NaN in the input reaches the outputs whose window reads it, as in torch."""
    tm, _, qm = make_pair(2, 32, 16, 3, 32, 4, padding=1)
    x = torch.randn(1, 32, 16, 16)
    x[0, 3, 5, 7] = float("nan")
    y = mx_to_numpy(qm(torch_to_mx(x, True)), True)
    expected = torch_with_weight(tm, qm.dequantized_weight())(x).detach().numpy()
    np.testing.assert_array_equal(np.isnan(y), np.isnan(expected))
    np.testing.assert_allclose(y, expected, atol=1e-5, rtol=1e-5, equal_nan=True)


@pytest.mark.parametrize("dtype, tol", [(mx.float16, 1e-2), (mx.bfloat16, 5e-2)])
def test_quantized_conv_half_precision(strategy, dtype, tol):
    """A half-precision conv quantizes with half-precision scales and computes in that dtype."""
    tm, pm, _ = make_pair(2, 32, 8, 3, 32, 8, padding=1)
    pm.weight, pm.bias = pm.weight.astype(dtype), pm.bias.astype(dtype)
    qm = L.QuantizedConv2d.from_conv(pm, 32, 8)
    assert qm.scales.dtype == dtype
    x = torch.randn(2, 32, 6, 7)
    y = qm(torch_to_mx(x, True).astype(dtype))
    assert y.dtype == dtype
    expected = torch_with_weight(tm, qm.dequantized_weight().astype(mx.float32))(x).detach().numpy()
    np.testing.assert_allclose(mx_to_numpy(y, True), expected, atol=tol, rtol=tol)


def test_quantized_conv_float64_stays_float():
    """MLX's quantize has no float64: a float64 conv is left in float, and from_conv says why."""
    conv = L.Conv1d(32, 8, 2)
    conv.weight = conv.weight.astype(mx.float64)
    with pytest.warns(UserWarning, match=r"left in float: mx.quantize takes float32, float16 or bfloat16 weights"):
        assert conv.to_quantized(64, 8) is conv
    with pytest.raises(ValueError, match=r"\[QuantizedConv1d\] mx.quantize takes float32, float16 or bfloat16"):
        L.QuantizedConv1d.from_conv(conv, 64, 8)


def test_quantized_conv_zero_batch(strategy):
    q = L.QuantizedConv2d(32, 8, 3, padding=1, group_size=32)
    y = q(mx.zeros((0, 5, 6, 32)))
    assert y.shape == (0, 5, 6, 8)


def test_quantized_weights_frozen(strategy):
    """Only the conv bias trains; the packed weight, scales and biases get no gradient and stay put."""
    _, _, qm = make_pair(2, 32, 8, 3, 32, 4, padding=1)
    assert set(qm.trainable_parameters()) == {"bias"}
    assert set(qm.parameters()) == {"weight", "scales", "biases", "bias"}
    x = mx.random.normal((2, 5, 6, 32))
    _, grads = nn.value_and_grad(qm, lambda x: qm(x).sum())(x)
    assert set(grads) == {"bias"}
    np.testing.assert_allclose(np.array(grads["bias"]), np.full(8, 2 * 5 * 6), rtol=1e-6)
    _, _, no_bias = make_pair(2, 32, 8, 3, 32, 4, bias=False)
    assert no_bias.trainable_parameters() == {}


def test_quantized_conv_save_load_weights(tmp_path):
    """The four parameters are the whole state: a fresh layer loading them computes the same numbers."""
    _, _, qm = make_pair(2, 32, 8, 3, 32, 4, stride=2, padding=1)
    qm.save_weights(str(tmp_path / "q.safetensors"))
    fresh = L.QuantizedConv2d(32, 8, 3, stride=2, padding=1, group_size=32, bits=4)
    x = mx.random.normal((1, 9, 9, 32))
    assert not np.allclose(np.array(fresh(x)), np.array(qm(x)))
    fresh.load_weights(str(tmp_path / "q.safetensors"))
    np.testing.assert_array_equal(np.array(fresh(x)), np.array(qm(x)))
    assert set(fresh.trainable_parameters()) == {"bias"}


def test_quantized_conv_compiles(strategy):
    """mx.compile of the layer and of its input gradient gives the uncompiled numbers."""
    _, _, qm = make_pair(2, 64, 16, 3, 64, 4, padding=1)
    x = mx.random.normal((2, 6, 7, 64))
    np.testing.assert_allclose(np.array(mx.compile(qm)(x)), np.array(qm(x)), atol=1e-6, rtol=1e-6)
    grad = mx.grad(lambda x: (qm(x) ** 2).sum())
    np.testing.assert_allclose(np.array(mx.compile(grad)(x)), np.array(grad(x)), atol=1e-5, rtol=1e-5)


def test_quantized_conv_vmap_dequantize_path(monkeypatch):
    """mx.vmap over inputs works on the dequantize path (MLX's quantized_matmul has no vmap rule)."""
    monkeypatch.setattr(Q, "STRATEGY", "dequantize")
    _, _, qm = make_pair(2, 64, 16, 3, 32, 8, padding=1, groups=2)
    x = mx.random.normal((3, 2, 6, 7, 64))
    expected = np.stack([np.array(qm(x[i])) for i in range(3)])
    np.testing.assert_allclose(np.array(mx.vmap(qm)(x)), expected, atol=1e-5, rtol=1e-5)


def test_benchmark_script_runs(capsys):
    """benchmarks/quantized.py prints its table (one small shape, one round): the script does not rot."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "quantized.py"
    spec = importlib.util.spec_from_file_location("bench_quantized", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--repeat", "1", "--bits", "8", "--filter", "1x1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 1x1 256->64")]
    assert len(rows) == 1 and rows[0].endswith("| 65,536 | 18,432 |")
    assert Q.STRATEGY == "auto"


def test_matmul_strategy_runs_quantized_matmul(monkeypatch):
    """STRATEGY='matmul' really takes the quantized-matmul path (and 'auto' on the CPU does not)."""
    calls = []
    real = mx.quantized_matmul
    monkeypatch.setattr(Q.mx, "quantized_matmul", lambda *a, **k: calls.append(1) or real(*a, **k))
    _, _, qm = make_pair(1, 32, 8, 2, 64, 4)
    x = mx.random.normal((1, 7, 32))
    monkeypatch.setattr(Q, "STRATEGY", "matmul")
    mx.eval(qm(x))
    assert calls == [1]
    monkeypatch.setattr(Q, "STRATEGY", "auto")
    monkeypatch.setattr(Q.mx, "default_device", lambda: mx.cpu)
    mx.eval(qm(x))
    assert calls == [1] and not Q.uses_quantized_matmul(x)
    monkeypatch.setattr(Q.mx, "default_device", lambda: mx.gpu)
    assert Q.uses_quantized_matmul(x) and not Q.uses_quantized_matmul(x[:0])

# ---------------------------------------------------------------------------------------------------- nn.quantize
class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 32, 3, padding=1)  # K = 27: stays float
        self.conv2 = torch.nn.Conv2d(32, 64, 3, stride=2, padding=1)
        self.conv3 = torch.nn.Conv2d(64, 64, 1)
        self.fc = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = torch.relu(self.conv3(torch.relu(self.conv2(torch.relu(self.conv1(x))))))
        return self.fc(x.mean(dim=(2, 3)))


class PorterNet(nn.Module):
    def __init__(self, tnet: TorchNet):
        super().__init__()
        self.conv1 = porter_twin(tnet.conv1, 2, padding=1)
        self.conv2 = porter_twin(tnet.conv2, 2, stride=2, padding=1)
        self.conv3 = porter_twin(tnet.conv3, 2)
        self.fc = nn.Linear(64, 10)
        self.fc.weight = mx.array(tnet.fc.weight.detach().numpy())
        self.fc.bias = mx.array(tnet.fc.bias.detach().numpy())

    def __call__(self, x):
        x = nn.relu(self.conv3(nn.relu(self.conv2(nn.relu(self.conv1(x))))))
        return self.fc(x.mean(axis=(1, 2)))


def dequantized_torch_net(tnet: TorchNet, net: PorterNet) -> TorchNet:
    """The torch net with each quantized layer's dequantized weight (what the quantized net computes)."""
    twin = copy.deepcopy(tnet)
    for name in ("conv1", "conv2", "conv3"):
        layer = getattr(net, name)
        if isinstance(layer, Q._QuantizedConvNd):
            setattr(twin, name, torch_with_weight(getattr(tnet, name), layer.dequantized_weight()))
    if isinstance(net.fc, nn.QuantizedLinear):
        w = mx.dequantize(net.fc.weight, net.fc.scales, net.fc.biases, net.fc.group_size, net.fc.bits)
        with torch.no_grad():
            twin.fc.weight.copy_(torch.from_numpy(np.array(w)))
    return twin


def test_nn_quantize_sequential_of_convs_and_linear(strategy):
    """mlx.nn.quantize quantizes Porter convs and Linear; a conv it cannot quantize stays float with a warning."""
    torch.manual_seed(0)
    tnet = TorchNet()
    net = PorterNet(tnet)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nn.quantize(net, group_size=32, bits=8)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "[Conv2d] left in float" in messages[0] and "= 27 is not divisible" in messages[0]
    assert type(net.conv1) is L.Conv2d and "27" in net.conv1.quantization_skipped
    assert type(net.conv2) is L.QuantizedConv2d and type(net.conv3) is L.QuantizedConv2d
    assert type(net.fc) is nn.QuantizedLinear
    assert net.conv2.group_size == 32 and net.conv2.bits == 8
    x = torch.randn(2, 3, 12, 10)
    check_against_torch(dequantized_torch_net(tnet, net), net, x, nd=2, grad=True, atol=1e-5, rtol=1e-4)
    # and the quantized net is not the float one
    float_out = tnet(x).detach().numpy()
    assert np.abs(np.array(net(torch_to_mx(x, True))) - float_out).max() > 1e-5


def test_nn_quantize_plain_sequential_1d(strategy):
    """An audio-style nn.Sequential of Conv1d + Linear: every layer quantizable, all quantized, torch's numbers with
    the dequantized weights (values and input gradient)."""
    torch.manual_seed(1)
    t_convs = [torch.nn.Conv1d(32, 64, 3, padding=1), torch.nn.Conv1d(64, 64, 3, stride=2, padding=1)]
    t_fc = torch.nn.Linear(64, 32)
    t_seq = torch.nn.Sequential(t_convs[0], torch.nn.GELU(), t_convs[1], torch.nn.GELU())
    seq = nn.Sequential(porter_twin(t_convs[0], 1, padding=1), nn.GELU(),
                        porter_twin(t_convs[1], 1, stride=2, padding=1), nn.GELU(), nn.Linear(64, 32))
    seq.layers[4].update({"weight": mx.array(t_fc.weight.detach().numpy()),
                          "bias": mx.array(t_fc.bias.detach().numpy())})
    nn.quantize(seq, group_size=32, bits=4)
    assert [type(m).__name__ for m in seq.layers] == ["QuantizedConv1d", "GELU", "QuantizedConv1d", "GELU",
                                                       "QuantizedLinear"]
    with torch.no_grad():
        for i, t in ((0, t_convs[0]), (2, t_convs[1])):
            t.weight.copy_(torch.from_numpy(mlx_conv_weight_to_torch(np.array(seq.layers[i].dequantized_weight()))))
        fc = seq.layers[4]
        t_fc.weight.copy_(torch.from_numpy(np.array(mx.dequantize(fc.weight, fc.scales, fc.biases, 32, 4))))

    def torch_fn(x):  # (N, C, L) -> (N, L', 32): the Linear acts on channels, as in the channels-last Porter model
        return t_fc(t_seq(x).transpose(1, 2)).transpose(1, 2)

    check_against_torch(torch_fn, seq, torch.randn(2, 32, 17), nd=1, atol=1e-5, rtol=1e-4)


def test_to_quantized_defaults_and_fallbacks():
    """nn.quantize passes None for unset settings (MLX's affine defaults 64 / 4); what cannot be done stays float."""
    conv = L.Conv2d(64, 8, 3)
    q = conv.to_quantized(None, None)
    assert type(q) is L.QuantizedConv2d and (q.group_size, q.bits, q.mode) == (64, 4, "affine")
    for kwargs, reason in [
        (dict(mode="mxfp4"), r"'mode' must be one of \('affine',\)"),
        (dict(bits=3), r"'bits' must be one of \(4, 8\), but got bits=3"),
        (dict(group_size=16), r"'group_size' must be one of \(32, 64, 128\)"),
        (dict(quantize_input=True), r"quantize_input=True"),
        (dict(group_size=128), r"the reduction length .* = 576 is not divisible by group_size=128"),
    ]:
        with pytest.warns(UserWarning, match=r"\[Conv2d\] left in float: " + reason):
            assert conv.to_quantized(**kwargs) is conv
        assert re.search(reason, conv.quantization_skipped)
    assert type(L.Conv1d(32, 4, 2).to_quantized(64, 8)) is L.QuantizedConv1d
    assert type(L.Conv3d(32, 4, 2).to_quantized(128, 8)) is L.QuantizedConv3d


def test_quantize_model_report():
    torch.manual_seed(0)
    net = PorterNet(TorchNet())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the report says it; no warnings
        report = L.quantize_model(net, group_size=32, bits=4)
    assert report.quantized == ["conv2", "conv3", "fc"]
    assert list(report.skipped) == ["conv1"] and "= 27 is not divisible by group_size=32" in report.skipped["conv1"]
    assert report.config() == {"group_size": 32, "bits": 4, "mode": "affine", "conv1": False}
    assert "conv1: the reduction length" in report.summary()
    assert type(net.conv2) is L.QuantizedConv2d and type(net.fc) is nn.QuantizedLinear

    net = PorterNet(TorchNet())
    net.fc = nn.Linear(64, 10)
    net.up = L.ConvTranspose2d(64, 8, 2)
    report = L.quantize_model(net, group_size=128, bits=8, convs=False)
    assert report.quantized == []
    assert report.skipped == {
        "conv1": "convs=False", "conv2": "convs=False", "conv3": "convs=False",
        "fc": "input_dims=64 is not divisible by group_size=128", "up": "ConvTranspose2d has no quantized form",
    }
    assert type(net.conv2) is L.Conv2d and type(net.fc) is nn.Linear


def _module_at(model: nn.Module, path: str) -> nn.Module:
    for part in path.split("."):
        model = model[int(part)] if isinstance(model, list) else model[part]
    return model


@pytest.mark.parametrize("bits", [4, 8])
def test_quantize_model_resnet18(bits):
    """A real architecture: the zoo's ResNet-18 with a torch ResNet-18's weights (batch-norm statistics
    re-randomised), quantized by quantize_model, computes torch's ResNet-18 with the dequantized weights."""
    import porter.zoo as zoo
    from porter.examples import resnet18

    torch.manual_seed(0)
    tnet = resnet18(num_classes=10).eval()
    with torch.no_grad():
        for module in tnet.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
    net = zoo.create("resnet18", num_classes=10)
    net.load_torch_state_dict({k: v.detach().numpy() for k, v in tnet.state_dict().items()})
    report = L.quantize_model(net, group_size=64, bits=bits)
    assert list(report.skipped) == ["conv1"] and "147 is not divisible" in report.skipped["conv1"]
    assert len(report.quantized) == 20 and "layer4.0.downsample.0" in report.quantized and "fc" in report.quantized
    with torch.no_grad():
        for path in report.quantized:
            layer, target = _module_at(net, path), tnet.get_submodule(path)
            if isinstance(layer, nn.QuantizedLinear):
                w = np.array(mx.dequantize(layer.weight, layer.scales, layer.biases, 64, bits))
            else:
                assert isinstance(layer, L.QuantizedConv2d)
                w = mlx_conv_weight_to_torch(np.array(layer.dequantized_weight()))
            target.weight.copy_(torch.from_numpy(w))
    x = torch.randn(2, 3, 64, 48)
    check_against_torch(tnet, net, x, nd=2, grad=False, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(group_size=64, bits=3), ValueError, r"\[quantize_model\] 'bits' must be one of \(4, 8\)"),
        (dict(group_size=48), ValueError, r"'group_size' must be one of"),
        (dict(mode="nvfp4"), ValueError, r"'mode' must be one of"),
    ],
)
def test_quantize_model_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        L.quantize_model(nn.Sequential(L.Conv2d(64, 8, 1)), **kwargs)


# ---------------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        ((3, 8, 3), {}, r"\[QuantizedConv2d\] the reduction length prod\(kernel_size\) \* in_channels / groups = 27 "
                        r"is not divisible by group_size=64"),
        ((64, 8, 3), dict(bits=2), r"\[QuantizedConv2d\] 'bits' must be one of \(4, 8\), but got bits=2"),
        ((64, 8, 3), dict(group_size=100), r"'group_size' must be one of \(32, 64, 128\)"),
        ((64, 8, 3), dict(mode="mxfp8"), r"'mode' must be one of \('affine',\)"),
        ((64, 8, 3), dict(groups=3), r"in_channels must be divisible by groups"),
        ((64, 8, 3), dict(padding="same", stride=2), r"padding='same' is not supported for strided"),
        ((64, 8, 3), dict(padding_mode="zero"), r"padding_mode must be one of"),
    ],
)
def test_quantized_conv_constructor_errors(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        L.QuantizedConv2d(*args, **kwargs)


def test_quantized_conv_input_errors(strategy):
    q = L.QuantizedConv2d(64, 8, 3)
    with pytest.raises(ValueError, match=r"\[QuantizedConv2d\] Expected 3D \(unbatched\) or 4D \(batched\) input"):
        q(mx.zeros((1, 1, 5, 5, 64)))
    with pytest.raises(ValueError, match=r"expected input\[1, 5, 5, 32\] to have 64 channels, but got 32"):
        q(mx.zeros((1, 5, 5, 32)))
    with pytest.raises(TypeError, match=r"expected scalar type mlx.core.float32 but found mlx.core.float16 \('input'"):
        q(mx.zeros((1, 5, 5, 64), dtype=mx.float16))
    with pytest.raises(ValueError, match=r"Kernel size can't be greater than actual input size"):
        q(mx.zeros((1, 2, 5, 64)))
    with pytest.raises(TypeError, match=r"'conv' must be a porter.layers.Conv2d, but got Conv1d"):
        L.QuantizedConv2d.from_conv(L.Conv1d(64, 8, 1))
    with pytest.raises(ValueError, match=r"'weight' must have shape \[8, 3, 3, 64\], but got \[8, 9, 64\]"):
        q.set_float_weight(mx.zeros((8, 9, 64)))
