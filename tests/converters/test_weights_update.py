"""Refreshing a port from a newer torch ``state_dict`` (``ported.load_torch_state_dict``, ``porter.update_weights``).

Each test converts a model at weights A, moves the torch model to weights B (SGD steps in training mode, so batch
norm statistics and counters move too, or re-randomised), loads B into the port and compares with torch run on B in
the test, at two input sizes. Torch is the oracle.
"""

from __future__ import annotations

import copy

import mlx.core as mx
import numpy as np
import pytest
import torch
from mlx.utils import tree_flatten
from torch import nn

import porter
from porter.converters.weights_update import LoadResult, WeightsUpdateError
from tests.converter_check import assert_matches, run_ported
from tests.models.gpt2 import gpt2_small


class ConvBN(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16),
                                      nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.features(x), 1))


class GroupedNet(nn.Module):
    """Grouped, depthwise (multiplier 2) and transposed convs, 1-d and 2-d: every conv weight transform."""

    def __init__(self):
        super().__init__()
        self.grouped = nn.Conv2d(4, 8, 3, padding=1, groups=2)
        self.depthwise = nn.Conv2d(8, 16, 3, padding=2, dilation=2, groups=8)
        self.up = nn.ConvTranspose2d(16, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.up1d = nn.ConvTranspose1d(6, 4, 4, stride=2, groups=2)

    def forward(self, x):
        y = self.up(torch.relu(self.depthwise(self.grouped(x))))
        return self.up1d(y.mean(dim=2))


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(6, 16)
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        h = self.embed(x)
        a, _ = self.attn(h, h, h, need_weights=False)
        return self.head(self.norm(h + a))


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(5, 7, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(14, 3)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out)


class Rotary(nn.Module):
    """A non-persistent buffer (torch's state_dict lacks it) the forward reads."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 4), persistent=False)

    def forward(self, x):
        return self.proj(x) * self.scale


class RotaryConstant(Rotary):
    """And a lifted constant (a tensor built in the forward), which torch's state_dict lacks too."""

    def forward(self, x):
        return super().forward(x) + torch.tensor([0.0, 1.0, 0.0, -1.0])


def _images(n):
    return (torch.randn(2, 3, n, n),)


CASES = {  # name -> (builder, inputs at a size, two sizes)
    "conv_bn": (ConvBN, _images, (16, 22)),
    "grouped": (GroupedNet, lambda n: (torch.randn(2, 4, n, n + 1),), (7, 10)),
    "attention": (Attention, lambda n: (torch.randn(2, n, 6),), (5, 9)),
    "lstm": (Recurrent, lambda n: (torch.randn(2, n, 5),), (4, 7)),
}


def _train(model, make_input, size, steps=3):
    """A few SGD steps in training mode (batch norm statistics and counters move too); back to eval mode."""
    opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    model.train()
    for _ in range(steps):
        opt.zero_grad()
        out = model(*make_input(size))
        (out.square().mean() + out.mean()).backward()
        opt.step()
    model.eval()


def _arrays(port) -> dict:
    return {k: np.array(v.astype(mx.float32) if v.dtype == mx.bfloat16 else v)
            for k, v in tree_flatten(port.parameters())}


def _matches(port, model, inputs) -> bool:
    try:
        assert_matches(port, model, inputs)
        return True
    except AssertionError:
        return False


@pytest.mark.parametrize("case", sorted(CASES))
def test_port_follows_further_training(case):
    build, make_input, sizes = CASES[case]
    torch.manual_seed(0)
    model = build().eval()
    port = porter.convert(model, make_input(sizes[0]))  # weights A
    _train(model, make_input, sizes[0])  # torch moves on to weights B
    assert not _matches(port, model, make_input(sizes[0]))  # the test can fail: the port still holds A
    assert port.load_torch_state_dict(model.state_dict()) == LoadResult([], [])
    for size in sizes:
        assert_matches(port, model, make_input(size))
    for name, value in model.state_dict().items():  # running stats and counters too, back in torch layout
        np.testing.assert_array_equal(np.array(port.torch_parameters()[name]), value.numpy(), err_msg=name)


def test_batch_norm_training_mode_and_gradients_after_update():
    torch.manual_seed(1)
    model = ConvBN().eval()
    port = porter.convert(model, _images(16))
    _train(model, _images, 16)
    port.load_torch_state_dict(model.state_dict())
    report = porter.validate(model, port, [_images(18)[0]], grads=True)
    assert report.ok, report
    x = _images(16)
    model.train(), port.train()
    assert_matches(port, model, x)  # batch statistics, and the running ones updated from the loaded values
    np.testing.assert_allclose(np.array(port.features[1].running_mean), model.features[1].running_mean.numpy(),
                               rtol=1e-5, atol=1e-6)
    assert int(port.features[1].num_batches_tracked) == int(model.features[1].num_batches_tracked) == 4


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_port_keeps_its_dtype(dtype):
    torch.manual_seed(2)
    model = ConvBN().eval()
    if dtype == "float64":
        model = model.double()
    x = (torch.randn(2, 3, 16, 16, dtype=model.fc.weight.dtype),)
    port = porter.convert(model, x, dtype=None if dtype == "float64" else dtype)
    _train(model, lambda n: (torch.randn(2, 3, n, n, dtype=model.fc.weight.dtype),), 16)
    port.load_torch_state_dict(model.state_dict())  # float32 (float64) tensors into a 16-bit (float64) port
    fresh = porter.convert(model, x, dtype=None if dtype == "float64" else dtype)  # conversion at B: the oracle
    got, want = _arrays(port), _arrays(fresh)
    assert got.keys() == want.keys()
    for name in got:
        assert port.named_arrays()[name].dtype == fresh.named_arrays()[name].dtype, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert port.dtype == dtype
    if dtype == "float64":
        assert_matches(port, model, x)


def test_bfloat16_and_strided_tensors_load_exactly():
    """bfloat16 torch tensors (numpy has no bfloat16) into a bfloat16 port, and non-contiguous tensors."""
    torch.manual_seed(18)
    model = GroupedNet().eval().to(torch.bfloat16)
    x = (torch.randn(2, 4, 7, 8, dtype=torch.bfloat16),)
    port = porter.convert(model, x)
    assert port.named_arrays()["grouped.weight"].dtype == mx.bfloat16
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
    state = {k: v.transpose(0, 1).contiguous().transpose(0, 1) if v.ndim > 1 else v
             for k, v in model.state_dict().items()}
    assert not state["grouped.weight"].is_contiguous()
    port.load_torch_state_dict(state)
    got, want = _arrays(port), _arrays(porter.convert(model, x))
    for name in want:
        assert port.named_arrays()[name].dtype == mx.bfloat16, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_float16_port_takes_full_precision_after_astype():
    torch.manual_seed(3)
    model = ConvBN().eval()
    half = porter.convert(model, _images(16), dtype="float16")
    _train(model, _images, 16)
    full = half.astype("float32")
    full.load_torch_state_dict(model.state_dict())
    assert full.dtype == "float32" and half.dtype == "float16"
    assert_matches(full, model, _images(20))


@pytest.mark.parametrize("given", ["first", "alias", "both"])
def test_tied_weight_loads_from_either_name(given):
    model = gpt2_small(seed=4).eval()
    ids = torch.randint(0, 97, (2, 9))
    port = porter.convert(model, (ids,))
    assert port.tied_weights == {"lm_head.weight": "transformer.wte.weight"}
    with torch.no_grad():
        model.transformer.wte.weight.mul_(1.5).add_(0.1)
        model.transformer.h[0].attn.c_attn.weight.normal_()
    state = model.state_dict()
    if given == "first":
        del state["lm_head.weight"]
    elif given == "alias":
        del state["transformer.wte.weight"]
    assert port.load_torch_state_dict(state) == LoadResult([], [])
    for n in (9, 13):
        assert_matches(port, model, (torch.randint(0, 97, (2, n)),))


def test_tied_names_with_different_values_are_refused_and_nothing_changes():
    model = gpt2_small(seed=5).eval()
    port = porter.convert(model, (torch.randint(0, 97, (2, 9)),))
    before = _arrays(port)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["transformer.h.0.attn.c_attn.weight"] += 1  # a valid change, before the conflict in iteration order
    state["lm_head.weight"] = state["lm_head.weight"] + 1e-3
    with pytest.raises(WeightsUpdateError, match="'transformer.wte.weight' and 'lm_head.weight'.*different"):
        port.load_torch_state_dict(state)
    after = _arrays(port)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(11, 8)
        self.lm_head = nn.Linear(8, 11, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, ids):
        return self.lm_head(torch.tanh(self.wte(ids)))


def test_non_finite_weights_load_and_propagate_as_in_torch():
    torch.manual_seed(19)
    model = TinyLM().eval()
    port = porter.convert(model, (torch.randint(0, 11, (2, 5)),))
    with torch.no_grad():
        model.wte.weight[3, 2] = float("nan")
        model.wte.weight[5, 1] = float("inf")
    state = model.state_dict()  # both tied names, NaN in both: the same value
    assert state["lm_head.weight"].isnan().any()
    assert port.load_torch_state_dict(state) == LoadResult([], [])
    ids = torch.tensor([[3, 5, 0, 1], [2, 3, 4, 5]])
    assert np.isnan(run_ported(port, (ids,))[0]).any()
    assert_matches(port, model, (ids,))


def test_neither_tied_name_is_reported_missing_under_both_names():
    model = gpt2_small(seed=6).eval()
    port = porter.convert(model, (torch.randint(0, 97, (2, 9)),))
    state = model.state_dict()
    del state["transformer.wte.weight"], state["lm_head.weight"]
    result = port.load_torch_state_dict(state, strict=False)
    assert result == LoadResult(["transformer.wte.weight", "lm_head.weight"], [])


def test_strict_false_loads_what_matches_and_reports_the_rest():
    torch.manual_seed(7)
    model = ConvBN().eval()
    port = porter.convert(model, _images(16))
    old_fc = np.array(port.fc.weight)
    _train(model, _images, 16)
    state = model.state_dict()
    del state["fc.weight"]
    state["extra.weight"] = torch.zeros(3)
    state["features.9.bias"] = torch.zeros(3)
    result = port.load_torch_state_dict(state, strict=False)
    assert result.missing_keys == ["fc.weight"]
    assert sorted(result.unexpected_keys) == ["extra.weight", "features.9.bias"]
    np.testing.assert_array_equal(np.array(port.fc.weight), old_fc)  # kept
    np.testing.assert_array_equal(np.array(port.fc.bias), model.fc.bias.detach().numpy())  # loaded
    np.testing.assert_array_equal(np.array(port.features[0].weight),
                                  model.features[0].weight.detach().permute(0, 2, 3, 1).numpy())  # NHWC, loaded


def test_strict_mismatch_lists_every_key_and_changes_nothing():
    torch.manual_seed(8)
    model = ConvBN().eval()
    port = porter.convert(model, _images(16))
    before = _arrays(port)
    _train(model, _images, 16)
    state = model.state_dict()
    del state["fc.bias"], state["features.1.running_var"]
    state["stray"] = torch.zeros(1)
    with pytest.raises(WeightsUpdateError, match="nothing was loaded") as info:
        port.load_torch_state_dict(state)
    assert info.value.missing_keys == ["features.1.running_var", "fc.bias"]
    assert info.value.unexpected_keys == ["stray"]
    assert "'features.1.running_var'" in str(info.value) and "'stray'" in str(info.value)
    after = _arrays(port)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)


