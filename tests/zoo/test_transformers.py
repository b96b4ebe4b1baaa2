"""Attention families beyond the registry-wide tests: Swin's shifted-window attention at the layer level on the
sizes that take torchvision's special paths (one dim shifted, the other covered by the window), ViT's image_size,
MaxViT's partition checks, dropout and stochastic depth in training, bfloat16, NaN kept per sample."""


import mlx.core as mx
import mlx.nn as mnn
import numpy as np
import pytest
import torch

from porter.compare import assert_close
from porter import zoo
from porter.zoo import swin
from porter.zoo._loading import torch_parameter_specs

from tests.zoo import test_zoo as tz  # noqa: E402  (the registry tests' twins and loading helpers)
from tests.zoo.twins import swin as swin_twin  # noqa: E402


def _load(module, torch_module):
    """Copy a torch module's state into the MLX module of the same names (by the zoo loader's roles)."""
    state = {k: v.detach().numpy() for k, v in torch_module.state_dict().items()}
    specs = torch_parameter_specs(module)
    assert sorted(specs) == sorted(state)
    module.load_weights([(path, mx.array(transform(state[key]))) for key, (path, _, transform) in specs.items()],
                        strict=False)
    return module


# window 3x4, shift 1x2. (3, 9): padded 3x12, the window covers H, so only W shifts (torchvision's -0 slices);
# (10, 2): padded 12x4, only H shifts; (7, 13): both pad and shift; (3, 4): one window, no shift at all.
@pytest.mark.parametrize("v2", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("size", [(3, 9), (10, 2), (7, 13), (3, 4)])
def test_shifted_window_attention_matches_torch(v2, size):
    torch.manual_seed(0)
    cls_t = swin_twin.ShiftedWindowAttentionV2 if v2 else swin_twin.ShiftedWindowAttention
    cls_m = swin.ShiftedWindowAttentionV2 if v2 else swin.ShiftedWindowAttention
    twin = swin_twin.randomize_v2(swin_twin.randomize_constants(cls_t(12, [3, 4], [1, 2], 3))).eval()
    layer = _load(cls_m(12, [3, 4], [1, 2], 3), twin)
    x = torch.randn(2, *size, 12, requires_grad=True)
    y = twin(x)
    weight = torch.randn(y.shape)
    (y * weight).sum().backward()
    got, grad = mx.value_and_grad(lambda a: (layer(a) * mx.array(weight.numpy())).sum())(mx.array(x.detach().numpy()))
    np.testing.assert_allclose(np.array(layer(mx.array(x.detach().numpy()))), y.detach().numpy(), rtol=0,
                               atol=2e-5 * y.abs().max().item())
    np.testing.assert_allclose(np.array(grad), x.grad.numpy(), rtol=0, atol=2e-5 * x.grad.abs().max().item())


def test_shift_mask_is_torchvisions_for_a_zero_shift():
    """With the H shift zeroed (window covers H), torchvision's slices (-0, None) label whole rows: the mask only
    separates columns."""
    mask = swin._shift_mask(3, 12, (3, 4), (0, 2))
    assert mask.shape == (3, 12, 12)
    assert (mask[:2] == 0).all() and (mask[2] != 0).any()


def test_vit_image_size_sizes_the_position_embedding():
    small = {**tz.SMALL["vit_b_16"], "image_size": 48}
    model = zoo.create("vit_b_16", **small)
    assert model.encoder.pos_embedding.shape == (1, (48 // 8) ** 2 + 1, small["hidden_dim"])
    assert model(mx.zeros((2, 48, 48, 3))).shape == (2, 7)
    with pytest.raises(ValueError, match="image_size"):
        model(mx.zeros((2, 40, 40, 3)))
    with pytest.raises(ValueError, match=r"'image_size' \(50\) must be divisible by 'patch_size' \(8\)"):
        zoo.create("vit_b_16", **{**small, "image_size": 50})
    with pytest.raises(ValueError, match="'embed_dim' .* 'num_heads'"):
        zoo.create("vit_b_16", **{**small, "num_heads": 5})


def test_maxvit_partition_checks():
    small = tz.SMALL["maxvit_t"]
    with pytest.raises(ValueError, match="not divisible by partition size 3"):
        zoo.create("maxvit_t", **{**small, "partition_size": 3})
    model = zoo.create("maxvit_t", **small)
    with pytest.raises(ValueError, match="not divisible by the partition size 2"):
        model(mx.zeros((1, 40, 40, 3)))


@pytest.mark.parametrize("name, kwargs", [
    ("vit_b_16", {"attention_dropout": 0.5}),
    ("vit_b_16", {"dropout": 0.5}),
    ("swin_t", {"attention_dropout": 0.5}),
    ("swin_v2_t", {"stochastic_depth_prob": 0.9}),
    ("maxvit_t", {"stochastic_depth_prob": 0.9}),
])
def test_dropout_and_stochastic_depth_act_in_training_only(name, kwargs):
    shape = tz.CASES[name].inputs[0]
    x = mx.random.normal((shape[0], *shape[2:], shape[1]), key=mx.random.key(1))
    model = zoo.create(name, **tz.SMALL[name], **kwargs)
    reference = zoo.create(name, **tz.SMALL[name])
    reference.update(model.parameters())
    assert np.array_equal(np.array(model(x)), np.array(reference(x)))  # eval: deterministic, no dropout
    model.train()
    mx.random.seed(3)
    first, second = np.array(model(x)), np.array(model(x))
    assert not np.array_equal(first, second)


@pytest.mark.parametrize("name", ["vit_b_16", "swin_v2_t", "maxvit_t"])
def test_bfloat16_follows_torch(name):
    """In bfloat16 the zoo model stays about as close to the float32 result as torch's bfloat16 run does (Swin v2's
    cosine logits, scaled by up to 100, magnify bfloat16's rounding in both)."""
    twin = tz.seeded_twin(name)
    model = tz.loaded_zoo_model(name, twin)
    shape = tz.CASES[name].inputs[0]
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = twin(x).numpy()
        torch_err = np.abs(twin.bfloat16()(x.bfloat16()).float().numpy() - expected).max()
    model.set_dtype(mx.bfloat16)
    got = model(mx.array(tz._channels_last(x.numpy())).astype(mx.bfloat16))
    assert got.dtype == mx.bfloat16
    err = np.abs(np.array(got.astype(mx.float32)) - expected).max()
    assert err <= 3 * torch_err + 1e-3 * np.abs(expected).max(), (err, torch_err)


@pytest.mark.parametrize("name", ["vit_b_16", "swin_t", "swin_v2_t", "maxvit_t"])
def test_nan_stays_in_its_sample(name):
    """A NaN pixel in sample 0 makes torch's output for sample 0 NaN and leaves sample 1 alone: windows, grids and
    attention never mix samples (the batch folds into the window axis and back)."""
    twin = tz.seeded_twin(name)
    model = tz.loaded_zoo_model(name, twin)
    shape = tz.CASES[name].inputs[0]
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(5))
    x[0, 1, shape[2] // 2, shape[3] - 1] = float("nan")
    with torch.no_grad():
        expected = twin(x).numpy()
    got = np.array(model(mx.array(tz._channels_last(x.numpy()))))
    assert np.isnan(expected[0]).all() and np.isfinite(expected[1]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    assert_close(got[1], expected[1])
