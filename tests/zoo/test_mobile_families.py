"""The mobile and efficient families' own pieces against torch: bilinear resize, hard sigmoid, channel shuffle,
RegNet's float32 width rule, stochastic depth in training, NaN and dtype behaviour, input gradients through the
segmentation head, and argument errors. (Forward/training parity of every model is in test_zoo.py.)"""


import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from porter.compare import assert_close
from porter import zoo
from porter.layers import BatchNorm
from porter.zoo._mobile_blocks import Hardsigmoid, resize_bilinear
from porter.zoo.convnext import CNBlock
from porter.zoo.efficientnet import MBConv, StageConfig
from porter.zoo.regnet import block_params
from porter.zoo.shufflenetv2 import channel_shuffle

from tests.zoo.twins import regnet as regnet_twin, shufflenetv2 as shufflenet_twin  # noqa: E402
from tests.zoo.test_zoo import loaded_zoo_model, seeded_twin  # noqa: E402


def _nhwc(t: torch.Tensor) -> mx.array:
    return mx.array(np.ascontiguousarray(t.detach().permute(0, 2, 3, 1).numpy()))


def _nchw(a: mx.array) -> np.ndarray:
    return np.moveaxis(np.array(a), -1, 1)


@pytest.mark.parametrize("in_size,out_size", [((3, 3), (6, 5)), ((7, 5), (3, 4)), ((4, 4), (4, 4)),
                                              ((1, 1), (3, 2)), ((5, 6), (11, 13)), ((6, 5), (6, 9))])
def test_resize_bilinear_matches_interpolate(in_size, out_size):
    x = torch.randn(2, 3, *in_size, generator=torch.Generator().manual_seed(0), requires_grad=True)
    expected = F.interpolate(x, size=out_size, mode="bilinear", align_corners=False)
    g = torch.randn(expected.shape, generator=torch.Generator().manual_seed(1))
    (expected * g).sum().backward()
    got = resize_bilinear(_nhwc(x), out_size)
    assert got.shape == (2, *out_size, 3)
    np.testing.assert_allclose(_nchw(got), expected.detach().numpy(), rtol=0, atol=1e-6)
    grad = mx.grad(lambda a: (resize_bilinear(a, out_size) * _nhwc(g)).sum())(_nhwc(x))
    np.testing.assert_allclose(_nchw(grad), x.grad.numpy(), rtol=0, atol=1e-5)


def test_resize_bilinear_errors():
    with pytest.raises(ValueError, match=r"\[resize_bilinear\] expected \(N, H, W, C\)"):
        resize_bilinear(mx.zeros((2, 3, 4)), (2, 2))
    with pytest.raises(ValueError, match=r"\[resize_bilinear\] 'size'"):
        resize_bilinear(mx.zeros((1, 3, 4, 2)), (0, 2))


def test_hardsigmoid_is_torchs():
    x = torch.cat([torch.linspace(-5, 5, 1001), torch.tensor([-3.0, 3.0, 0.0, float("nan"), float("inf")])])
    got = np.array(Hardsigmoid()(mx.array(x.numpy())))
    np.testing.assert_array_equal(got, torch.nn.Hardsigmoid()(x).numpy())


def test_channel_shuffle_is_torchs():
    x = torch.randn(2, 12, 3, 5)
    np.testing.assert_array_equal(_nchw(channel_shuffle(_nhwc(x), 2)), shufflenet_twin.channel_shuffle(x, 2).numpy())
    np.testing.assert_array_equal(_nchw(channel_shuffle(_nhwc(x), 3)), shufflenet_twin.channel_shuffle(x, 3).numpy())


def test_regnet_widths_follow_torchs_float32_rule():
    """The stage widths, depths and group widths match torchvision's computation (torch float32 ops, run by the
    twin) on every size's settings and on 200 random ones."""
    rng = np.random.default_rng(0)
    settings = [dict(depth=s["depth"], w_0=s["w_0"], w_a=s["w_a"], w_m=s["w_m"], group_width=s["group_width"])
                for s in regnet_twin._SIZES.values()]
    settings += [dict(depth=int(rng.integers(4, 40)), w_0=int(rng.integers(1, 60)) * 8,
                      w_a=float(np.round(rng.uniform(5, 200), 2)), w_m=float(np.round(rng.uniform(1.5, 3.0), 2)),
                      group_width=int(rng.choice([1, 4, 8, 16, 24, 48, 64]))) for _ in range(200)]
    for s in settings:
        stages, _ = regnet_twin.block_params(**s)
        expected = [(w, d, g, b) for w, _stride, d, g, b in stages]
        assert block_params(**s) == expected, s


