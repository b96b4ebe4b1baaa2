"""Constant folding at capture (``converters/capture_fold*.py``): calls whose inputs are all constants are evaluated
in torch at conversion and stored; constant boolean masks index by their positions. Torch is the oracle, run here:
each model at two input sizes (the batch dynamic), gradients to the inputs, both frontends where TorchScript can
express the model, save/load, and the cases that must NOT fold (parameters, persistent buffers, random ops, values
computed from the input, over the size limit)."""

import json

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn

import porter
from porter.converters import capture_fold
from porter.converters.registry import UnsupportedOpsError
from tests.converter_check import assert_matches, check_converted
from tests.converters.test_ops_math import _assert_input_grads

torch.manual_seed(0)


def _folded(ported) -> dict:
    return {name: record for name, record in ported.graph["params"].items() if name.startswith("_folded_")}


def _convert_both(model, example, *more, trace=True, script=False):
    """The port of ``model`` (torch.export) checked on every input set, and of its TorchScript forms."""
    ported = check_converted(model, example, *more)
    frontends = ([torch.jit.trace(model, example)] if trace else []) + ([torch.jit.script(model)] if script else [])
    for scripted in frontends:
        check_converted(scripted, example, *more)
    return ported


# ---------------------------------------------------------------------------------------------------- windows
class HammingSpectrogram(nn.Module):
    """An audio front end building its window in the forward."""

    def forward(self, wave):
        window = torch.hamming_window(32)
        spec = torch.stft(wave, 32, 8, window=window, return_complex=True)
        return torch.log1p(spec.abs() ** 2)


def test_stft_front_end_with_a_window_built_in_the_forward():
    ported = check_converted(HammingSpectrogram().eval(), torch.randn(2, 400), torch.randn(1, 513))
    folded = _folded(ported)
    assert any(record["torch_shape"] == [32] for record in folded.values())
    assert all(record["state_dict"] is False and not record["trainable"] for record in folded.values())


_WINDOWS = {
    "hann": lambda: torch.hann_window(16),
    "hamming": lambda: torch.hamming_window(16, periodic=False, alpha=0.5, beta=0.4),
    "blackman": lambda: torch.blackman_window(16),
    "kaiser": lambda: torch.kaiser_window(16, periodic=False, beta=8.0),
    "bartlett": lambda: torch.bartlett_window(16),
    "kaiser64": lambda: torch.kaiser_window(16, dtype=torch.float64),
}


class Windowed(nn.Module):
    def __init__(self, make):
        super().__init__()
        self.make = make

    def forward(self, x):
        w = self.make()
        return x * w.to(x.dtype), w


@pytest.mark.parametrize("name", sorted(_WINDOWS))
def test_every_window_folds_with_torchs_values_in_its_own_dtype(name):
    model = Windowed(_WINDOWS[name]).eval()
    ported = check_converted(model, torch.randn(3, 16), torch.randn(1, 16))
    assert _folded(ported)
    # the window itself as an output: torch's values exactly, in torch's dtype
    window, expected = np.array(ported(mx.zeros((2, 16)))[1]), _WINDOWS[name]().numpy()
    assert window.dtype == expected.dtype
    np.testing.assert_array_equal(window, expected)


def test_windows_fold_through_torchscript_trace_and_script():
    class Bank(nn.Module):
        def forward(self, x):
            return x * torch.blackman_window(16) + x * torch.kaiser_window(16) - torch.bartlett_window(16)

    _convert_both(Bank().eval(), torch.randn(2, 16), torch.randn(4, 16), script=True)


