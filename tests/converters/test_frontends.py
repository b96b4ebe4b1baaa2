"""Inputs other than a plain nn.Module, error reporting, inspect_model, trace and parameter views."""

import warnings

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from porter.compare import assert_close
import porter
from tests.converter_check import assert_matches, check_converted
from porter.converters import UnsupportedOpsError, inspect_model

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(Block(), nn.MaxPool2d(2, ceil_mode=True))
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        y = self.features(x)
        n = y.size(0)
        return self.fc(y.mean((2, 3)).view(n, -1))


def net():
    model = Net().eval()
    with torch.no_grad():
        bn = model.features[0].bn
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    return model


def test_exported_program_input():
    model = net()
    x = torch.randn(2, 3, 9, 9)
    dim = torch.export.Dim.AUTO
    ep = torch.export.export(model, (x,), dynamic_shapes=({0: dim, 2: dim, 3: dim},))
    ported = porter.convert(ep, io_layout="torch")
    for shape in [(2, 3, 9, 9), (3, 3, 12, 7)]:
        assert_matches(ported, model, (torch.randn(*shape),))


@pytest.mark.parametrize("how", ["script", "trace", "saved"])
def test_torchscript_input(how, tmp_path):
    model = net()
    x = torch.randn(2, 3, 9, 9)
    if how == "trace":
        scripted = torch.jit.trace(model, x)
    else:
        scripted = torch.jit.script(model)
    if how == "saved":
        torch.jit.save(scripted, tmp_path / "m.pt")
        scripted = torch.jit.load(tmp_path / "m.pt")
    ported = porter.convert(scripted, x, io_layout="mlx")
    assert ported.graph["frontend"] == "torchscript"
    for shape in [(2, 3, 9, 9), (3, 3, 12, 7)]:
        assert_matches(ported, model, (torch.randn(*shape),))
    _, trace = ported.trace(mx.array(np.zeros((1, 9, 9, 3), np.float32)))
    assert "features.0.conv" in trace and "fc" in trace


def test_dynamic_batch_from_batch_one_example():
    model = net()
    ported = porter.convert(model, torch.randn(1, 3, 8, 8), io_layout="torch")
    assert_matches(ported, model, (torch.randn(4, 3, 10, 6),))


class Unsupported(nn.Module):
    def forward(self, x):
        y = torch.igamma(x.abs() + 1, x.abs())
        z = torch.igammac(x.abs() + 2, x.abs()).sum(-1, keepdim=True)
        return torch.special.airy_ai(y + z)


def test_unsupported_ops_listed_all_at_once():
    with pytest.raises(UnsupportedOpsError) as info:
        porter.convert(Unsupported().eval(), torch.randn(2, 3, 4))
    err = info.value
    assert isinstance(err, NotImplementedError)
    assert {"aten.igamma.default", "aten.igammac.default"} <= set(err.ops)
    assert any("airy_ai" in op for op in err.ops)
    assert "aten.igamma.default" in str(err)
    report = inspect_model(Unsupported().eval(), torch.randn(2, 3, 4))
    assert set(report.unsupported) == set(err.ops)
    assert "UNSUPPORTED" in str(report)


def test_random_sampling_in_the_forward_is_refused_with_the_reason():
    class Sampler(nn.Module):
        def forward(self, mu):
            return mu + torch.randn_like(mu)

    with pytest.raises(UnsupportedOpsError, match=r"randn_like.*random sampling in the forward.*as an input"):
        porter.convert(Sampler().eval(), torch.randn(2, 4))