@pytest.mark.parametrize("strict", [True, False])
def test_shape_mismatch_names_key_and_shapes_and_changes_nothing(strict):
    torch.manual_seed(9)
    model = ConvBN(classes=10).eval()
    port = porter.convert(model, _images(16))
    before = _arrays(port)
    other = ConvBN(classes=5)  # a different head: every other weight fits (and differs)
    with pytest.raises(WeightsUpdateError, match=r"size mismatch for 'fc.weight': the state_dict has shape "
                                                 r"\(5, 16\) but the port holds \(10, 16\)"):
        port.load_torch_state_dict(other.state_dict(), strict=strict)
    after = _arrays(port)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)
    assert_matches(port, model, _images(16))


def test_non_persistent_buffers_and_constants_stay(tmp_path):
    torch.manual_seed(10)
    model = RotaryConstant().eval()
    x = (torch.randn(3, 4),)
    port = porter.convert(model, x)
    assert port.graph["params"]["scale"]["state_dict"] is False
    constants = [n for n, r in port.graph["params"].items() if n not in ("scale", "proj.weight", "proj.bias")]
    assert len(constants) == 1 and port.graph["params"][constants[0]]["state_dict"] is False
    assert "scale" not in model.state_dict()
    with torch.no_grad():
        model.proj.weight.normal_()
    assert port.load_torch_state_dict(model.state_dict()) == LoadResult([], [])
    assert_matches(port, model, x)
    porter.save(port, tmp_path / "m")
    loaded = porter.load(tmp_path / "m")  # the record survives save/load
    with torch.no_grad():
        model.proj.bias.normal_()
    assert loaded.load_torch_state_dict(model.state_dict()) == LoadResult([], [])
    assert_matches(loaded, model, x)
    # given anyway: unexpected, as torch reports it, and not loaded
    state = dict(model.state_dict(), scale=torch.zeros(4))
    assert loaded.load_torch_state_dict(state, strict=False) == LoadResult([], ["scale"])
    assert_matches(loaded, model, x)


