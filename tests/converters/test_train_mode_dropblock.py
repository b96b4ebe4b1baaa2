"""timm's ``DropBlock2d`` (its default fast form; timm's ResNets' ``drop_block``) trains in the port as torch does;
eval is exact and unchanged (``converters/capture_dropblock.py``, ``layer_dropblock.py``).

Torch is the oracle: the port's blocks are compared with torch's own draws by their statistics (the mean kept
fraction over many draws, the block shape: every dropped element lies in a whole dropped block, the scale: the kept
elements times numel / kept), and the port's output and input gradient with torch's formula given the mask the port
drew (read back from its output). The other forms (``fast=False``, ``with_noise``) and look-alikes stay refused by
name."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import porter
from porter.converters.layer_dropblock import drop_block
from tests.converter_check import assert_matches
from tests.models import dropblock as M
from tests.models._common import randomize_

SHAPE = (6, 4, 19, 17)  # odd sizes, H != W


def _ones_port(block):
    """The port of ``block`` alone, in training mode, and a function drawing one output on an all-ones map."""
    model = nn.Sequential(block).eval()
    ported = porter.convert(model, (torch.ones(SHAPE),), io_layout="torch")
    assert ported.train_refusals == {}
    assert [n["kernel"] for n in ported.graph["nodes"] if n["kernel"] == "drop_block"] == ["drop_block"]
    ported.train()
    return lambda: np.array(ported(mx.ones(SHAPE)))


def _torch_draw(block, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        return block.train()(torch.ones(SHAPE)).numpy()


def _whole_blocks(dropped, k):
    """Every dropped element lies in a k x k window (out-of-map counted as dropped) that is dropped whole: the
    dropped set is the union of the windows it contains (a morphological opening leaves it unchanged)."""
    t = torch.from_numpy(dropped.astype(np.float32))
    pad = k // 2
    # windows wholly dropped: min pool with the border as dropped
    whole = -F.max_pool2d(-F.pad(t, [pad] * 4, value=1.0), k, stride=1)
    return torch.equal(F.max_pool2d(whole, k, stride=1, padding=pad), t)


@pytest.mark.parametrize("drop_prob, block_size, gamma_scale", [(0.2, 5, 1.0), (0.1, 7, 0.25), (0.3, 3, 1.0)])
def test_blocks_rate_and_scale_are_torchs(drop_prob, block_size, gamma_scale):
    block = M.DropBlock2d(drop_prob, block_size, gamma_scale)
    draw = _ones_port(block)
    draws = 40
    port = [draw() for _ in range(draws)]
    ref = [_torch_draw(block, seed) for seed in range(draws)]
    for out in port + ref:
        kept = out != 0
        np.testing.assert_allclose(out[kept], out.size / kept.sum(), rtol=1e-5)  # scale: numel / kept
        assert _whole_blocks(~kept, block_size)
    port_keep = np.array([(o != 0).mean() for o in port])
    ref_keep = np.array([(o != 0).mean() for o in ref])
    spread = np.sqrt((port_keep.var() + ref_keep.var()) / draws)
    assert abs(port_keep.mean() - ref_keep.mean()) <= 5 * spread + 1e-3, (port_keep.mean(), ref_keep.mean())
    assert 0.0 < port_keep.mean() < 1.0
    assert len({o.tobytes() for o in port}) == draws  # a new draw on every call


def test_the_block_check_can_fail():
    """Element-wise dropout is not made of blocks; torch's blocks of 5 are not blocks of 7."""
    torch.manual_seed(0)
    assert not _whole_blocks(torch.rand(SHAPE).numpy() < 0.2, 3)
    assert not _whole_blocks(_torch_draw(M.DropBlock2d(0.2, 5), 0) == 0, 7)


def test_output_and_input_gradient_are_torchs_given_the_ports_mask():
    """On random data (the port's drawn mask read back from where the output is 0) the output is torch's
    ``x * keep * scale`` and the input gradient ``keep * scale``."""
    block = M.DropBlock2d(0.2, 5)
    model = nn.Sequential(block).eval()
    x = torch.randn(SHAPE, generator=torch.Generator().manual_seed(1))
    ported = porter.convert(model, (x,), io_layout="torch")
    ported.train()
    xm = mx.array(x.numpy())
    mx.random.seed(3)
    out = np.array(ported(xm))
    mx.random.seed(3)
    grad = np.array(mx.grad(lambda v: (ported(v) * mx.ones(SHAPE)).sum())(xm))
    keep = torch.from_numpy((out != 0).astype(np.float32))
    scale = keep.numel() / keep.sum().add(1e-6)
    np.testing.assert_allclose(out, (x * keep * scale).numpy(), rtol=1e-6, atol=0)
    np.testing.assert_allclose(grad, (keep * scale).numpy(), rtol=1e-6, atol=0)