def test_training_mode_module_converts_to_a_port_in_training_mode():
    """Captured in eval mode (the torch model's modes are restored), returned in training mode: batch norm uses
    batch statistics, as torch's does (issue 12)."""
    model = nn.Sequential(nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3), nn.Dropout(0.0)).train()
    x = torch.randn(2, 3, 4, 4)
    ported = porter.convert(model, x, io_layout="torch")
    assert ported.training and model.training and model[1].training
    np.testing.assert_allclose(np.array(ported(mx.array(x.numpy()))), model(x).detach().numpy(), rtol=1e-4,
                               atol=1e-5)
    ported.eval()
    model.eval()
    np.testing.assert_allclose(np.array(ported(mx.array(x.numpy()))), model(x).detach().numpy(), rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("layer", [nn.Dropout(0.5), nn.BatchNorm2d(3)])
def test_training_mode_exported_program_is_refused(layer):
    """An ExportedProgram has no modes to switch: one exported in training mode is refused, naming why."""
    model = nn.Sequential(nn.Conv2d(3, 3, 1), layer).train()
    program = torch.export.export(model, (torch.randn(2, 3, 4, 4),))
    with pytest.raises(NotImplementedError, match="train|training|dropout|batch_norm"):
        porter.convert(program)


def test_bad_arguments():
    with pytest.raises(ValueError, match="io_layout"):
        porter.convert(net(), torch.randn(1, 3, 8, 8), io_layout="nchw")
    with pytest.raises(TypeError, match="example_inputs"):
        porter.convert(net(), [1, 2])
    with pytest.raises(TypeError, match="model must be"):
        porter.convert(object(), torch.randn(1, 3, 8, 8))


def test_inspect_model_report():
    report = inspect_model(net(), torch.randn(2, 3, 8, 8))
    assert report.unsupported == []
    assert report.num_parameters == sum(p.numel() for p in net().parameters())
    assert report.transposes == 0
    convs = [r for r in report.rows if r["op"] == "aten.conv2d.default"]
    assert convs and convs[0]["module"] == "features.0.conv" and convs[0]["converter"] == "convert_conv2d"
    assert convs[0]["params"] == 4 * 3 * 9 + 4
    text = str(report)
    assert "features.0.conv" in text and "parameters:" in text


def test_trace_names_modules_in_torch_layout():
    model = net()
    x = torch.randn(2, 3, 8, 8)
    ported = porter.convert(model, x, io_layout="mlx")
    out, trace = ported.trace(mx.array(x.permute(0, 2, 3, 1).numpy()))
    expected = {}
    hooks = [mod.register_forward_hook(lambda mod, i, o, name=name: expected.__setitem__(name, o.detach()))
             for name, mod in model.named_modules() if name]
    model(x)
    for h in hooks:
        h.remove()
    assert list(trace) == [n for n in expected if n in trace]
    assert {"features.0.conv", "features.0.bn", "features.0", "features.1", "features", "fc"} <= set(trace)
    for name, value in trace.items():
        ref = expected[name].numpy()
        assert value.shape == ref.shape, name
        assert_close(np.array(value), ref, what=name)


def test_torch_parameters_and_grads():
    model = nn.Sequential(nn.Conv2d(4, 6, 3, groups=2), nn.ReLU(), nn.ConvTranspose2d(6, 4, 2, stride=2, groups=2),
                          nn.Flatten(), nn.LazyLinear(3) if False else nn.Identity()).eval()
    x = torch.randn(2, 4, 6, 6)
    ported = porter.convert(model, x, io_layout="torch")
    params = ported.torch_parameters()
    assert set(params) == set(model.state_dict())
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(np.array(params[name]), value.numpy())

    g = torch.randn_like(model(x))
    (model(x) * g).sum().backward()
    xm, gm = mx.array(x.numpy()), mx.array(g.numpy())

    def loss(trainable):
        ported.update(trainable)
        return (ported(xm) * gm).sum()

    grads = mx.grad(loss)(ported.trainable_parameters())
    torch_grads = ported.torch_parameter_grads(grads)
    assert set(torch_grads) == {n for n, _ in model.named_parameters()}
    for name, p in model.named_parameters():
        assert torch_grads[name].shape == tuple(p.shape)
        np.testing.assert_allclose(torch_grads[name], p.grad.numpy(), atol=1e-4, rtol=1e-4)


def test_buffers_are_frozen():
    ported = porter.convert(net(), torch.randn(2, 3, 8, 8))
    from mlx.utils import tree_flatten

    trainable = dict(tree_flatten(ported.trainable_parameters()))
    assert "features.0.bn.running_mean" not in trainable
    assert "features.0.bn.weight" in trainable


class ScriptedFeatures(nn.Module):
    """Scripted control flow Porter folds: a list grown with append (DenseNet), isinstance, None checks, and the
    fused nn.MultiheadAttention inference path."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv2d(4 + 2 * i, 2, 3, padding=1) for i in range(2)])
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.extra = None

    def forward(self, x):
        features = [x]
        for conv in self.convs:
            if isinstance(features, list):
                features.append(F.relu(conv(torch.cat(features, 1))))
        y = torch.cat(features, 1)
        if self.extra is not None:
            y = y + 1
        t = y.flatten(2).transpose(1, 2)
        a, _ = self.attn(t, t, t, need_weights=False)
        return a


def test_torchscript_control_flow_and_fused_attention():
    model = ScriptedFeatures().eval()
    scripted = torch.jit.script(model)
    x = torch.randn(2, 4, 3, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing here depends on input values: no specialisation warning
        ported = porter.convert(scripted, x, io_layout="torch")
    ops = {n["op"] for n in ported.graph["nodes"]}
    assert "aten._native_multi_head_attention.default" in ops
    for shape in [(2, 4, 3, 3), (3, 4, 2, 5)]:
        assert_matches(ported, model, (torch.randn(*shape),))


def test_torchscript_loop_is_reported():
    class Loop(nn.Module):
        def forward(self, x):
            for _ in range(x.shape[0]):
                x = x * 2
            return x

    with pytest.raises(UnsupportedOpsError, match="prim::Loop"):
        porter.convert(torch.jit.script(Loop()), torch.randn(2, 3))


def test_batch_of_one_example_that_squeezes_the_batch():
    """Captured at batch two, ``squeeze(0)`` would vanish; the converter notices and keeps the example's batch."""

    class Squeeze(nn.Module):
        def forward(self, x):
            return x.squeeze(0) * 2

    model = Squeeze().eval()
    x = torch.randn(1, 3, 4)
    check_converted(model, x, io_layout="torch")


def test_specialised_sizes_are_static_ints():
    ported = porter.convert(nn.Linear(4, 2).eval(), torch.randn(1, 3, 4), io_layout="torch")
    shape = ported.graph["inputs"][0]["meta"]["shape"]
    assert shape[2] == 4 and isinstance(shape[0], str)  # the batch stays symbolic, the feature size is static