def test_regnet_bottleneck_multiplier_and_overrides():
    twin = regnet_twin._builder("regnet_x_400mf")(num_classes=3, stem_width=8, depth=5, w_0=16, w_a=12.0, w_m=2.2,
                                                  group_width=8, bottleneck_multiplier=0.5)
    model = zoo.create("regnet_x_400mf", num_classes=3, stem_width=8, depth=5, w_0=16, w_a=12.0, w_m=2.2,
                       group_width=8, bottleneck_multiplier=0.5)
    expected = {k: tuple(v.shape) for k, v in twin.state_dict().items() if not k.endswith("num_batches_tracked")}
    from porter.zoo._loading import torch_parameter_specs

    assert {k: s[1] for k, s in torch_parameter_specs(model).items()} == expected


def _rows_dropped_or_kept(out, x, branch, survival):
    """Each sample of ``out`` is ``x`` (branch dropped) or ``x + branch / survival`` (kept and rescaled)."""
    states = []
    for o, xi, bi in zip(np.array(out), np.array(x), np.array(branch)):
        if np.allclose(o, xi, atol=1e-6):
            states.append("dropped")
        else:
            np.testing.assert_allclose(o, xi + bi / survival, rtol=1e-5, atol=1e-5)
            states.append("kept")
    return states


@pytest.mark.parametrize("family", ["efficientnet", "convnext"])
def test_stochastic_depth_drops_whole_samples_in_training(family):
    if family == "efficientnet":
        block = MBConv(StageConfig(4, 3, 1, 8, 8, 1, False), 0.5, BatchNorm)
    else:
        block = CNBlock(8, 0.7, 0.5)
    x = mx.random.normal((64, 5, 5, 8), key=mx.random.key(0))
    block.eval()
    branch_eval = block(x) - x
    from porter.zoo._common import apply_sequence

    np.testing.assert_allclose(np.array(branch_eval), np.array(
        (block.layer_scale if family == "convnext" else 1.0) * apply_sequence(block.block, x)), atol=1e-5)
    block.train()
    branch = (block.layer_scale if family == "convnext" else 1.0) * apply_sequence(block.block, x)
    mx.random.seed(3)
    states = _rows_dropped_or_kept(block(x), x, branch, 0.5)
    assert 10 < states.count("dropped") < 54, states  # p = 0.5 per sample