# ---------------------------------------------------------------------------------------------------- DLRM
class Interaction(nn.Module):
    """DLRM's dot interaction: every pair of feature vectors, the lower triangle taken by ``tril_indices``."""

    def __init__(self, dense=13, tables=4, dim=8):
        super().__init__()
        self.bottom = nn.Linear(dense, dim)
        self.embeddings = nn.ModuleList(nn.Embedding(10, dim) for _ in range(tables))
        self.count = tables + 1

    def forward(self, dense, sparse):
        x = self.bottom(dense)
        features = torch.stack([x] + [e(sparse[:, i]) for i, e in enumerate(self.embeddings)], dim=1)
        z = torch.bmm(features, features.transpose(1, 2))
        li, lj = torch.tril_indices(self.count, self.count, offset=-1)
        ui, uj = torch.triu_indices(self.count, self.count, offset=1)
        return torch.cat([x, z[:, li, lj], z[:, ui, uj] * 0.5], dim=1)


def test_dlrm_interaction_with_tril_indices_at_two_batch_sizes_with_gradients():
    model = Interaction().eval()
    inputs = [(torch.randn(b, 13), torch.randint(0, 10, (b, 4))) for b in (3, 6)]
    ported = _convert_both(model, *inputs)
    assert len(_folded(ported)) == 4  # the row and column indices of each triangle
    _assert_input_grads(ported, model, inputs[0])


# ---------------------------------------------------------------------------------------------------- positions
class RelativeBias(nn.Module):
    """Swin's relative-position index computed in the forward (meshgrid, in-place writes into views), indexing a
    learned table; plus a linspace position grid."""

    def __init__(self, window=4, heads=2):
        super().__init__()
        self.window = window
        self.table = nn.Parameter(torch.randn((2 * window - 1) ** 2, heads))

    def forward(self, x):
        w = self.window
        coords = torch.stack(torch.meshgrid(torch.arange(w), torch.arange(w), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += w - 1
        rel[:, :, 1] += w - 1
        rel[:, :, 0] *= 2 * w - 1
        index = rel.sum(-1)
        bias = self.table[index.view(-1)].view(w * w, w * w, -1).permute(2, 0, 1)
        grid = torch.stack(torch.meshgrid(torch.linspace(-1, 1, w * w), torch.linspace(0, 2, w * w),
                                          indexing="xy")).sum(0)
        return x + bias + grid


def test_relative_position_table_built_in_the_forward():
    model = RelativeBias().eval()
    inputs = [(torch.randn(b, 2, 16, 16),) for b in (2, 5)]
    ported = _convert_both(model, *inputs, trace=True)
    assert "table" in ported.graph["params"] and ported.graph["params"]["table"]["trainable"]
    _assert_input_grads(ported, model, inputs[1])


class RotaryNoGrad(nn.Module):
    """Llama-style rotary tables computed under ``torch.no_grad()`` in the forward (an exported region)."""

    @torch.no_grad()
    def tables(self):
        inv = 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8))
        freqs = torch.outer(torch.arange(6).float(), inv)
        return freqs.cos(), freqs.sin()

    def forward(self, x):  # (B, 6, 8)
        cos, sin = self.tables()
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


def test_constants_inside_a_no_grad_region_fold():
    model = RotaryNoGrad().eval()
    ported = check_converted(model, torch.randn(2, 6, 8), torch.randn(3, 6, 8))
    assert sorted(r["torch_shape"] for r in _folded(ported).values()) == [[6, 4], [6, 4]]
    _assert_input_grads(ported, model, (torch.randn(2, 6, 8),))


def test_a_constant_read_before_and_after_an_in_place_write():
    """Graph calls reading a folded tensor see it as of their place in the forward."""

    class Scaled(nn.Module):
        def forward(self, x):
            c = torch.arange(4.0)
            y = x + c
            c.mul_(3)
            return y * c

    _convert_both(Scaled().eval(), torch.randn(2, 4), torch.randn(5, 4), script=True)


def test_a_write_of_an_input_value_into_a_constant_tensor_is_not_folded():
    """A tensor built from constants but written with a value from the input stays in the graph (as before)."""

    class Written(nn.Module):
        def forward(self, x):
            buf = torch.zeros(3, 4)
            buf[1] = x.mean(0)
            return x + buf.sum(0) + buf[1:].mean()

    check_converted(Written().eval(), torch.randn(2, 4), torch.randn(6, 4))


