"""Video families beyond the registry-wide tests: S3D in train mode (its fixed 2x7x7 pool makes the registry's SGD
test take minutes, so its features are checked here on a small clip), input validation."""

import copy

import mlx.core as mx
import mlx.nn as mnn
import numpy as np
import pytest
import torch
from mlx.utils import tree_flatten

from porter import zoo
from porter.zoo._common import apply_sequence
from porter.zoo._loading import torch_parameter_specs

from tests.zoo import test_zoo as tz  # noqa: E402  (the registry tests' twins and loading helpers)


def test_s3d_features_train_mode_matches_torch():
    """One train-mode forward and backward through every S3D feature layer (separable convs, inception branches,
    3d max pools, batch norm with batch statistics): parameter gradients and updated running statistics follow
    torch's float64 run about as closely as torch's float32 run does."""
    name = "s3d"
    twin = tz.seeded_twin(name).train()
    model = tz.loaded_zoo_model(name, twin)
    model.train()
    twin64 = copy.deepcopy(twin).double()
    x = torch.randn(2, 3, 8, 64, 64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out_shape = twin.features(x).shape
    weight = torch.randn(*out_shape, generator=torch.Generator().manual_seed(4))
    grads, states = {}, {}
    for net, dtype in ((twin, torch.float32), (twin64, torch.float64)):
        net.zero_grad()
        (net.features(x.to(dtype)) * weight.to(dtype)).sum().backward()
        grads[dtype] = {k: p.grad.double().numpy() for k, p in net.named_parameters() if k.startswith("features")}
        states[dtype] = {k: v.double().numpy() for k, v in net.state_dict().items() if "running" in k}
    wm = mx.array(tz._channels_last(weight.numpy()))
    loss, got = mnn.value_and_grad(model, lambda m, x: (apply_sequence(m.features, x) * wm).sum())(
        model, mx.array(tz._channels_last(x.numpy())))
    mx.eval(loss, got)
    got = dict(tree_flatten(got))
    params = dict(tree_flatten(model.parameters()))
    specs = torch_parameter_specs(model)
    assert grads[torch.float64] and len(states[torch.float64]) > 50
    for table, ours in ((grads, got), (states, params)):
        for key, exact in table[torch.float64].items():
            path, _, transform = specs[key]
            exact = transform(exact)
            torch_err = np.abs(transform(table[torch.float32][key]) - exact).max()
            scale = max(float(np.abs(exact).max()), 1e-6)
            err = np.abs(np.array(ours[path]).astype(np.float64) - exact).max()
            # Batch-norm bias gradients here are sums over every position of gradients that mostly cancel (scale
            # 0.2 from terms of order 10): float32 rounding decides them. With MLX's reference BLAS the worst key is
            # 3.3x torch's own float32 error, with OpenBLAS's Haswell kernels (AMD Zen 3) 4.6x: the BLAS's blocking
            # changes the rounding. A wrong gradient is off by the order of `scale`.
            assert err <= 6 * torch_err + 2e-3 * scale, (key, err, torch_err, scale)


@pytest.mark.parametrize("name", ["r3d_18", "s3d"])
def test_video_models_name_the_expected_layout(name):
    model = zoo.create(name, **tz.SMALL[name])
    with pytest.raises(ValueError, match=r"\(N, T, H, W, 3\)"):
        model(mx.zeros((1, 16, 16, 3)))


def test_s3d_too_small_clip_is_refused():
    model = zoo.create("s3d", **tz.SMALL["s3d"])
    with pytest.raises(ValueError, match="2x7x7"):
        model(mx.zeros((1, 8, 64, 64, 3)))
    with pytest.raises(ValueError, match="width_divisor"):
        zoo.create("s3d", width_divisor=0)