def test_nan_input_stays_in_its_sample_as_in_torch():
    """A NaN pixel poisons its own sample (max pool, batch norm in eval, global average) and no other."""
    name = "shufflenet_v2_x0_5"
    twin = seeded_twin(name)
    model = loaded_zoo_model(name, twin)
    x = torch.randn(2, 3, 33, 29, generator=torch.Generator().manual_seed(0))
    x[0, 1, 5, 7] = float("nan")
    with torch.no_grad():
        expected = twin(x).numpy()
    got = np.array(model(_nhwc(x)))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    assert np.isnan(got[0]).all() and not np.isnan(got[1]).any()
    assert_close(got[1], expected[1])


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
def test_half_precision_forward_tracks_float32(dtype):
    name = "efficientnet_b0"
    twin = seeded_twin(name)
    model = loaded_zoo_model(name, twin)
    model.set_dtype(dtype)
    x = torch.randn(2, 3, 35, 29, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = twin(x).numpy()
    got = model(_nhwc(x).astype(dtype))
    assert got.dtype == dtype
    err = np.abs(np.array(got.astype(mx.float32)) - expected).max() / np.abs(expected).max()
    assert err < (3e-2 if dtype == mx.bfloat16 else 5e-3), err


def test_lraspp_input_gradient_matches_torch():
    """Backward through the dilated backbone, the gated head and both bilinear upsamplings."""
    name = "lraspp_mobilenet_v3_large"
    twin = seeded_twin(name)
    model = loaded_zoo_model(name, twin)
    x = torch.randn(1, 3, 45, 38, generator=torch.Generator().manual_seed(0), requires_grad=True)
    out = twin(x)["out"]
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    (out * g).sum().backward()
    grad = mx.grad(lambda a: (model(a)["out"] * _nhwc(g)).sum())(_nhwc(x))
    expected = x.grad.numpy()
    assert_close(_nchw(grad), expected)


def test_argument_errors():
    with pytest.raises(ValueError, match=r"\[MobileNetV3\] 'width_mult'"):
        zoo.create("mobilenet_v3_small", width_mult=0)
    with pytest.raises(ValueError, match=r"\[EfficientNet\] 'width_mult'"):
        zoo.create("efficientnet_b0", width_mult=-1.0)
    with pytest.raises(ValueError, match=r"\[EfficientNet\] 'stochastic_depth_prob'"):
        zoo.create("efficientnet_v2_s", stochastic_depth_prob=1.5)
    with pytest.raises(TypeError, match=r"\[RegNet\] unexpected keyword arguments \['widths'\]"):
        zoo.create("regnet_y_400mf", widths=(8, 16))
    with pytest.raises(ValueError, match=r"\[RegNet\] invalid RegNet settings"):
        zoo.create("regnet_x_400mf", w_0=12)
    with pytest.raises(ValueError, match=r"\[ConvNeXt\] 'widths' and 'depths'"):
        zoo.create("convnext_tiny", widths=(8, 16, 24))
    with pytest.raises(ValueError, match=r"\[ConvNeXt\] 'stochastic_depth_prob'"):
        zoo.create("convnext_tiny", stochastic_depth_prob=-0.1)
    with pytest.raises(NotImplementedError, match=r"\[LRASPP\] .*'aux_loss'"):
        zoo.create("lraspp_mobilenet_v3_large", aux_loss=True)
    with pytest.raises(TypeError):
        zoo.create("shufflenet_v2_x1_0", width_mult=0.5)  # torchvision's builder has no width argument either
    with pytest.raises(TypeError):
        zoo.create("mnasnet1_0", alpha=0.5)
    from porter.zoo.shufflenetv2 import InvertedResidual

    with pytest.raises(ValueError, match=r"\[ShuffleNetV2\] 'stride'"):
        InvertedResidual(8, 8, 4)
    with pytest.raises(ValueError, match=r"\[ShuffleNetV2\] with stride 1, 'inp'"):
        InvertedResidual(8, 12, 1)


def test_segmentation_output_is_channels_last_dict_at_input_size():
    model = zoo.create("lraspp_mobilenet_v3_large", num_classes=4)
    out = model(mx.zeros((1, 37, 50, 3)))
    assert set(out) == {"out"} and out["out"].shape == (1, 37, 50, 4)


def test_deeplabv3_mobilenet_input_gradient_matches_torch():
    """Backward through the dilated backbone, ASPP (dilated branches, pooling branch), the aux FCN head on the
    output-stride-8 block and both upsamplings (the small case: aux head, reduced width)."""
    name = "deeplabv3_mobilenet_v3_large"
    twin = seeded_twin(name)
    model = loaded_zoo_model(name, twin)
    x = torch.randn(1, 3, 45, 38, generator=torch.Generator().manual_seed(0), requires_grad=True)
    out = twin(x)
    g_out, g_aux = (torch.randn(out[k].shape, generator=torch.Generator().manual_seed(s)) for k, s in
                    (("out", 1), ("aux", 2)))
    ((out["out"] * g_out).sum() + (out["aux"] * g_aux).sum()).backward()

    def loss(a):
        got = model(a)
        return (got["out"] * _nhwc(g_out)).sum() + (got["aux"] * _nhwc(g_aux)).sum()

    grad = mx.grad(loss)(_nhwc(x))
    expected = x.grad.numpy()
    assert_close(_nchw(grad), expected)


def test_deeplabv3_mobilenet_defaults_and_tap_errors():
    from porter.zoo.deeplabv3_mobilenet import MobileNetV3SegmentationModel

    model = zoo.create("deeplabv3_mobilenet_v3_large")  # torchvision's default: 21 classes, no aux head
    assert "aux_classifier" not in model and (model.out_pos, model.aux_pos) == (16, 4)
    out = model(mx.zeros((1, 37, 50, 3)))
    mx.eval(out)
    assert set(out) == {"out"} and out["out"].shape == (1, 37, 50, 21)
    assert set(zoo.create("deeplabv3_mobilenet_v3_large", aux_loss=True, num_classes=3)(
        mx.zeros((1, 33, 20, 3)))) == {"out", "aux"}
    with pytest.raises(ValueError, match=r"\[MobileNetV3SegmentationModel\] need 0 <= 'aux_pos' < 'out_pos'"):
        MobileNetV3SegmentationModel([mx.zeros(1)] * 5, 2, 3, [])
    with pytest.raises(ValueError, match=r"'out_pos' < 5"):
        MobileNetV3SegmentationModel([mx.zeros(1)] * 5, 5, 3, [])
