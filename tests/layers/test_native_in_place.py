"""Native elementwise kernels write into their input's buffer when nothing else holds it (``launch_in_place`` in
``layers/csrc/ops_common.h``; issue 15, run-time memory): eval batch norm's channel affine (+ ReLU), ReLU and the
forward activations. Torch is the oracle for the values; an input still held (by Python, by a second consumer, by a
gradient) keeps its values; a chain of such ops holds about one buffer live instead of one per op.
"""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

from porter.compare import assert_close
from porter.layers import _native

pytestmark = pytest.mark.native_only  # tests/layers/conftest.py: the native variant only

SHAPE = (2, 37, 29, 48)  # rows and channels that divide no chunk size


def _ops():
    """(name, porter native op, torch reference) over channels-last input."""
    g = torch.Generator().manual_seed(3)
    alpha, beta = torch.randn(SHAPE[-1], generator=g), torch.randn(SHAPE[-1], generator=g)
    mxa, mxb = mx.array(alpha.numpy()), mx.array(beta.numpy())
    return [
        ("affine", lambda a: _native.channel_affine(a, mxa, mxb), lambda t: t * alpha + beta),
        ("affine_relu", lambda a: _native.channel_affine(a, mxa, mxb, relu=True), lambda t: TF.relu(t * alpha + beta)),
        ("relu", _native.relu, TF.relu),
        ("gelu", lambda a: _native.activation(a, "gelu"), TF.gelu),
        ("sigmoid", lambda a: _native.activation(a, "sigmoid"), torch.sigmoid),
        ("silu", lambda a: _native.activation(a, "silu"), TF.silu),
    ]


def _x(seed=0):
    x = np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32) * 3
    x.reshape(-1)[:4] = [np.nan, 1e30, -1e30, -0.0]  # (torch's gelu(inf) is NaN, Porter's inf: not this file's point)
    return x


@pytest.mark.parametrize("index", range(6), ids=[name for name, _, _ in _ops()])
def test_in_place_values_and_held_inputs(index):
    _, op, ref = _ops()[index]
    x = _x()
    expected = ref(torch.from_numpy(x) * 2).numpy()
    # donated: the scaled input is an intermediate nobody else holds
    got = op(mx.array(x) * 2)
    mx.eval(got)
    assert_close(np.array(got), expected, atol=1e-6)
    # held by Python (evaluated and unevaluated): the input keeps its values
    for evaluate in (True, False):
        held = mx.array(x) * 2
        if evaluate:
            mx.eval(held)
        out = op(held)
        mx.eval(out)
        np.testing.assert_array_equal(np.array(held), x * 2)
        np.testing.assert_array_equal(np.array(out), np.array(got))
    # two consumers of one intermediate: whichever runs first must not overwrite the other's input
    mid = mx.array(x) * 2
    a, b = op(mid), mid + 1
    del mid
    mx.eval(a, b)
    np.testing.assert_array_equal(np.array(a), np.array(got))
    np.testing.assert_array_equal(np.array(b), x * 2 + 1)


@pytest.mark.parametrize("index", [0, 2, 3], ids=["affine", "relu", "gelu"])
def test_in_place_gradient_keeps_the_input(index):
    _, op, ref = _ops()[index]
    x = _x(1)
    x[np.isnan(x) | (np.abs(x) > 1e3)] = 0.5  # finite, so the gradients compare
    t = torch.from_numpy(x).requires_grad_()
    ref(t * 2).square().sum().backward()
    grad = mx.grad(lambda a: op(a * 2).square().sum())(mx.array(x))
    assert_close(np.array(grad), t.grad.numpy(), atol=1e-4)


def test_chain_holds_about_one_buffer():
    """Five elementwise ops on a 32 MB intermediate: with the buffer donated along the chain MLX's live peak stays
    near one buffer above the input; allocating each output held six (measured before launch_in_place: MLX
    allocates outputs ahead of compute)."""
    x = mx.array(np.random.default_rng(2).standard_normal((8, 128, 128, 64)).astype(np.float32))
    mx.eval(x)
    nbytes = x.nbytes
    alpha, beta = mx.ones((64,)) * 0.5, mx.zeros((64,)) + 0.1
    mx.eval(alpha, beta)

    def chain():
        y = x * 1.5
        y = _native.channel_affine(y, alpha, beta, relu=True)
        y = _native.activation(y, "gelu")
        y = _native.relu(y)
        y = _native.activation(y, "sigmoid")
        return _native.channel_affine(y, alpha, beta)

    mx.eval(chain())  # warm-up
    base = mx.get_active_memory()
    mx.reset_peak_memory()
    out = chain()
    mx.eval(out)
    live = mx.get_peak_memory() - base
    assert live <= 1.5 * nbytes, f"live peak {live / nbytes:.2f}x one buffer"
    ref = torch.sigmoid(TF.relu(TF.gelu(TF.relu(torch.from_numpy(np.array(x)) * 1.5 * 0.5 + 0.1))))
    assert_close(np.array(out), (ref * 0.5 + 0.1).numpy(), atol=1e-6)


@pytest.mark.parametrize("index", [2, 3], ids=["relu", "gelu"])
def test_strided_input_is_written_into_its_private_copy(index):
    """A strided input (a transposed view) is copied row-contiguous inside the op; the output takes that copy's
    buffer instead of a third one: the op's live peak is one buffer above the held input, not two (two before:
    the copy and a fresh output)."""
    _, op, ref = _ops()[index]
    x = mx.array(np.random.default_rng(4).standard_normal((8, 64, 128, 128)).astype(np.float32))
    mx.eval(x)
    nbytes = x.nbytes
    mx.eval(op(x.transpose(0, 2, 3, 1)))  # warm-up
    base = mx.get_active_memory()
    mx.reset_peak_memory()
    out = op(x.transpose(0, 2, 3, 1))
    mx.eval(out)
    live = mx.get_peak_memory() - base
    assert live <= 1.25 * nbytes, f"live peak {live / nbytes:.2f}x one buffer"
    expected = ref(torch.from_numpy(np.array(x)).permute(0, 2, 3, 1)).numpy()
    assert_close(np.array(out), expected, atol=1e-6)
    np.testing.assert_array_equal(np.array(x), np.array(mx.array(np.array(x))))  # the held input kept its values