def test_torchscript_port_follows_the_script_modules_state_dict():
    """TorchScript keeps no buffer persistence: a scripted module's ``state_dict()`` holds the non-persistent
    buffer, so its port expects it; the Python module's ``state_dict()`` lacks it (missing, kept)."""
    torch.manual_seed(11)
    model = Rotary().eval()
    x = (torch.randn(3, 4),)
    scripted = torch.jit.script(model)
    port = porter.convert(scripted, x)
    with torch.no_grad():
        model.proj.weight.normal_()  # the script module shares the parameters
    assert port.load_torch_state_dict(scripted.state_dict()) == LoadResult([], [])
    assert_matches(port, model, x)
    with torch.no_grad():
        model.proj.bias.normal_()
    assert port.load_torch_state_dict(model.state_dict(), strict=False) == LoadResult(["scale"], [])
    assert_matches(port, model, x)


def test_missing_batch_norm_counter_is_kept_as_torch_keeps_it():
    torch.manual_seed(12)
    model = ConvBN().eval()
    port = porter.convert(model, _images(16))
    _train(model, _images, 16)
    state = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    reference = ConvBN()
    assert reference.load_state_dict(state).missing_keys == []  # torch's rule
    assert port.load_torch_state_dict(state) == LoadResult([], [])
    assert int(port.features[1].num_batches_tracked) == 0
    assert_matches(port, model, _images(16))


