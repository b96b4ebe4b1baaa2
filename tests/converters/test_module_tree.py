"""Issue 12: a ported model is an MLX model, a tree of MLX layers under torch's names.

Torch is the oracle throughout: every comparison runs the torch model on the same data in the test.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as mnn
import mlx.optimizers as optim
import numpy as np
import pytest
import torch
from mlx.utils import tree_flatten
from torch import nn

import porter
import porter.layers as PL
from porter.converters.layer_types import Activation, Embedding, QuantizedEmbedding
from porter.converters.tree import Submodule
from tests.models import REGISTRY, make_inputs


def _nhwc(x: torch.Tensor) -> mx.array:
    a = x.detach().numpy()
    return mx.array(np.moveaxis(a, 1, -1) if a.ndim == 4 else a)


def _resnet():
    return REGISTRY["resnet_basic"].builder(seed=1)


# ---------------------------------------------------------------------------------------------------- the tree
def test_tree_mirrors_torch_names_and_layer_classes():
    model = _resnet()
    ported = porter.convert(model, make_inputs(REGISTRY["resnet_basic"].inputs))
    names = {k for k, _ in tree_flatten(ported.parameters())}
    assert names == set(model.state_dict())
    trainable = {k for k, _ in tree_flatten(ported.trainable_parameters())}
    assert trainable == {n for n, _ in model.named_parameters()}
    assert isinstance(ported.conv1, PL.Conv2d)
    assert isinstance(ported.bn1, PL.BatchNorm)
    assert isinstance(ported.layer1, list) and isinstance(ported.layer1[0].conv1, PL.Conv2d)
    assert isinstance(ported.layer2[0].downsample[1], PL.BatchNorm)
    assert isinstance(ported.fc, mnn.Linear)
    assert isinstance(ported.relu, Activation)
    assert ported.layer1[0].conv1.weight.shape == (8, 3, 3, 8)  # MLX layout (O, kH, kW, I)
    assert not ported.training  # converted from an eval-mode model


def test_unmapped_modules_are_containers_with_torch_names():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(torch.rand(4) + 0.5)
            self.register_buffer("shift", torch.rand(4))

        def forward(self, x):
            return x * self.scale + self.shift

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(4, 4), Scaled(), nn.Linear(4, 4)])

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return x

    model = Net().eval()
    x = torch.randn(3, 4)
    ported = porter.convert(model, (x,))
    assert isinstance(ported.blocks[1], Submodule) and ported.blocks[1].torch_type == "Scaled"
    assert isinstance(ported.blocks[0], mnn.Linear) and isinstance(ported.blocks[2], mnn.Linear)
    assert {k for k, _ in tree_flatten(ported.trainable_parameters())} == {n for n, _ in model.named_parameters()}
    assert "blocks.1.shift" not in {k for k, _ in tree_flatten(ported.trainable_parameters())}
    np.testing.assert_allclose(np.array(ported(mx.array(x.numpy()))), model(x).detach().numpy(), rtol=1e-5,
                               atol=1e-6)


def test_replacing_a_child_changes_the_forward():
    model = _resnet()
    x = make_inputs(REGISTRY["resnet_basic"].inputs)[0]
    ported = porter.convert(model, (x,))
    before = np.array(ported(_nhwc(x)))

    class Adapter(mnn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner
            self.delta = mx.full((10,), 0.25)

        def __call__(self, h):
            return self.inner(h) + self.delta

    ported.fc = Adapter(ported.fc)
    after = np.array(ported(_nhwc(x)))
    np.testing.assert_allclose(after, before + 0.25, rtol=1e-6, atol=1e-6)
    assert "fc.inner.weight" in {k for k, _ in tree_flatten(ported.parameters())}


def test_quantize_finds_linear_and_embedding_layers_and_still_runs():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(50, 64)
            self.fc1 = nn.Linear(64, 128)
            self.fc2 = nn.Linear(128, 64)

        def forward(self, ids):
            return self.fc2(torch.relu(self.fc1(self.emb(ids))))

    torch.manual_seed(0)
    model = Net().eval()
    ids = torch.randint(0, 50, (2, 7))
    ported = porter.convert(model, (ids,))
    assert isinstance(ported.emb, Embedding)
    ref = model(ids).detach().numpy()
    mnn.quantize(ported, group_size=32, bits=8)
    assert isinstance(ported.fc1, mnn.QuantizedLinear) and isinstance(ported.fc2, mnn.QuantizedLinear)
    assert isinstance(ported.emb, QuantizedEmbedding)
    out = np.array(ported(mx.array(ids.numpy())))
    # 8-bit groups of 32: a few parts in a thousand of the activations' scale
    assert np.abs(out - ref).max() < 0.02 * np.abs(ref).max()
    assert np.abs(out - ref).max() > 0  # really quantized
    with pytest.raises(ValueError, match="index 50 is out of range"):  # the index check survives quantization
        ported(mx.array([[50]]))


def test_save_and_load_weights_use_torch_names(tmp_path):
    spec = REGISTRY["resnet_basic"]
    x = make_inputs(spec.inputs)[0]
    source = porter.convert(spec.builder(seed=1), (x,))
    target = porter.convert(spec.builder(seed=2), (x,))
    path = str(tmp_path / "weights.safetensors")
    source.save_weights(path)
    stored = mx.load(path)
    assert set(stored) == set(spec.builder(seed=1).state_dict())
    assert not np.allclose(np.array(target(_nhwc(x))), np.array(source(_nhwc(x))))
    target.load_weights(path)
    np.testing.assert_array_equal(np.array(target(_nhwc(x))), np.array(source(_nhwc(x))))


def test_compile_and_value_and_grad_work():
    spec = REGISTRY["resnet_basic"]
    model = spec.builder(seed=1)
    x = make_inputs(spec.inputs)[0]
    ported = porter.convert(model, (x,))
    compiled = mx.compile(lambda a: ported(a))
    np.testing.assert_allclose(np.array(compiled(_nhwc(x))), np.array(ported(_nhwc(x))), rtol=1e-5, atol=1e-5)

    def loss(m, a):
        return (m(a) ** 2).mean()

    value, grads = mnn.value_and_grad(ported, loss)(ported, _nhwc(x))
    torch_x = x.clone()
    torch_loss = (model(torch_x) ** 2).mean()
    torch_loss.backward()
    assert abs(value.item() - torch_loss.item()) < 1e-4 * abs(torch_loss.item()) + 1e-6
    by_name = ported.torch_parameter_grads(grads)
    for name, p in model.named_parameters():
        np.testing.assert_allclose(by_name[name], p.grad.numpy(), rtol=1e-3, atol=1e-5, err_msg=name)


def test_save_load_rebuilds_the_tree(tmp_path):
    spec = REGISTRY["mobilenet_v3"]
    model = spec.builder(seed=3)
    x = make_inputs(spec.inputs)[0]
    ported = porter.convert(model, (x,))
    porter.save(ported, tmp_path / "m")
    loaded = porter.load(tmp_path / "m")
    assert [type(m).__name__ for _, m in loaded.named_modules()] == [type(m).__name__ for _, m in
                                                                     ported.named_modules()]
    np.testing.assert_array_equal(np.array(loaded(_nhwc(x))), np.array(ported(_nhwc(x))))


def test_save_refuses_a_layer_it_cannot_record(tmp_path):
    ported = porter.convert(_resnet(), make_inputs(REGISTRY["resnet_basic"].inputs))

    class Mine(mnn.Module):
        def __call__(self, h):
            return h

    ported.fc = Mine()
    with pytest.raises(ValueError, match="layer at 'fc' is now a Mine"):
        porter.save(ported, tmp_path / "m")
    assert not (tmp_path / "m").exists()


# ---------------------------------------------------------------------------------------------------- modes
def test_train_mode_uses_batch_statistics_and_updates_running_stats_as_torch():
    spec = REGISTRY["resnet_basic"]
    model = spec.builder(seed=4)
    x = make_inputs(spec.inputs, seed=5)[0]
    ported = porter.convert(model, (x,))
    model.train()
    ported.train()
    ref = model(x).detach().numpy()
    out = np.array(ported(_nhwc(x)))
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-4)
    torch_state = model.state_dict()
    for name, value in ported.torch_parameters().items():
        if "running" in name or "num_batches" in name:
            np.testing.assert_allclose(np.array(value), torch_state[name].numpy(), rtol=1e-4, atol=1e-5,
                                       err_msg=name)
    ported.eval()
    model.eval()
    np.testing.assert_allclose(np.array(ported(_nhwc(x))), model(x).detach().numpy(), rtol=1e-4, atol=1e-4)


def test_a_training_mode_model_converts_and_stays_in_training_mode():
    spec = REGISTRY["resnet_basic"]
    model = spec.builder(seed=4).train()
    model.layer1.eval()  # mixed modes are restored as they were
    x = make_inputs(spec.inputs)[0]
    ported = porter.convert(model, (x,))
    assert ported.training and ported.bn1.training
    assert model.training and model.bn1.training and not model.layer1.training


def test_dropout_is_a_layer_active_in_train_mode_only():
    model = nn.Sequential(nn.Linear(16, 64), nn.Dropout(0.5)).eval()
    x = torch.randn(8, 16)
    ported = porter.convert(model, (x,))
    assert isinstance(ported["1"], mnn.Dropout) and isinstance(ported["0"], mnn.Linear)  # the root's own keys
    ref = model(x).detach().numpy()
    np.testing.assert_allclose(np.array(ported(mx.array(x.numpy()))), ref, rtol=1e-5, atol=1e-6)
    ported.train()
    out = np.array(ported(mx.array(x.numpy())))
    zeros = np.mean(out == 0)
    assert 0.35 < zeros < 0.65
    kept = out != 0
    np.testing.assert_allclose(out[kept], 2 * ref[kept], rtol=1e-5, atol=1e-6)  # torch's 1 / (1 - p) scaling


# ---------------------------------------------------------------------------------------------------- training
def _train_torch(model, batches, make_opt, steps):
    model.train()
    opt = make_opt(model.parameters())
    losses = []
    for x, y in batches[:steps]:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _train_mlx(ported, batches, opt, steps, to_mlx):
    ported.train()

    def loss_fn(m, x, y):
        return mnn.losses.cross_entropy(m(x), y, reduction="mean")

    step = mnn.value_and_grad(ported, loss_fn)
    losses = []
    for x, y in batches[:steps]:
        loss, grads = step(ported, to_mlx(x), mx.array(y.numpy()))
        opt.update(ported, grads)
        mx.eval(ported.parameters(), opt.state)
        losses.append(loss.item())
    return losses


def _no_dropout(model):
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    return model


_TRAINING = {
    # family: (registry name, classes, batch shape). Batches big enough that no batch norm sees a handful of values
    # per channel (batch 2 at 1x1 makes every normalised value +-1: any rounding then swings the gradients).
    "resnet": ("resnet_basic", 10, (8, 3, 48, 48)),
    "mobilenet_v3": ("mobilenet_v3", 10, (8, 3, 64, 64)),
    "vit": ("vit", 10, (8, 3, 32, 32)),
}


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("family", sorted(_TRAINING))
def test_training_follows_torch(family, optimizer):
    name, classes, shape = _TRAINING[family]
    spec = REGISTRY[name]
    model = _no_dropout(spec.builder(seed=7))
    gen = torch.Generator().manual_seed(11)
    batches = [(torch.randn(shape, generator=gen), torch.randint(0, classes, (shape[0],), generator=gen))
               for _ in range(4)]
    ported = porter.convert(model, (batches[0][0],))
    if optimizer == "sgd":
        torch_opt = lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)  # noqa: E731
        mlx_opt = optim.SGD(learning_rate=0.05, momentum=0.9)
    else:
        # eps well above rounding noise: Adam divides each gradient by its own size, so a parameter whose true
        # gradient is zero (attention's key bias) would otherwise move by lr in the direction of its noise
        torch_opt = lambda p: torch.optim.Adam(p, lr=1e-3, eps=1e-6)  # noqa: E731
        mlx_opt = optim.Adam(learning_rate=1e-3, eps=1e-6, bias_correction=True)
    torch_losses = _train_torch(model, batches, torch_opt, 4)
    mlx_losses = _train_mlx(ported, batches, mlx_opt, 4, _nhwc)
    np.testing.assert_allclose(mlx_losses, torch_losses, rtol=2e-3, atol=1e-4)
    final = ported.torch_parameters()
    for key, value in model.state_dict().items():
        want = value.numpy()
        got = np.array(final[key])
        if key.endswith("num_batches_tracked"):
            assert got == want, key
            continue
        scale = max(np.abs(want).max(), 1e-3)
        assert np.abs(got - want).max() <= 2e-3 * scale + 1e-5, (key, np.abs(got - want).max(), scale)


def test_a_quantized_tree_saves_and_loads(tmp_path):
    import json

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(40, 64)
            self.fc1 = nn.Linear(64, 128)
            self.fc2 = nn.Linear(128, 64)

        def forward(self, ids):
            return self.fc2(torch.relu(self.fc1(self.emb(ids))))

    torch.manual_seed(1)
    ids = torch.randint(0, 40, (2, 5))
    ported = porter.convert(Net().eval(), (ids,))
    mnn.quantize(ported, group_size=32, bits=4, class_predicate=lambda p, m: p != "fc2" and hasattr(m, "to_quantized"))
    mnn.quantize(ported, group_size=64, bits=8, class_predicate=lambda p, m: p == "fc2")
    want = np.array(ported(mx.array(ids.numpy())))
    porter.save(ported, tmp_path / "q")
    loaded = porter.load(tmp_path / "q")
    assert isinstance(loaded.fc1, mnn.QuantizedLinear) and loaded.fc1.bits == 4 and loaded.fc2.bits == 8
    assert isinstance(loaded.emb, QuantizedEmbedding)
    np.testing.assert_array_equal(np.array(loaded(mx.array(ids.numpy()))), want)
    config = json.loads((tmp_path / "q" / "config.json").read_text())
    assert config["quantization"] == {"group_size": 32, "bits": 4, "mode": "affine",
                                      "fc2": {"group_size": 64, "bits": 8, "mode": "affine"}}
    assert "fc1.scales" in mx.load(str(tmp_path / "q" / "model.safetensors"))


def test_quantize_model_on_a_port_quantizes_convs_and_saves(tmp_path):
    """porter.layers.quantize_model on a converted ResNet: convs and the Linear quantized where they can be (the
    3-channel stem cannot: its reduction 27 is not a multiple of the group size), saved, loaded back bit-exact,
    and close to torch (bounded by what 8-bit weights cost: torch run with the dequantized weights)."""
    from porter.layers import quantize_model

    from porter.examples import BasicBlock, ResNet
    from tests.models._common import randomize_

    torch.manual_seed(2)
    model = randomize_(ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10, widths=(32, 32, 32, 64)), 2)
    x = torch.randn(2, 3, 32, 32)
    ported = porter.convert(model, (x,))
    report = quantize_model(ported, group_size=32, bits=8)
    assert isinstance(ported.layer1[0].conv1, PL.QuantizedConv2d)
    assert isinstance(ported.fc, mnn.QuantizedLinear)
    assert "conv1" in report.skipped and "divisible" in report.skipped["conv1"]
    want = np.array(ported(_nhwc(x)))
    porter.save(ported, tmp_path / "q")
    loaded = porter.load(tmp_path / "q")
    assert isinstance(loaded.layer1[0].conv1, PL.QuantizedConv2d)
    np.testing.assert_array_equal(np.array(loaded(_nhwc(x))), want)
    # torch with every quantized layer's dequantized weight gives the port's numbers
    with torch.no_grad():
        for path in report.quantized:
            layer = ported
            for key in path.split("."):
                layer = layer[int(key)] if isinstance(layer, list) else layer[key]
            if isinstance(layer, PL.QuantizedConv2d):
                w = np.array(layer.dequantized_weight())
                model.get_submodule(path).weight.copy_(torch.from_numpy(np.moveaxis(w, -1, 1).copy()))
            else:
                w = np.array(mx.dequantize(layer.weight, layer.scales, layer.biases, layer.group_size, layer.bits))
                model.get_submodule(path).weight.copy_(torch.from_numpy(w))
    np.testing.assert_allclose(want, model(x).detach().numpy(), rtol=1e-4, atol=1e-4)


def test_a_torch_subclass_keeping_its_forward_maps_like_its_base():
    class Conv3DSimple(nn.Conv3d):  # torchvision's: only __init__ differs
        def __init__(self, cin, cout):
            super().__init__(cin, cout, (3, 3, 3), padding=1, bias=False)

    class Shifted(nn.Linear):  # its own forward: not a Linear's computation
        def forward(self, x):
            return super().forward(x) + 1.0

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = Conv3DSimple(2, 4)
            self.fc = Shifted(4, 3)

        def forward(self, x):
            return self.fc(self.conv(x).mean(dim=(2, 3, 4)))

    model = Net().eval()
    x = torch.randn(2, 2, 4, 6, 6)
    ported = porter.convert(model, (x,), io_layout="torch")
    assert isinstance(ported.conv, PL.Conv3d)
    assert isinstance(ported.fc, Submodule) and ported.fc.torch_type == "Shifted"
    np.testing.assert_allclose(np.array(ported(mx.array(x.numpy()))), model(x).detach().numpy(), rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("count", [1, 6])
def test_prelu_maps_to_a_layer(count):
    model = nn.Sequential(nn.Conv2d(3, 6, 3), nn.PReLU(count)).eval()
    with torch.no_grad():
        model[1].weight.uniform_(-0.5, 0.5)  # negative slopes too
    x = torch.randn(2, 3, 7, 9)
    ported = porter.convert(model, (x,), io_layout="torch")
    assert type(ported["1"]).__name__ == "PReLU" and isinstance(ported["1"], mnn.PReLU)
    np.testing.assert_allclose(np.array(ported(mx.array(x.numpy()))), model(x).detach().numpy(), rtol=1e-5,
                               atol=1e-6)


def test_a_compiled_training_step_updates_weights_and_running_stats_like_the_eager_one():
    """MLX's usual training loop: mx.compile over model.state and optimizer.state (batch norm's running
    statistics are state the step updates)."""
    from functools import partial

    spec = REGISTRY["resnet_basic"]
    model = spec.builder(seed=7)
    gen = torch.Generator().manual_seed(3)
    x, y = torch.randn(8, 3, 32, 32, generator=gen), torch.randint(0, 10, (8,), generator=gen)
    xm, ym = _nhwc(x), mx.array(y.numpy())
    runs = []
    for compiled in (False, True):
        ported = porter.convert(model, (x,))
        ported.train()
        opt = optim.SGD(learning_rate=0.01, momentum=0.9)
        loss_and_grad = mnn.value_and_grad(ported, lambda m, a, b: mnn.losses.cross_entropy(m(a), b,
                                                                                           reduction="mean"))

        def step(a, b):
            loss, grads = loss_and_grad(ported, a, b)
            opt.update(ported, grads)
            return loss

        if compiled:
            state = [ported.state, opt.state]
            step = partial(mx.compile, inputs=state, outputs=state)(step)
        losses = [step(xm, ym).item() for _ in range(3)]
        runs.append((losses, ported.torch_parameters()))
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-4)
    for name, value in runs[0][1].items():
        np.testing.assert_allclose(np.array(runs[1][1][name]), np.array(value), rtol=1e-3, atol=1e-5, err_msg=name)
    assert int(np.array(runs[1][1]["bn1.num_batches_tracked"])) == 3


def test_multihead_attention_is_a_layer_with_torch_names(tmp_path):
    from porter.converters.layer_types import MultiheadAttention

    spec = REGISTRY["vit"]
    model = spec.builder(seed=4)
    x = make_inputs(spec.inputs)[0]
    ported = porter.convert(model, (x,))
    attention = ported.encoder.layers.encoder_layer_0.self_attention
    assert isinstance(attention, MultiheadAttention) and isinstance(attention.out_proj, mnn.Linear)
    assert {k for k, _ in tree_flatten(attention.parameters())} == {
        "in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}
    np.testing.assert_allclose(np.array(ported(_nhwc(x))), model(x).detach().numpy(), rtol=1e-4, atol=1e-5)
    from porter.layers import quantize_model

    report = quantize_model(ported, group_size=32, bits=8)  # out_proj and the MLP's Linears (widths of 32)
    assert "encoder.layers.encoder_layer_0.self_attention.out_proj" in report.quantized
    assert isinstance(attention.out_proj, mnn.QuantizedLinear)
    want = np.array(ported(_nhwc(x)))
    porter.save(ported, tmp_path / "q")
    loaded = porter.load(tmp_path / "q")
    assert isinstance(loaded.encoder.layers.encoder_layer_0.self_attention.out_proj, mnn.QuantizedLinear)
    np.testing.assert_array_equal(np.array(loaded(_nhwc(x))), want)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("kind", ["self", "key_is_value", "cross"])
def test_multihead_attention_forms_follow_torch(batch_first, kind):
    from porter.converters.layer_types import MultiheadAttention

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(16, 4, batch_first=batch_first)

        def forward(self, q, k, v):
            if kind == "self":
                return self.attn(q, q, q, need_weights=False)[0]
            if kind == "key_is_value":
                return self.attn(q, k, k, need_weights=False)[0]
            return self.attn(q, k, v, need_weights=False)[0]

    torch.manual_seed(0)
    model = Net().eval()
    with torch.no_grad():
        model.attn.in_proj_bias.uniform_(-0.5, 0.5)
        model.attn.out_proj.bias.uniform_(-0.5, 0.5)
    shape_q, shape_k = ((2, 5, 16), (2, 7, 16)) if batch_first else ((5, 2, 16), (7, 2, 16))
    q, k, v = torch.randn(shape_q), torch.randn(shape_k), torch.randn(shape_k)
    ported = porter.convert(model, (q, k, v), io_layout="torch")
    assert isinstance(ported.attn, MultiheadAttention)
    got = np.array(ported(*(mx.array(t.numpy()) for t in (q, k, v))))
    np.testing.assert_allclose(got, model(q, k, v).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_multihead_attention_with_a_mask_stays_program_nodes_and_matches_torch():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(16, 4, batch_first=True)

        def forward(self, x, mask):
            return self.attn(x, x, x, attn_mask=mask, need_weights=False)[0]

    torch.manual_seed(1)
    model = Net().eval()
    x, mask = torch.randn(2, 5, 16), torch.randn(5, 5)
    ported = porter.convert(model, (x, mask), io_layout="torch")
    assert isinstance(ported.attn, Submodule)
    got = np.array(ported(mx.array(x.numpy()), mx.array(mask.numpy())))
    np.testing.assert_allclose(got, model(x, mask).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_a_quantized_port_casts_to_half():
    """astype after quantize_model: the packed weights stay uint32, scales, biases and the rest become float16."""
    from porter.layers import quantize_model

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(64, 64)
            self.fc2 = nn.Linear(64, 8)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    torch.manual_seed(0)
    x = torch.randn(3, 64)
    ported = porter.convert(Net().eval(), (x,))
    quantize_model(ported, group_size=32, bits=8)
    half = ported.astype("float16")
    assert isinstance(half.fc1, mnn.QuantizedLinear) and half.fc1.weight.dtype == mx.uint32
    assert half.fc1.scales.dtype == mx.float16 and half.fc1.bias.dtype == mx.float16
    want = np.array(ported(mx.array(x.numpy())))
    got = np.array(half(mx.array(x.numpy())).astype(mx.float32))
    assert np.abs(got - want).max() <= 1e-2 * np.abs(want).max()
