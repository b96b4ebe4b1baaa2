"""Training mode of the layers that carry it themselves, against torch in training mode: batch norm's variants
(``momentum=None``, no running statistics, 1-d on ``(N, C)`` and ``(N, C, L)``, SyncBatchNorm without a process
group), instance norm with running statistics, norms that are the same in both modes, and the random ones by their statistics (dropout's zero fraction and
``1 / (1 - p)`` scale, attention dropout, a TransformerEncoderLayer's dropouts)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn

import porter


def _x(shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _run(ported, x):
    return np.array(ported(mx.array(x.numpy())))


BATCH_NORMS = [
    ("momentum_none", lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, momentum=None)), (4, 3, 7, 6)),
    ("no_running_stats", lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, track_running_stats=False)),
     (4, 3, 7, 6)),
    ("no_running_stats_1d_no_affine", lambda: nn.Sequential(
        nn.Linear(5, 4), nn.BatchNorm1d(4, track_running_stats=False, affine=False)), (6, 5)),
    ("bn1d_nc", lambda: nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4)), (6, 5)),
    ("bn1d_ncl", lambda: nn.Sequential(nn.Conv1d(3, 4, 1), nn.BatchNorm1d(4, momentum=0.3)), (3, 3, 7)),
    ("bn3d", lambda: nn.Sequential(nn.Conv3d(3, 4, 1), nn.BatchNorm3d(4)), (2, 3, 3, 4, 5)),
    ("sync_batch_norm", lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.SyncBatchNorm(4, momentum=None)), (4, 3, 7, 6)),
    ("instance_norm_running_stats", lambda: nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.InstanceNorm2d(4, affine=True, track_running_stats=True)), (2, 3, 7, 6)),
    ("instance_norm_momentum_none", lambda: nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.InstanceNorm2d(4, momentum=None, track_running_stats=True)), (2, 3, 7, 6)),
    ("instance_norm1d_running_stats", lambda: nn.Sequential(
        nn.Conv1d(3, 4, 1), nn.InstanceNorm1d(4, momentum=0.4, track_running_stats=True)), (3, 3, 9)),
    ("group_norm", lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.GroupNorm(2, 4)), (2, 3, 7, 6)),
    ("layer_norm", lambda: nn.Sequential(nn.Linear(5, 6), nn.LayerNorm(6)), (3, 4, 5)),
]


@pytest.mark.parametrize("case", BATCH_NORMS, ids=[c[0] for c in BATCH_NORMS])
def test_norms_train_as_torch(case):
    """Three training forwards at two batch sizes (outputs and running statistics after each), then eval."""
    _, factory, shape = case
    torch.manual_seed(0)
    model = factory().eval()
    with torch.no_grad():  # stored statistics that are not the defaults: eval must read them
        for name, buffer in model.named_buffers():
            if "running" in name:
                buffer.uniform_(0.5, 1.5)
    ported = porter.convert(model, (_x(shape),), io_layout="torch")
    assert ported.train_refusals == {}
    model.train()
    ported.train()
    for step in range(3):
        x = _x(shape if step != 1 else (shape[0] + 3,) + shape[1:], seed=step + 1)
        with torch.no_grad():
            want = model(x).numpy()
        np.testing.assert_allclose(_run(ported, x), want, rtol=1e-4, atol=1e-5, err_msg=f"step {step}")
        arrays = ported.torch_parameters()  # torch layouts
        for name, value in model.state_dict().items():
            np.testing.assert_allclose(np.array(arrays[name]), value.numpy(), rtol=1e-5,
                                       atol=1e-6, err_msg=f"{name} after step {step}")
    model.eval()
    ported.eval()
    x = _x(shape, seed=9)
    with torch.no_grad():
        np.testing.assert_allclose(_run(ported, x), model(x).numpy(), rtol=1e-4, atol=1e-5)


def test_batch_norm_without_running_stats_refuses_one_value_per_channel_as_torch():
    model = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4, track_running_stats=False)).eval()
    ported = porter.convert(model, (_x((3, 5)),), io_layout="torch")
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        model(_x((1, 5)))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        _run(ported, _x((1, 5)))


def test_dropout_zeroes_elements_and_scales_as_torch():
    """Zero fraction near p for both, survivors scaled by 1 / (1 - p), each call a new mask."""
    mx.random.seed(0)
    torch.manual_seed(0)
    p = 0.3
    model = nn.Sequential(nn.Linear(16, 64), nn.Dropout(p)).eval()
    x = _x((64, 16))
    ported = porter.convert(model, (x,), io_layout="torch")
    with torch.no_grad():
        ref = model(x).numpy()
    model.train()
    ported.train()
    with torch.no_grad():
        torch_out = model(x).numpy()
    outs = [_run(ported, x) for _ in range(2)]
    for out in outs + [torch_out]:
        assert abs(np.mean(out == 0) - p) < 0.03
        kept = out != 0
        np.testing.assert_allclose(out[kept], ref[kept] / (1 - p), rtol=1e-5, atol=1e-6)
    assert not np.array_equal(outs[0] == 0, outs[1] == 0)


def test_attention_dropout_drops_in_training_only():
    """Mapped nn.MultiheadAttention (no mask): eval equals torch; training drops attention weights (the output
    moves, and with dropout 0 it equals torch's training output)."""
    torch.manual_seed(0)
    attn = nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = attn

        def forward(self, x):
            return self.attn(x, x, x, need_weights=False)[0]

    model = Model().eval()
    x = _x((2, 5, 8))
    ported = porter.convert(model, (x,), io_layout="torch")
    assert ported.train_refusals == {}
    with torch.no_grad():
        ref = model(x).numpy()
    np.testing.assert_allclose(_run(ported, x), ref, rtol=1e-4, atol=1e-5)
    ported.train()
    mx.random.seed(0)
    moved = [np.abs(_run(ported, x) - ref).max() for _ in range(3)]
    assert min(moved) > 1e-3


def test_transformer_encoder_layer_dropouts_are_on_in_training():
    torch.manual_seed(0)
    model = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.4, batch_first=True).eval()
    x = _x((2, 6, 8))
    ported = porter.convert(model, (x,), io_layout="torch")
    assert ported.train_refusals == {}
    with torch.no_grad():
        ref = model(x).numpy()
    np.testing.assert_allclose(_run(ported, x), ref, rtol=1e-4, atol=1e-5)
    ported.train()
    assert np.abs(_run(ported, x) - ref).max() > 1e-2
    ported.eval()
    np.testing.assert_allclose(_run(ported, x), ref, rtol=1e-4, atol=1e-5)


