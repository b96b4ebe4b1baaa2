"""nn.LSTM / nn.GRU / nn.RNN through the converter (ATen's lstm / gru / rnn_tanh / rnn_relu), against torch on the
same data: layers, directions, batch_first, proj_size, no biases, given states, unbatched input, a second batch
size, float64, gradients to the input and to the parameters under torch's names."""

import mlx.core as mx
import mlx.nn as mnn
import numpy as np
import pytest
import torch
import torch.nn as nn
from mlx.utils import tree_flatten

import porter
from tests.converter_check import run_ported

torch.manual_seed(0)


def _randomise(model):
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.6, 0.6)  # torch's init is +-1/sqrt(H): wider, so every gate saturates somewhere
    return model


class Stack(nn.Module):
    """A speech-style stack: bidirectional 2-layer LSTM with projections, a GRU, a ReLU RNN without biases."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 6, num_layers=2, batch_first=True, bidirectional=True, proj_size=3)
        self.gru = nn.GRU(6, 5, batch_first=True)
        self.rnn = nn.RNN(5, 4, nonlinearity="relu", bias=False)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        z, hg = self.gru(y)
        w, hr = self.rnn(z.transpose(0, 1))
        return self.head(w), y, h, c, hg, hr


def _close(actual, expected, rtol=1e-5, atol=1e-6):
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        e = e.detach().numpy()
        assert a.shape == e.shape and a.dtype == e.dtype, f"output {i}"
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=f"output {i}")


def test_recurrent_stack_matches_torch_at_other_batch_sizes_and_lengths():
    """torch's capture would fix the sequence length (its fake LSTM runs the steps in a Python loop); the capture
    states the recurrent ops' shapes instead (``converters/capture_rnn.py``), so the port runs any length."""
    model = _randomise(Stack()).eval()
    sets = [torch.randn(2, 7, 4), torch.randn(3, 7, 4), torch.randn(2, 5, 4), torch.randn(1, 12, 4),
            torch.randn(3, 1, 4)]
    ported = porter.convert(model, (sets[0],), io_layout="torch", dynamic="auto")
    assert {"input": 0, "axis": 1} in ported.dynamic_dims
    for x in sets:
        with torch.no_grad():
            expected = model(x)
        _close(run_ported(ported, (x,)), expected)
    # the port keeps torch's names for the recurrent weights
    names = {name for name, _ in tree_flatten(ported.parameters())}
    assert {"lstm.weight_ih_l0", "lstm.weight_hr_l1_reverse", "gru.bias_hh_l0", "rnn.weight_hh_l0"} <= names


class WithStates(nn.Module):
    def __init__(self, mode, **kw):
        super().__init__()
        self.mode = mode
        self.cell = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[mode](3, 5, **kw)

    def forward(self, x, h0, c0):
        if self.mode == "lstm":
            return self.cell(x, (h0, c0))
        return self.cell(x, h0)


@pytest.mark.parametrize("mode,kw", [("lstm", dict(num_layers=2, bias=False)), ("gru", dict(bidirectional=True)),
                                     ("rnn", dict(num_layers=3, nonlinearity="tanh")),
                                     ("lstm", dict(bidirectional=True, proj_size=2))])
def test_given_states_each_mode(mode, kw):
    model = _randomise(WithStates(mode, **kw)).eval()
    layers = kw.get("num_layers", 1) * (2 if kw.get("bidirectional") else 1)
    out = kw.get("proj_size", 5)
    inputs = (torch.randn(6, 2, 3), torch.randn(layers, 2, out), torch.randn(layers, 2, 5))
    ported = porter.convert(model, inputs, io_layout="torch")
    with torch.no_grad():
        expected = torch.utils._pytree.tree_leaves(model(*inputs))
    _close(run_ported(ported, inputs), expected)


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn"])
def test_given_states_at_another_length_and_batch_through_save(mode, tmp_path):
    """Time-major, given states: the batch and the length both stay free, also after a save/load round trip."""
    model = _randomise(WithStates(mode, num_layers=2, bidirectional=True)).eval()

    def inputs(t, n):
        return torch.randn(t, n, 3), torch.randn(4, n, 5), torch.randn(4, n, 5)

    ported = porter.convert(model, inputs(6, 2), io_layout="torch")
    porter.save(ported, tmp_path / mode)
    loaded = porter.load(tmp_path / mode)
    for t, n in ((6, 2), (9, 3), (2, 1)):
        xs = inputs(t, n)
        with torch.no_grad():
            expected = torch.utils._pytree.tree_leaves(model(*xs))
        _close(run_ported(ported, xs), expected)
        _close(run_ported(loaded, xs), expected)


def test_capture_restores_torchs_recurrent_kernels():
    """The shape-only kernels live for one capture: afterwards torch's own LSTM runs (and exports as before)."""
    from porter.converters.capture_rnn import recurrent_ops

    before = [dict(op.py_kernels) for op in recurrent_ops()]
    model = _randomise(nn.LSTM(3, 4)).eval()
    porter.convert(model, (torch.randn(5, 2, 3),), io_layout="torch")
    assert [dict(op.py_kernels) for op in recurrent_ops()] == before
    x = torch.randn(4, 2, 3)
    with torch.no_grad():
        expected, _ = model(x)
        got, _ = torch.export.export(model, (x,)).module()(x)
    torch.testing.assert_close(got, expected)


