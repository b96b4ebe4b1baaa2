"""Window attention's partition and reverse at every map size torch runs (session 19).

A map padded to a multiple of the window, cut into windows by 6-d views, merged back by ``view(-1, ...)`` and
cropped (timm's DaViT, Swin-style ``window_reverse``): with every dim dynamic, the port refused maps of one window
per side, which torch runs. Two guards no model code made did it: Porter's own walk asked the capture's fake
``.contiguous()`` output whether it was contiguous (``capture_regions._contiguous_at_example``: the question
recorded ``Wp // (Wp // 4) != Wp`` in the shape env), and the C++ size inference of ``view(-1, ...)``, called
straight from the non-strict export's function mode, was taken for the model's code (``capture_guards._origin``:
a C++ kernel's path choice, ``!= 1``). Torch, run here on the same data, is the oracle at each size.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import porter
from tests.converter_check import assert_matches
from tests.models import davit
from tests.models._common import randomize_


class Windows(nn.Module):
    """DaViT's ``SpatialBlock`` without attention: pad to the window, partition, a linear per token, reverse, crop."""

    def __init__(self, channels=8, window=4):
        super().__init__()
        self.window = (window, window)
        self.mix = nn.Linear(channels, channels)

    def forward(self, x):
        B, C, H, W = x.shape
        x = x.flatten(2).transpose(1, 2).view(B, H, W, C)
        pad_r = (self.window[1] - W % self.window[1]) % self.window[1]
        pad_b = (self.window[0] - H % self.window[0]) % self.window[0]
        x = F.pad(x, (0, 0, 0, pad_r, 0, pad_b))
        _, Hp, Wp, _ = x.shape
        windows = davit.window_partition(x, self.window).view(-1, self.window[0] * self.window[1], C)
        windows = self.mix(windows).view(-1, self.window[0], self.window[1], C)
        x = davit.window_reverse(windows, self.window, Hp, Wp)
        x = x[:, :H, :W, :].contiguous().view(B, H * W, C)
        return x.transpose(1, 2).view(B, C, H, W)


def _image(*shape, seed=1):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)),)


@pytest.fixture(scope="module")
def windows():
    torch.manual_seed(0)
    model = randomize_(Windows(), 0).eval()
    return model, porter.convert(model, _image(2, 8, 16, 16, seed=0), io_layout="torch", dynamic="all")


def test_the_window_pattern_keeps_batch_height_and_width_dynamic(windows):
    _, ported = windows
    assert ported.dynamic_dims == [{"input": 0, "axis": 0}, {"input": 0, "axis": 2}, {"input": 0, "axis": 3}]


@pytest.mark.parametrize("shape", [
    (1, 8, 4, 4),  # one window per side: refused before (the example had four)
    (3, 8, 4, 12),  # one window high, three wide
    (2, 8, 3, 2),  # smaller than one window: padded to one
    (3, 8, 9, 7),  # sizes that do not divide: padded, then cropped
    (1, 8, 18, 14),
])
def test_the_window_pattern_gives_torchs_numbers_at_sizes_torch_runs(windows, shape):
    model, ported = windows
    assert ported.input_checks.refusal([shape]) is None
    assert_matches(ported, model, _image(*shape))


def test_the_window_pattern_still_checks_its_channels(windows):
    """Channels are fixed by the linear layer's weight: another count is refused by name, before any kernel."""
    _, ported = windows
    message = ported.input_checks.refusal([(2, 6, 16, 16)])
    assert message is not None and "size 6 in dim 1" in message and "x.size(1) == 8" in message


@pytest.mark.slow
def test_davit_florence_with_every_dim_dynamic_runs_at_72x56():
    """Florence-2's DaViT twin captured with every dim dynamic (as ``dynamic="all"``, no capture budget) gives
    torch's numbers at 72x56 (stages of 18x14, 9x7, 5x4 and 3x2: two windows high in the third, one in the last) and
    at 64x64, batch 1. The example is 136x136 (34, 17, 9, 5: at least two windows each way in every stage): at a
    64x64 example (one window in the last two stages) torch's own fake shapes of ``view(-1, ...)`` are built for
    one window (``Windows`` at a 4x4 example shows the same), and the port refuses 72x56 rather than follow them."""
    torch.manual_seed(0)
    model = randomize_(davit.davit_fl_small_twin(), 0).eval()
    ported = porter.convert(model, _image(2, 3, 136, 136, seed=0), io_layout="torch", dynamic="all")
    assert {"input": 0, "axis": 2} in ported.dynamic_dims and {"input": 0, "axis": 3} in ported.dynamic_dims
    for shape in ((3, 3, 72, 56), (1, 3, 64, 64)):
        assert ported.input_checks.refusal([shape]) is None, shape
        assert_matches(ported, model, _image(*shape))


def test_an_example_of_one_window_keeps_torchs_one_window_shapes_and_refuses_more():
    """At a 4x4 example (one window each way) torch's capture gives ``view(-1, 16, C)`` the shape ``(B, Hp * Wp,
    C)``, right only while there is one window; the port refuses two windows by name before any kernel rather than
    run those shapes, and still runs one window at any batch and a padded 3x3 map, as torch."""
    torch.manual_seed(0)
    model = randomize_(Windows(), 0).eval()
    ported = porter.convert(model, _image(2, 8, 4, 4, seed=0), io_layout="torch", dynamic="all")
    message = ported.input_checks.refusal([(3, 8, 8, 4)])
    assert message is not None and "size 8 in dim 2" in message
    for shape in ((1, 8, 4, 4), (3, 8, 3, 3)):
        assert_matches(ported, model, _image(*shape))