A = 1.7580993408473766  # ATen's alpha dropout constant (SELU's alpha * scale)
TORCH_DROPOUTS = [
    ("dropout1d", lambda: nn.Sequential(nn.Conv1d(3, 16, 1), nn.Dropout1d(0.4)), (8, 3, 7)),
    ("dropout1d_unbatched", lambda: nn.Sequential(nn.Conv1d(3, 16, 1), nn.Dropout1d(0.4)), (3, 7)),
    ("dropout2d", lambda: nn.Sequential(nn.Conv2d(3, 16, 1), nn.Dropout2d(0.5)), (8, 3, 5, 4)),
    ("dropout3d", lambda: nn.Sequential(nn.Conv3d(3, 16, 1), nn.Dropout3d(0.3)), (4, 3, 2, 3, 3)),
    ("alpha_dropout", lambda: nn.Sequential(nn.Linear(3, 16), nn.AlphaDropout(0.2)), (64, 3)),
    ("feature_alpha_dropout", lambda: nn.Sequential(nn.Conv2d(3, 16, 1), nn.FeatureAlphaDropout(0.3)),
     (8, 3, 5, 5)),
]


def _dropout_structure(out, ref, d, unbatched):
    """Each element either dropped or kept exactly as ATen's formula says; the dropped fraction; whether the drops
    cover whole channels."""
    p = d.p
    if isinstance(d, (nn.AlphaDropout, nn.FeatureAlphaDropout)):
        a = 1.0 / np.sqrt((A * A * p + 1) * (1 - p))
        dropped_value, kept_value = -A * a * (1 - p), a * ref + A * a * p
    else:
        dropped_value, kept_value = 0.0, ref / (1 - p)
    dropped = np.isclose(out, dropped_value, atol=1e-5)
    assert np.all(dropped | np.isclose(out, kept_value, rtol=1e-5, atol=1e-5))
    whole = None
    if isinstance(d, (nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.FeatureAlphaDropout)):
        per_channel = dropped.reshape(out.shape[0], -1) if unbatched else dropped.reshape(*out.shape[:2], -1)
        whole = bool(np.all(per_channel == per_channel[..., :1]))
    return float(dropped.mean()), whole