class CachesATensor(nn.Module):
    """An LSTM whose forward also stores a tensor of its own on the module (torch warns about that one)."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 5, batch_first=True, bidirectional=True)

    def forward(self, x):
        y = self.lstm(x)[0]
        self.last = y.detach()
        return y


def test_capture_keeps_quiet_about_rnn_flat_weights_only():
    """Torch's "tensor attributes ... were assigned during export" warning names every ``_flat_weights`` entry of
    every recurrent module on each capture (its own bookkeeping); conversion silences that one, but a user's tensor
    attribute assigned in the forward is still reported (torch's one warning then lists it with the entries)."""
    import warnings

    x = torch.randn(2, 7, 4)
    for model, user_attribute in ((Stack(), None), (CachesATensor(), "self.last")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            porter.convert(model.eval(), (x,), io_layout="torch")
        assigned = [str(w.message) for w in caught if "assigned during export" in str(w.message)]
        if user_attribute is None:
            assert assigned == []
        else:
            assert len(assigned) == 1 and f"{user_attribute}," in assigned[0], assigned


def test_unbatched_and_float64():
    model = _randomise(nn.GRU(3, 4, num_layers=2)).eval()
    x = torch.randn(5, 3)  # (T, I): nn.GRU adds and removes the batch dim around the op
    ported = porter.convert(model, (x,), io_layout="torch")
    with torch.no_grad():
        expected = model(x)
    _close(run_ported(ported, (x,)), expected)

    model64 = _randomise(nn.LSTM(3, 4, batch_first=True)).double().eval()
    x64 = torch.randn(2, 5, 3, dtype=torch.float64)
    ported = porter.convert(model64, (x64,), io_layout="torch")
    with torch.no_grad():
        expected = torch.utils._pytree.tree_leaves(model64(x64))
    _close(run_ported(ported, (x64,)), expected, rtol=1e-10, atol=1e-12)


def test_gradients_to_input_and_parameters():
    model = _randomise(Stack()).eval()
    x = torch.randn(2, 6, 4)
    ported = porter.convert(model, (x,), io_layout="torch")
    weight = torch.randn(6, 2, 2)

    xt = x.clone().requires_grad_()
    (model(xt)[0] * weight).sum().backward()
    torch_grads = {name: p.grad.numpy() for name, p in model.named_parameters()}

    w = mx.array(weight.numpy())

    def loss(m, xm):
        return (m(xm)[0] * w).sum()

    xm = mx.array(x.numpy())
    _, grads = mnn.value_and_grad(ported, loss)(ported, xm)
    flat = dict(tree_flatten(grads))
    assert set(torch_grads) <= set(flat)
    for name, g in torch_grads.items():
        np.testing.assert_allclose(np.array(flat[name]), g, rtol=1e-4, atol=1e-5, err_msg=name)
    dx = mx.grad(lambda v: loss(ported, v))(xm)
    np.testing.assert_allclose(np.array(dx), xt.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_malformed_recurrent_node_is_a_clear_error():
    """A graph (hostile or mistaken) whose parameter list does not fit the layer count."""
    from porter.converters.ops.recurrent import k_rnn

    x = mx.zeros((4, 1, 3))
    w_ih, w_hh = mx.zeros((20, 3)), mx.zeros((20, 5))
    with pytest.raises(ValueError, match="parameter tensors do not fit 2 layer"):
        k_rnn(x, [mx.zeros((2, 1, 5)), mx.zeros((2, 1, 5))], [w_ih, w_hh], mode="lstm", num_layers=2,
              bidirectional=False, batch_first=False, has_biases=False)
    with pytest.raises(ValueError, match="weight_ih has shape"):
        k_rnn(x, [mx.zeros((1, 1, 5)), mx.zeros((1, 1, 5))], [mx.zeros((20, 4)), w_hh], mode="lstm", num_layers=1,
              bidirectional=False, batch_first=False, has_biases=False)
    with pytest.raises(ValueError, match="h0 has shape"):
        k_rnn(x, [mx.zeros((1, 2, 5)), mx.zeros((1, 1, 5))], [w_ih, w_hh], mode="lstm", num_layers=1,
              bidirectional=False, batch_first=False, has_biases=False)


def test_packed_sequence_is_a_capture_error_in_words():
    """torch.export cannot trace pack_padded_sequence: the conversion says so, with torch's error chained."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    class Packed(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(3, 4, batch_first=True)

        def forward(self, x, lengths):
            y, _ = self.lstm(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
            return pad_packed_sequence(y, batch_first=True)[0]

    with pytest.raises(porter.CaptureError, match="torch.export could not capture the model's forward") as info:
        porter.convert(Packed().eval(), (torch.randn(2, 5, 3), torch.tensor([5, 3])))
    assert info.value.__cause__ is not None


def test_recurrent_port_saves_and_loads_bit_exact(tmp_path):
    model = _randomise(Stack()).eval()
    x = torch.randn(2, 5, 4)
    ported = porter.convert(model, (x,), io_layout="torch")
    porter.save(ported, str(tmp_path / "rnn"))
    loaded = porter.load(str(tmp_path / "rnn"))
    xm = mx.array(x.numpy())
    for a, b in zip(ported(xm), loaded(xm)):
        np.testing.assert_array_equal(np.array(a), np.array(b))