def test_save_and_load_after_update(tmp_path):
    torch.manual_seed(13)
    model = ConvBN().eval()
    port = porter.convert(model, _images(16))
    porter.save(port, tmp_path / "a")
    _train(model, _images, 16)
    result = porter.update_weights(tmp_path / "a", model.state_dict())
    assert (result.missing_keys, result.unexpected_keys) == ([], [])
    porter.save(result.model, tmp_path / "b")
    loaded = porter.load(tmp_path / "b")
    for size in (16, 21):
        assert_matches(loaded, model, _images(size))
    assert not _matches(porter.load(tmp_path / "a"), model, _images(16))  # the first folder is untouched


def test_update_weights_reads_checkpoint_files(tmp_path):
    torch.manual_seed(14)
    model = ConvBN().eval()
    port = porter.convert(model, _images(16))
    _train(model, _images, 16)
    torch.save({"epoch": 3, "state_dict": {f"module.{k}": v for k, v in model.state_dict().items()}},
               tmp_path / "ckpt.pt")
    result = porter.update_weights(port, tmp_path / "ckpt.pt")
    assert result.model is port and result.notes  # the wrapper and prefix are noted
    assert_matches(port, model, _images(16))
    from safetensors.torch import save_file

    with torch.no_grad():
        model.fc.weight.normal_()
    save_file(model.state_dict(), str(tmp_path / "w.safetensors"))
    porter.update_weights(port, str(tmp_path / "w.safetensors"))
    assert_matches(port, model, _images(16))


@pytest.mark.parametrize("fmt", ["torchscript", "export"])
def test_update_weights_reads_model_files_state_dict(tmp_path, fmt):
    torch.manual_seed(20)
    model = ConvBN().eval()
    port = porter.convert(model, _images(16))
    _train(model, _images, 16)
    path = tmp_path / "model.bin"  # the format comes from the bytes, not the name
    if fmt == "torchscript":
        torch.jit.save(torch.jit.trace(model, _images(16)), path)
    else:
        torch.export.save(torch.export.export(model, _images(16)), path)
    result = porter.update_weights(port, path)
    assert (result.missing_keys, result.unexpected_keys) == ([], [])
    assert any("state_dict" in note for note in result.notes)
    assert_matches(port, model, _images(20))


def test_a_replaced_layer_is_refused_by_name():
    torch.manual_seed(21)
    model = ConvBN().eval()
    port = porter.convert(model, _images(16))
    import mlx.nn as mnn

    port.fc = mnn.Identity()
    with pytest.raises(WeightsUpdateError, match="no longer holds an array for 'fc.(weight|bias)'"):
        port.load_torch_state_dict(model.state_dict())


def test_quantized_port_is_refused():
    from porter.layers import quantize_model

    torch.manual_seed(15)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8)).eval()
    port = porter.convert(model, (torch.randn(2, 64),))
    quantize_model(port, group_size=32, bits=8)
    before = _arrays(port)
    with pytest.raises(WeightsUpdateError, match=r"quantized layers \(0, 2\).*quantize it again"):
        port.load_torch_state_dict(model.state_dict())
    after = _arrays(port)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name], err_msg=name)