class ShiftMask(nn.Module):
    """torchvision's Swin attention mask: ``x.new_zeros`` (x read for its dtype only) written band by band."""

    def forward(self, x):  # (B, 8, 8, C)
        mask = x.new_zeros((8, 8))
        count = 0
        for h in ((0, -4), (-4, -2), (-2, None)):
            for w in ((0, -4), (-4, -2), (-2, None)):
                mask[h[0]:h[1], w[0]:w[1]] = count
                count += 1
        return x + mask[None, :, :, None] + torch.ones_like(x[0]) * 0.5


def test_new_zeros_of_an_input_folds_with_its_writes():
    ported = _convert_both(ShiftMask().eval(), torch.randn(2, 8, 8, 3), torch.randn(5, 8, 8, 3))
    # the banded mask (viewed to (1, 8, 8, 1)); ones_like(x[0]) follows x's sizes: not folded
    assert [r["torch_shape"] for r in _folded(ported).values()] == [[1, 8, 8, 1]]


def test_torchscript_writes_from_the_input_into_folded_tensors():
    """A direct write into a folded tensor is recorded as before; a write through a view of one is refused (the
    write would not reach the tensor it views)."""

    class Direct(nn.Module):
        def forward(self, x):
            buf = torch.zeros(4)
            buf.add_(x.sum())
            return x + buf

    class ThroughView(nn.Module):
        def forward(self, x):
            buf = torch.zeros(2, 4)
            buf[0].add_(x.sum())
            return x + buf

    check_converted(torch.jit.trace(Direct().eval(), torch.randn(2, 4)), torch.randn(2, 4), torch.randn(3, 4))
    traced = torch.jit.trace(ThroughView().eval(), torch.randn(2, 4))
    with pytest.raises(NotImplementedError, match="into a view of a tensor built from constants"):
        porter.convert(traced, torch.randn(2, 4))


def test_cartesian_prod_folds():
    class Pairs(nn.Module):
        def forward(self, x):
            pairs = torch.cartesian_prod(torch.arange(3), torch.arange(4))
            return x[:, pairs[:, 0] * 4 + pairs[:, 1]] * 2

    _convert_both(Pairs().eval(), torch.randn(2, 12), torch.randn(3, 12), script=True)


class Combos(nn.Module):
    def forward(self, x):
        c = torch.combinations(torch.arange(5), 2)
        t = torch.combinations(torch.arange(4) * 2, 3, with_replacement=True)
        return x[:, c[:, 0]] - x[:, c[:, 1]], x[:, t].sum(-1)


def test_combinations_fold_in_every_frontend():
    _convert_both(Combos().eval(), torch.randn(2, 8), torch.randn(4, 8), script=True)


@pytest.mark.parametrize("n,r,replace", [(5, 2, False), (4, 1, False), (3, 4, False), (4, 0, False), (3, 3, True),
                                         (0, 2, True)])
def test_the_capture_kernel_of_combinations_is_torchs(n, r, replace):
    """During torch.export, ``combinations`` is stated by its input's length (capture_combinations.py)."""
    from porter.converters.capture_combinations import _by_length

    x = torch.randn(n)
    expected = torch.combinations(x, r, with_replacement=replace)
    got = _by_length(x, r, replace)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert torch.equal(got, expected)


def test_combinations_of_an_input_stay_refused():
    """Not a constant: torch's decomposition (a masked_select) is what the conversion sees, refused by name."""

    class Dynamic(nn.Module):
        def forward(self, x):
            return torch.combinations(x[0], 2)

    with pytest.raises(UnsupportedOpsError, match="masked_select.*size depends on the tensor's values"):
        porter.convert(Dynamic().eval(), torch.randn(2, 4))


