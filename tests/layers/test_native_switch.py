"""porter.layers._native.use_native switches every layer from its next call, as a call or as a context manager,
even for a conv whose Winograd weight transform is already cached."""

import mlx.core as mx
import numpy as np
import pytest
import torch

import porter.layers as L
from porter.layers import _native
from tests.helpers import mx_to_numpy, torch_to_mx


@pytest.mark.native_only
def test_plain_call_switches_and_context_restores():
    torch.manual_seed(0)
    ref = torch.nn.Conv2d(32, 32, 3, padding=1)
    conv = L.Conv2d(32, 32, 3, padding=1)
    conv.load_weights([("weight", mx.array(ref.weight.detach().permute(0, 2, 3, 1).numpy())),
                       ("bias", mx.array(ref.bias.detach().numpy()))])
    x = torch.randn(1, 32, 16, 16)
    xm = torch_to_mx(x, True)
    expected = ref(x).detach().numpy()
    with _native.use_native(False):
        pure = np.array(conv(xm))
    native = np.array(conv(xm))  # Winograd: its weight transform is now cached
    assert not np.array_equal(native, pure), "the two paths should round differently"
    previous = _native._state["enabled"]
    try:
        _native.use_native(False)  # a plain call: switched for good
        assert np.array_equal(np.array(conv(xm)), pure)
        assert not _native.active()
        with _native.use_native(True):
            assert np.array_equal(np.array(conv(xm)), native)
        assert np.array_equal(np.array(conv(xm)), pure)  # the block gave back the plain call's setting
    finally:
        _native._state["enabled"] = previous
    for got in (pure, native):
        np.testing.assert_allclose(mx_to_numpy(mx.array(got), True), expected, rtol=1e-4, atol=1e-4)


def test_argument_must_be_bool():
    with pytest.raises(TypeError, match="'enabled' must be a bool"):
        _native.use_native(1)