@pytest.mark.parametrize("io_layout", ["torch", "mlx"])
@pytest.mark.parametrize("case", TORCH_DROPOUTS, ids=[c[0] for c in TORCH_DROPOUTS])
def test_torch_dropouts_drop_as_torch(case, io_layout):
    """Same values kept/dropped as torch's formula, whole channels for the feature kinds (in the port's
    channels-last arrays too), the drop rate near p over several draws, identity again in eval."""
    name, factory, shape = case
    torch.manual_seed(0)
    model = factory().eval()
    x = _x(shape)
    ported = porter.convert(model, (x,), io_layout=io_layout)
    assert ported.train_refusals == {}
    d = model[1]
    unbatched = name.endswith("unbatched")
    to_port = (lambda t: t) if io_layout == "torch" or x.ndim <= 2 or unbatched else (
        lambda t: t.permute(0, *range(2, t.ndim), 1))
    from_port = (lambda a: a) if io_layout == "torch" or x.ndim <= 2 or unbatched else (
        lambda a: np.moveaxis(a, -1, 1))
    xi = mx.array(to_port(x).numpy())
    with torch.no_grad():
        ref = model(x).numpy()
    np.testing.assert_allclose(from_port(np.array(ported(xi))), ref, rtol=1e-4, atol=1e-5)
    model.train()
    ported.train()
    mx.random.seed(0)
    rates = {"torch": [], "port": []}
    for _ in range(12):
        with torch.no_grad():
            rate, whole_t = _dropout_structure(model(x).numpy(), ref, d, unbatched)
        rates["torch"].append(rate)
        rate, whole_p = _dropout_structure(from_port(np.array(ported(xi))), ref, d, unbatched)
        rates["port"].append(rate)
        assert whole_p is whole_t and whole_t in (None, True)
    assert abs(np.mean(rates["port"]) - d.p) < 0.12 and abs(np.mean(rates["torch"]) - d.p) < 0.12
    ported.eval()
    np.testing.assert_allclose(from_port(np.array(ported(xi))), ref, rtol=1e-4, atol=1e-5)


def test_instance_norm_refuses_one_spatial_element_in_training_as_torch():
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.InstanceNorm2d(4, track_running_stats=True)).eval()
    ported = porter.convert(model, (_x((2, 3, 4, 4)),), io_layout="torch")
    model.train()
    ported.train()
    with pytest.raises(ValueError, match="more than 1 spatial element"):
        model(_x((2, 3, 1, 1)))
    with pytest.raises(ValueError, match="more than 1 spatial element"):
        _run(ported, _x((2, 3, 1, 1)))


def test_rrelu_draws_random_slopes_in_training_as_torch():
    """Positives unchanged; each negative element its own slope in [lower, upper] (mean and spread of a uniform,
    like torch's); the input gradient is that slope; eval is the mean slope, exactly torch's."""
    lower, upper = 0.1, 0.3
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 64), nn.RReLU(lower, upper)).eval()
    x = _x((48, 3))
    ported = porter.convert(model, (x,), io_layout="torch")
    assert ported.train_refusals == {}
    with torch.no_grad():
        pre, ref = model[0](x).numpy(), model(x).numpy()
    np.testing.assert_array_equal(_run(ported, x), ref)
    model.train()
    ported.train()
    mx.random.seed(0)
    with torch.no_grad():
        torch_out = model(x).numpy()
    out = _run(ported, x)
    negative = pre <= 0
    for o in (torch_out, out):
        np.testing.assert_array_equal(o[~negative], pre[~negative])
        slopes = o[negative] / pre[negative]
        assert lower - 1e-6 <= slopes.min() and slopes.max() <= upper + 1e-6
        assert abs(slopes.mean() - (lower + upper) / 2) < 0.01
        assert abs(slopes.std() - (upper - lower) / np.sqrt(12)) < 0.01
    inner = ported["1"]  # the layer alone: its input gradient is the slope it drew
    z = mx.array(pre)
    mx.random.seed(1)
    y = inner(z)
    mx.random.seed(1)
    grad = mx.grad(lambda a: inner(a).sum())(z)
    np.testing.assert_allclose(np.array(grad)[negative], (np.array(y) / pre)[negative], rtol=1e-5)
    np.testing.assert_array_equal(np.array(grad)[~negative], 1.0)