@pytest.mark.parametrize("value, message", [
    ("text", "is a str, not a tensor"),
    (np.array([["a"] * 16] * 5), "is an array of <U1, not numbers"),
    (np.empty((5, 16), dtype=object), "is an array of object, not numbers"),
    (torch.zeros(5, 16).to_sparse(), "is a sparse tensor"),
    (torch.empty(5, 16, device="meta"), "is a meta tensor"),
])
def test_bad_values_are_refused_by_key(value, message):
    torch.manual_seed(16)
    model = ConvBN().eval()
    port = porter.convert(model, _images(16))
    before = _arrays(port)
    state = dict(model.state_dict(), **{"fc.weight": value})
    with pytest.raises(WeightsUpdateError, match=f"'fc.weight' {message}"):
        port.load_torch_state_dict(state)
    for name, array in _arrays(port).items():
        np.testing.assert_array_equal(array, before[name], err_msg=name)


def test_bad_arguments():
    port = porter.convert(ConvBN().eval(), _images(16))
    with pytest.raises(TypeError, match="'state_dict' must be a mapping"):
        port.load_torch_state_dict([("fc.weight", torch.zeros(5, 16))])
    with pytest.raises(TypeError, match="'strict' must be a bool"):
        port.load_torch_state_dict({}, strict="yes")
    with pytest.raises(WeightsUpdateError, match="a key of 'state_dict' is a int"):
        port.load_torch_state_dict({0: torch.zeros(1)}, strict=False)
    with pytest.raises(TypeError, match="'target' must be a PortedModel"):
        porter.update_weights(3, {})


def test_numpy_and_mlx_values_load_like_tensors():
    torch.manual_seed(17)
    model = GroupedNet().eval()
    x = (torch.randn(2, 4, 7, 8),)
    port = porter.convert(model, x)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
    state = {k: (v.numpy() if i % 2 else mx.array(v.numpy())) for i, (k, v) in enumerate(model.state_dict().items())}
    port.load_torch_state_dict(state)
    assert_matches(port, model, x)
    assert run_ported(port, x)[0].dtype == np.float32


class WithUnusedState(nn.Module):
    """State the forward never reads: an auxiliary head (parameters) and a persistent buffer."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.bn = nn.BatchNorm1d(3)
        self.aux_head = nn.Linear(4, 2)
        self.register_buffer("calibration", torch.randn(3))

    def forward(self, x):
        return self.bn(self.fc(x))


def _source(model, frontend, x):
    if frontend == "script":
        return torch.jit.script(model)
    if frontend == "trace":
        return torch.jit.trace(model, x)
    if frontend == "pt2":
        return torch.export.export(model, x, strict=False)
    return model


@pytest.mark.parametrize("frontend", ["module", "pt2", "script", "trace"])
def test_state_the_forward_never_reads_round_trips_strictly(frontend, tmp_path):
    """Every frontend keeps every ``state_dict`` entry (torch.export lifts them all; the TorchScript frontend keeps
    what the forward never reads too): the model's ``state_dict`` loads strictly, and ``torch_parameters()`` loads
    back into the model strictly, before and after save/load."""
    torch.manual_seed(20)
    model = WithUnusedState().eval()
    x = (torch.randn(5, 4),)
    port = porter.convert(_source(model, frontend, x), x)
    params = port.graph["params"]
    assert {n: params[n]["trainable"] for n in ("aux_head.weight", "aux_head.bias", "calibration")} == {
        "aux_head.weight": True, "aux_head.bias": True, "calibration": False}
    for current in (port, None):
        if current is None:
            porter.save(port, tmp_path / "m")
            current = porter.load(tmp_path / "m")
        twin = WithUnusedState()
        twin.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in current.torch_parameters().items()},
                             strict=True)
        for key, value in model.state_dict().items():
            assert torch.equal(twin.state_dict()[key], value), key
        with torch.no_grad():  # new weights everywhere, the unused state included
            for tensor in list(model.parameters()) + [model.calibration, model.bn.running_mean]:
                tensor.copy_(torch.randn_like(tensor))
        assert current.load_torch_state_dict(model.state_dict(), strict=True) == LoadResult([], [])
        assert_matches(current, model, x)
        back = current.torch_parameters()
        assert np.array_equal(np.array(back["aux_head.weight"]), model.aux_head.weight.detach().numpy())
        assert np.array_equal(np.array(back["calibration"]), model.calibration.numpy())