@pytest.mark.parametrize("inplace", [False, True])
def test_eval_is_exact_and_a_resnet_block_net_converts_in_training_mode(inplace):
    """timm's ResNet blocks with a drop block after each BN (``x = self.drop_block(x)``; timm's ``inplace`` form
    too): eval matches torch; a model converted in training mode is not refused, and its port trains (BN batch
    statistics, blocks drawn)."""
    torch.manual_seed(0)
    model = randomize_(M.resnet_blocks(lambda: M.DropBlock2d(0.1, 3, 0.25, inplace=inplace)), 0)
    x = torch.randn(2, 3, 16, 12)
    ported = porter.convert(model, (x,), io_layout="torch")
    assert ported.train_refusals == {}
    assert sorted(n["module"] for n in ported.graph["nodes"] if n["kernel"] == "drop_block") == \
        ["1.drop_block", "1.drop_block", "2.drop_block", "2.drop_block"]
    assert_matches(ported, model, (torch.randn(3, 3, 13, 11),))
    trained = porter.convert(randomize_(M.resnet_blocks(lambda: M.DropBlock2d(0.1, 3, 0.25)), 0).train(), (x,),
                             io_layout="torch")
    first, second = (np.array(trained(mx.array(x.numpy()))) for _ in range(2))
    assert not np.array_equal(first, second)


@pytest.mark.parametrize("kwargs", [{"fast": False}, {"with_noise": True}, {"fast": False, "batchwise": True}])
def test_the_other_forms_stay_refused_by_name(kwargs):
    """The clipped-seed form and noise filling draw differently: not recognised, refused by path as before."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3), M.DropBlock2d(0.2, 3, **kwargs)).eval()
    ported = porter.convert(model, (torch.randn(2, 3, 12, 12),), io_layout="torch")
    assert set(ported.train_refusals) == {"1"}
    with pytest.raises(porter.TrainModeError, match=r"'1'.*DropBlock2d"):
        ported.train()


def test_half_precision_port_drops_blocks_and_scales_in_half():
    model = nn.Sequential(M.DropBlock2d(0.2, 5)).eval()
    ported = porter.convert(model, (torch.ones(SHAPE),), io_layout="torch").astype("float16")
    ported.train()
    draw = ported(mx.ones(SHAPE, dtype=mx.float16))
    assert draw.dtype == mx.float16
    out = np.array(draw.astype(mx.float32))
    kept = out != 0
    scale = torch.tensor(out.size / (kept.sum() + 1e-6), dtype=torch.float32).half().float().item()
    np.testing.assert_array_equal(out[kept], scale)
    assert _whole_blocks(~kept, 5)


@pytest.mark.parametrize("shape, block_size, match", [
    ((1, 2, 8, 6), 4, "'block_size' must give an odd block on a 8x6 map"),  # torch: the pooled mask is 9x7
    ((1, 2, 5, 9), 7, "seed rate"),  # (W - 7 + 1) * (H - 7 + 1) < 0: torch's bernoulli_ fails
])
def test_sizes_torch_cannot_run_are_refused_with_the_argument(shape, block_size, match):
    block = M.DropBlock2d(0.2, block_size).train()
    with pytest.raises(RuntimeError):
        block(torch.ones(shape))
    with pytest.raises(ValueError, match=match):
        drop_block(mx.ones(shape), 0.2, block_size, 1.0, (2, 3))


def test_a_saved_port_loads_and_still_drops_blocks(tmp_path):
    """The ``drop_block`` node and its settings survive ``save``/``load`` (format version 6)."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), M.DropBlock2d(0.2, 5)).eval()
    porter.save(porter.convert(model, (torch.randn(2, 3, 19, 17),), io_layout="torch"), tmp_path / "m")
    loaded = porter.load(tmp_path / "m")
    node, = [n for n in loaded.graph["nodes"] if n["kernel"] == "drop_block"]
    assert node["attrs"]["drop_prob"] == 0.2 and node["attrs"]["block_size"] == 5
    loaded.train()
    x = mx.array(np.abs(np.random.default_rng(0).standard_normal((2, 3, 19, 17))).astype(np.float32) + 1.0)
    out = np.array(loaded(x))
    assert (out == 0).any() and not np.array_equal(out, np.array(loaded(x)))