# ---------------------------------------------------------------------------------------------------- masks
class MaskSelect(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("keep", torch.tensor([True, False, True, True, False, True, False]), persistent=False)
        self.register_buffer("grid", torch.rand(3, 4) > 0.4, persistent=False)

    def forward(self, x, y):
        literal = torch.tensor([False, True, True, False, True, True, True])
        return x[:, self.keep] * 2, x[:, literal].sum(1), y[:, self.grid], x[:, self.keep.nonzero().squeeze(1)]


def test_constant_mask_select_is_an_index_with_gradients():
    model = MaskSelect().eval()
    inputs = [(torch.randn(b, 7, 3), torch.randn(b, 3, 4, 2)) for b in (2, 5)]
    ported = check_converted(model, *inputs)
    positions = [r for r in _folded(ported).values() if r["dtype"] == "int64"]
    assert len(positions) == 5  # keep, literal, keep.nonzero() and the grid's two dims
    _assert_input_grads(ported, model, inputs[0])


class MaskWrite(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("keep", torch.tensor([True, False, True, True]), persistent=False)

    def forward(self, x, v):
        y = x * 1.5
        y[:, self.keep] = v  # several values: the mask's positions, a scatter
        z = x.clone()
        z[self.keep.expand(x.shape[0], 4)] = 2.0  # one value: stays a mask (a where)
        return y, z


def test_constant_mask_write_with_gradients():
    model = MaskWrite().eval()
    inputs = [(torch.randn(b, 4), torch.randn(b, 3)) for b in (2, 5)]
    ported = check_converted(model, *inputs)
    _assert_input_grads(ported, model, inputs[1])


class ValueSized(nn.Module):
    """Ops whose result size depends on values (refused on inputs): on constants, their sizes are known."""

    def forward(self, x):
        repeated = torch.repeat_interleave(x, torch.tensor([1, 0, 3]), dim=1)
        rows, cols = torch.where(torch.tensor([[True, False, True], [False, True, False]]))
        return repeated, x[:, rows] * x[:, cols]


def test_value_sized_ops_on_constants_fold():
    """torch.export only: TorchScript records ``repeat_interleave(x, repeats)`` as one call on the input (refused)."""
    model = ValueSized().eval()
    ported = check_converted(model, torch.randn(2, 3), torch.randn(5, 3))
    assert len(_folded(ported)) == 3
    _assert_input_grads(ported, model, (torch.randn(3, 3),))


def test_literal_mask_select_through_torchscript():
    class Literal(nn.Module):
        def forward(self, x):
            return x[:, torch.tensor([True, False, True, True])] + 1

    model = Literal().eval()
    check_converted(torch.jit.trace(model, torch.randn(2, 4, 3)), torch.randn(2, 4, 3), torch.randn(5, 4, 3))


def test_a_persistent_mask_stays_refused():
    """A persistent buffer is the user's state (``porter update`` changes it): its mask's count is not fixed."""

    class Persistent(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("keep", torch.tensor([True, False, True]))

        def forward(self, x):
            return x[:, self.keep]

    with pytest.raises(NotImplementedError, match="boolean masks give data-dependent shapes"):
        porter.convert(Persistent().eval(), torch.randn(2, 3))


# ---------------------------------------------------------------------------------------------------- not folded
class WindowFromState(nn.Module):
    """The same window arithmetic on a parameter and a persistent buffer: never folded, so updates reach the port."""

    def __init__(self):
        super().__init__()
        self.register_buffer("window", torch.hann_window(16))
        self.scale = nn.Parameter(torch.ones(16))

    def forward(self, x):
        return x * (self.window * 2 + 1) * self.scale.cumsum(0)


def test_parameters_and_persistent_buffers_are_not_folded_and_updates_reach_the_port():
    model = WindowFromState().eval()
    ported = check_converted(model, torch.randn(2, 16), torch.randn(3, 16))
    assert not _folded(ported)
    with torch.no_grad():
        model.window.copy_(torch.hamming_window(16))
        model.scale.mul_(torch.linspace(0.5, 2, 16))
    ported.load_torch_state_dict(model.state_dict())
    assert_matches(ported, model, (torch.randn(4, 16),))


def test_folded_constants_stay_out_of_the_state_dict_and_updates():
    model = Interaction().eval()
    ported = porter.convert(model, (torch.randn(2, 13), torch.randint(0, 10, (2, 4))), io_layout="torch")
    assert _folded(ported) and not set(_folded(ported)) & set(ported.torch_parameters())
    assert set(ported.torch_parameters()) == set(model.state_dict())
    with torch.no_grad():
        model.bottom.weight.mul_(-1)
    result = ported.load_torch_state_dict(model.state_dict())
    assert (result.missing_keys, result.unexpected_keys) == ([], [])
    assert_matches(ported, model, (torch.randn(3, 13), torch.randint(0, 10, (3, 4))))


def test_random_ops_are_not_folded():
    class Noisy(nn.Module):
        def forward(self, x):
            return x + torch.rand(4)

    with pytest.raises(UnsupportedOpsError, match="random"):
        porter.convert(Noisy().eval(), torch.randn(2, 4))


def test_a_random_op_feeding_a_fold_does_not_fold_in_train_mode():
    class Dropped(nn.Module):
        def forward(self, x):
            return x * nn.functional.dropout(torch.ones(4), 0.5, training=True)

    with pytest.raises(NotImplementedError, match="dropout in training mode is random"):
        porter.convert(Dropped().eval(), torch.randn(2, 4))


def test_a_value_from_a_dynamic_size_is_not_folded():
    class Positions(nn.Module):
        def forward(self, x):
            return x + torch.arange(x.shape[1], dtype=x.dtype)

    ported = check_converted(Positions().eval(), torch.randn(2, 6), torch.randn(3, 9))
    assert not _folded(ported)


def test_a_fold_over_the_size_limit_stays_a_graph_call(monkeypatch):
    """Over ``LIMIT_BYTES`` the call stays in the graph: converted as any call, or refused by name."""
    monkeypatch.setattr(capture_fold, "LIMIT_BYTES", 32)
    ported = check_converted(Windowed(lambda: torch.ones(16)).eval(), torch.randn(2, 16))  # 64 bytes: converted
    assert not _folded(ported)
    with pytest.raises(UnsupportedOpsError, match="hamming_window"):
        porter.convert(Windowed(lambda: torch.hamming_window(16)).eval(), torch.randn(2, 16))


def test_the_switch_turns_folding_off(monkeypatch):
    monkeypatch.setattr(capture_fold, "ENABLED", False)
    model = Windowed(lambda: torch.hamming_window(16)).eval()
    with pytest.raises(UnsupportedOpsError, match="hamming_window"):
        porter.convert(model, torch.randn(2, 16))
    with pytest.raises(UnsupportedOpsError, match="hamming_window"):
        porter.convert(torch.jit.trace(model, torch.randn(2, 16)), torch.randn(2, 16))
    with pytest.raises(UnsupportedOpsError, match="nonzero"):  # MaskSelect's x[:, keep.nonzero()]
        porter.convert(MaskSelect().eval(), (torch.randn(2, 7, 3), torch.randn(2, 3, 4, 2)))


# ---------------------------------------------------------------------------------------------------- artifacts
def test_folded_constants_survive_save_and_load_and_are_checked(tmp_path):
    model = HammingSpectrogram().eval()
    ported = porter.convert(model, torch.randn(2, 400), io_layout="torch")
    porter.save(ported, tmp_path / "port")
    loaded = porter.load(tmp_path / "port")
    assert set(_folded(loaded)) == set(_folded(ported))
    assert_matches(loaded, model, (torch.randn(3, 451),))
    graph = json.loads((tmp_path / "port" / "graph.json").read_text())
    name = next(iter(_folded(ported)))
    graph["params"][name]["torch_shape"] = [33]  # the stored window is 32 long
    (tmp_path / "port" / "graph.json").write_text(json.dumps(graph))
    with pytest.raises(ValueError, match=name):
        porter.load(tmp_path / "port")
