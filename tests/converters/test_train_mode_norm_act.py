"""Training mode of batch norm subclasses with a forward of their own and of norm + activation layers (timm's
``BatchNormAct2d`` in its variants, ``SyncBatchNormAct``, ``GroupNormAct``, ``LayerNormAct2d``; a user's
``nn.BatchNorm2d`` subclass calling ``F.batch_norm``), against torch in training mode: outputs, running statistics
and counters after two steps at two input sizes, parameter gradients, then eval; subclasses that train otherwise are
refused by name with the reason (``converters/capture_batch_norms.py``); a timm-style EfficientNet trained for three
SGD steps in both."""

from __future__ import annotations

import copy
from functools import partial

import mlx.core as mx
import mlx.nn as mnn
import mlx.optimizers as optim
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import porter
from porter.validation.grads import grad_parity
from tests.models._common import randomize_
from tests.models.timm_norm_act import (BatchNormAct2d, FrozenBatchNormAct2d, GroupNormAct, LayerNormAct2d,
                                        efficientnet, sync_batch_norm_act)


def _x(shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def _run(ported, x):
    return np.array(ported(mx.array(x.numpy())).astype(mx.float32))


class MyBN(nn.BatchNorm2d):
    """A user's subclass: ``F.batch_norm`` with the module's own state and momentum (never counts batches)."""

    def forward(self, x):
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, self.training,
                            self.momentum, self.eps)


class ScaledBN1d(nn.BatchNorm1d):
    """A subclass around the base's forward: ``super().forward`` then its own op, on (N, C, L) input."""

    def forward(self, x):
        return torch.tanh(super().forward(x)) * 1.5


def _conv_then(norm, channels=4):
    return nn.Sequential(nn.Conv2d(3, channels, 3), norm)


CASES = [
    ("bn_act_relu", lambda: _conv_then(BatchNormAct2d(4)), "1"),
    ("bn_act_no_act_momentum_none", lambda: _conv_then(BatchNormAct2d(4, momentum=None, apply_act=False)), "1"),
    ("bn_act_silu_no_affine", lambda: _conv_then(BatchNormAct2d(4, affine=False, act_layer=nn.SiLU)), "1"),
    ("bn_act_gelu_momentum", lambda: _conv_then(BatchNormAct2d(4, momentum=0.35, act_layer=nn.GELU)), "1"),
    ("bn_act_untracked", lambda: _conv_then(BatchNormAct2d(4, track_running_stats=False, act_layer=nn.ReLU6)),
     None),
    ("sync_bn_act", lambda: _conv_then(sync_batch_norm_act(BatchNormAct2d(4, act_layer=nn.Hardswish))), "1"),
    ("sync_bn", lambda: _conv_then(nn.SyncBatchNorm(4, momentum=None)), "1"),
    ("user_subclass", lambda: _conv_then(MyBN(4, momentum=0.3)), "1"),
    ("subclass_1d_super_forward", lambda: nn.Sequential(nn.Conv1d(3, 4, 1), ScaledBN1d(4)), "1"),
    ("frozen_bn_act", lambda: _conv_then(FrozenBatchNormAct2d(4, act_layer=nn.SiLU)), None),
    ("group_norm_act", lambda: _conv_then(GroupNormAct(4, num_groups=2, act_layer=nn.SiLU)), None),
    ("layer_norm_act2d", lambda: _conv_then(LayerNormAct2d(4, act_layer=nn.GELU)), None),
]


def _shapes(name):
    if "1d" in name:
        return (4, 3, 9), (6, 3, 5)
    return (4, 3, 9, 7), (3, 3, 6, 11)


def _randomized(model):
    model = randomize_(model, 0)
    with torch.no_grad():  # randomize_ treats FrozenBatchNormAct2d's buffers as plain vectors: keep variances > 0
        for name, buffer in model.named_buffers():
            if name.endswith("running_var"):
                buffer.abs_().add_(0.5)
    return model


def _assert_state(ported, model, what):
    arrays = ported.torch_parameters()  # torch layouts
    for name, value in model.state_dict().items():
        got = np.array(arrays[name])
        if value.dtype == torch.int64:
            np.testing.assert_array_equal(got, value.numpy(), err_msg=f"{name} {what}")
        else:
            np.testing.assert_allclose(got, value.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"{name} {what}")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_norm_act_trains_as_torch(case):
    """Two training steps at two sizes (output, running statistics, counters), parameter gradients, then eval."""
    name, factory, norm_path = case
    torch.manual_seed(0)
    model = _randomized(factory())
    first, second = _shapes(name)
    ported = porter.convert(model, (_x(first),), io_layout="torch")
    assert ported.train_refusals == {}
    if norm_path is not None:  # mapped to the port's batch norm layer (the one carrying torch's training rule)
        assert ported.graph["modules"][norm_path]["type"] == "BatchNorm"
    model.train()
    ported.train()
    for step, shape in enumerate((first, second)):
        x = _x(shape, seed=step + 1)
        with torch.no_grad():
            want = model(x).numpy()
        assert np.isfinite(want).all()
        np.testing.assert_allclose(_run(ported, x), want, rtol=1e-4, atol=1e-5, err_msg=f"step {step}")
        _assert_state(ported, model, f"after step {step}")
    result = grad_parity(model, ported, (_x(second, seed=5),), rtol=1e-4, atol=1e-5, seed=2)
    assert result["ok"], result
    assert {row["name"] for row in result["parameters"]} == {n for n, _ in model.named_parameters()}
    _assert_state(ported, model, "after the gradient step")
    model.eval()
    ported.eval()
    for seed, shape in enumerate((first, second)):
        x = _x(shape, seed=9 + seed)
        with torch.no_grad():
            np.testing.assert_allclose(_run(ported, x), model(x).numpy(), rtol=1e-4, atol=1e-5)


def test_bn_act_float64_trains_as_torch():
    torch.manual_seed(0)
    model = _randomized(_conv_then(BatchNormAct2d(4, momentum=None, act_layer=nn.SiLU))).double()
    ported = porter.convert(model, (_x((4, 3, 9, 7), dtype=torch.float64),), io_layout="torch")
    assert ported.train_refusals == {} and ported.graph["modules"]["1"]["type"] == "BatchNorm"
    model.train()
    ported.train()
    for step, shape in enumerate(((4, 3, 9, 7), (3, 3, 6, 11))):
        x = _x(shape, seed=step + 1, dtype=torch.float64)
        with torch.no_grad():
            want = model(x).numpy()
        got = np.array(ported(mx.array(x.numpy(), dtype=mx.float64)))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"step {step}")
    arrays = ported.torch_parameters()
    for name, value in model.state_dict().items():
        np.testing.assert_allclose(np.array(arrays[name]), value.numpy(), rtol=1e-6, atol=1e-7, err_msg=name)


def test_bn_act_drop_layer_drops_after_batch_statistics():
    """``drop_layer=nn.Dropout``: each output is 0 or torch's undropped training output / (1 - p) (ReLU after the
    drop), the statistics as torch's, a new mask per call."""
    torch.manual_seed(0)
    p = 0.25
    model = _randomized(_conv_then(BatchNormAct2d(16, drop_layer=partial(nn.Dropout, p)), channels=16))
    ported = porter.convert(model, (_x((4, 3, 9, 7)),), io_layout="torch")
    assert ported.train_refusals == {}
    assert ported.graph["modules"]["1"]["type"] == "BatchNorm"
    assert ported.graph["modules"]["1.drop"]["type"] == "Dropout"
    undropped = copy.deepcopy(model)
    undropped[1].drop.p = 0.0
    undropped.train()
    ported.train()
    mx.random.seed(0)
    masks = []
    for step in range(2):
        x = _x((4, 3, 9, 7), seed=step + 1)
        with torch.no_grad():
            want = undropped(x).numpy()
        got = _run(ported, x)
        dropped = got == 0
        np.testing.assert_allclose(got[~dropped], want[~dropped] / (1 - p), rtol=1e-4, atol=1e-5)
        assert abs(float((dropped & (want > 0)).sum()) / float((want > 0).sum()) - p) < 0.08
        masks.append(dropped)
        _assert_state(ported, undropped, f"after step {step}")
    assert not np.array_equal(masks[0], masks[1])


class FrozenBN(nn.BatchNorm2d):
    """Always normalizes by its running statistics (a frozen batch norm): training changes nothing."""

    def forward(self, x):
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)


class OtherMomentumBN(nn.BatchNorm2d):
    def forward(self, x):
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, self.training, 0.5,
                            self.eps)


class TrainScaledBN(nn.BatchNorm2d):
    def forward(self, x):
        y = super().forward(x)
        return y * 2 if self.training else y


class UncountedCumulativeBN(nn.BatchNorm2d):
    """``momentum=None`` whose forward never counts: torch's ``F.batch_norm`` then takes no running update factor
    the port could reproduce from the counter."""

    def forward(self, x):
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, self.training, 0.2,
                            self.eps)


def test_frozen_subclass_stays_its_eval_form_in_training():
    torch.manual_seed(0)
    model = _randomized(_conv_then(FrozenBN(4)))
    ported = porter.convert(model, (_x((4, 3, 9, 7)),), io_layout="torch")
    assert ported.train_refusals == {}
    assert "1" not in ported.graph["modules"]  # not the port's batch norm: its captured eval form stays
    model.train()
    ported.train()
    x = _x((3, 3, 6, 11), seed=1)
    with torch.no_grad():
        np.testing.assert_allclose(_run(ported, x), model(x).numpy(), rtol=1e-5, atol=1e-6)
    _assert_state(ported, model, "after a training call")


@pytest.mark.parametrize("cls, momentum, words", [
    (OtherMomentumBN, 0.1, "updates its running statistics otherwise than torch's batch norm with momentum 0.1"),
    (UncountedCumulativeBN, None, "updates its running statistics otherwise"),
    (TrainScaledBN, 0.1, "computes something other than batch statistics in training mode"),
])
def test_subclass_that_trains_otherwise_is_refused_by_name(cls, momentum, words):
    torch.manual_seed(0)
    model = _randomized(nn.Sequential(nn.Conv2d(3, 4, 3), nn.Sequential(cls(4, momentum=momentum))))
    ported = porter.convert(model, (_x((4, 3, 9, 7)),), io_layout="torch")
    assert set(ported.train_refusals) == {"1.0"}
    assert cls.__name__ in ported.train_refusals["1.0"] and words in ported.train_refusals["1.0"]
    with pytest.raises(porter.TrainModeError, match=r"'1\.0'.*batch norm subclass"):
        ported.train()
    x = _x((3, 3, 6, 11), seed=1)  # eval stays exact
    with torch.no_grad():
        np.testing.assert_allclose(_run(ported, x), model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_shared_bn_act_called_twice_updates_twice_as_torch():
    """One BatchNormAct2d applied to two tensors per forward: two updates of its statistics and counter."""
    torch.manual_seed(0)

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.bn = BatchNormAct2d(4, momentum=None)

        def forward(self, x):
            return self.bn(self.bn(self.conv(x)) * 0.5 + 1.0)

    model = _randomized(Twice())
    ported = porter.convert(model, (_x((4, 3, 9, 7)),), io_layout="torch")
    assert ported.train_refusals == {} and ported.graph["modules"]["bn"]["type"] == "BatchNorm"
    model.train()
    ported.train()
    for step in range(2):
        x = _x((4, 3, 9, 7), seed=step + 1)
        with torch.no_grad():
            want = model(x).numpy()
        np.testing.assert_allclose(_run(ported, x), want, rtol=1e-4, atol=1e-5)
        _assert_state(ported, model, f"after step {step}")
    assert int(model.bn.num_batches_tracked) == 4


@pytest.mark.slow
def test_timm_efficientnet_sgd_steps_match_torch():
    """Three SGD steps (cross-entropy, momentum 0.9) from the same weights at two input sizes: each step's loss,
    then every weight and running statistic; eval afterwards."""
    model = efficientnet(seed=0)
    ported = porter.convert(model, (_x((2, 3, 32, 32)),), io_layout="torch")
    assert ported.train_refusals == {}
    norms = [path for path, m in model.named_modules() if isinstance(m, BatchNormAct2d)]
    assert all(ported.graph["modules"][path]["type"] == "BatchNorm" for path in norms)
    model.train()
    ported.train()
    lr = 0.05
    opt_t = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    opt_p = optim.SGD(learning_rate=lr, momentum=0.9)

    def loss_port(m, x, y):
        return mnn.losses.cross_entropy(m(x), y, reduction="mean")

    step_port = mnn.value_and_grad(ported, loss_port)
    for step, shape in enumerate(((4, 3, 32, 32), (3, 3, 29, 35), (4, 3, 32, 32))):
        x = _x(shape, seed=step + 1)
        labels = torch.randint(0, 5, (shape[0],), generator=torch.Generator().manual_seed(step))
        opt_t.zero_grad()
        loss_t = F.cross_entropy(model(x), labels)
        loss_t.backward()
        opt_t.step()
        loss_p, grads = step_port(ported, mx.array(x.numpy()), mx.array(labels.numpy()))
        opt_p.update(ported, grads)
        mx.eval(ported.parameters(), ported.state)
        np.testing.assert_allclose(float(loss_p), float(loss_t.detach()), rtol=1e-5,
                                   err_msg=f"loss at step {step}")
    arrays = ported.torch_parameters()
    for name, value in model.state_dict().items():
        if value.dtype == torch.int64:
            np.testing.assert_array_equal(np.array(arrays[name]), value.numpy(), err_msg=name)
        else:
            np.testing.assert_allclose(np.array(arrays[name]), value.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
    model.eval()
    ported.eval()
    x = _x((2, 3, 27, 33), seed=7)
    with torch.no_grad():
        np.testing.assert_allclose(_run(ported, x), model(x).numpy(), rtol=1e-4, atol=1e-5)



@pytest.mark.parametrize("dtype, mx_dtype, rel", [(torch.float16, mx.float16, 4e-3),
                                                   (torch.bfloat16, mx.bfloat16, 2e-2)])
def test_half_bn_act_trains_as_torch(dtype, mx_dtype, rel):
    """A float16/bfloat16 BatchNormAct2d: mapped (the check runs in the module's dtype), the training output within
    the dtype's rounding of torch's, the statistics as torch's."""
    torch.manual_seed(0)
    model = _randomized(_conv_then(BatchNormAct2d(4, act_layer=nn.SiLU))).to(dtype)
    ported = porter.convert(model, (_x((4, 3, 9, 7), dtype=dtype),), io_layout="torch")
    assert ported.train_refusals == {} and ported.graph["modules"]["1"]["type"] == "BatchNorm"
    model.train()
    ported.train()
    for step, shape in enumerate(((4, 3, 9, 7), (3, 3, 6, 11))):
        x = _x(shape, seed=step + 1, dtype=dtype)
        with torch.no_grad():
            want = model(x).float().numpy()
        got = np.array(ported(mx.array(x.float().numpy()).astype(mx_dtype)).astype(mx.float32))
        assert np.abs(got - want).max() <= rel * np.abs(want).max(), f"step {step}"
        arrays = ported.torch_parameters()
        for name, value in model.state_dict().items():
            got = np.array(arrays[name].astype(mx.float32) if value.is_floating_point() else arrays[name])
            np.testing.assert_allclose(got, value.float().numpy() if value.is_floating_point() else value.numpy(),
                                       rtol=rel, atol=rel * 1e-2, err_msg=f"{name} after step {step}")


def test_uncounted_subclass_survives_save_and_load(tmp_path):
    """``count_batches=False`` is recorded in graph.json (only where it differs) and the loaded port trains as
    torch: statistics updated, the counter left where torch leaves it."""
    torch.manual_seed(0)
    model = _randomized(_conv_then(MyBN(4, momentum=0.3)))
    ported = porter.convert(model, (_x((4, 3, 9, 7)),), io_layout="torch")
    assert ported.graph["modules"]["1"]["config"]["count_batches"] is False
    porter.save(ported, tmp_path / "m")
    loaded = porter.load(tmp_path / "m")
    model.train()
    loaded.train()
    x = _x((3, 3, 6, 11), seed=1)
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(_run(loaded, x), want, rtol=1e-4, atol=1e-5)
    _assert_state(loaded, model, "after a training call")
    assert int(model[1].num_batches_tracked) == 0


def test_batch_norm_layer_refuses_uncounted_cumulative_average():
    with pytest.raises(ValueError, match=r"\[BatchNorm\] 'count_batches'"):
        porter.layers.BatchNorm(4, momentum=None, count_batches=False)
    with pytest.raises(ValueError, match=r"\[BatchNorm\] 'count_batches'"):
        porter.layers.BatchNorm(4, count_batches=1)


@pytest.mark.parametrize("builder", ["repvgg_small", "mobileone_small"])
def test_timm_reparam_nets_train_as_torch(builder):
    """timm's RepVGG and MobileOne train-time form (every branch's BN a BatchNormAct2d without act): two training
    steps at two sizes (outputs, every statistic and counter), then eval."""
    from tests.models import timm_reparam

    model = _randomized(getattr(timm_reparam, builder)())
    ported = porter.convert(model, (_x((2, 3, 32, 32)),), io_layout="torch")
    assert ported.train_refusals == {}
    model.train()
    ported.train()
    for step, shape in enumerate(((2, 3, 32, 32), (3, 3, 29, 35))):
        x = _x(shape, seed=step + 1)
        with torch.no_grad():
            want = model(x).numpy()
        np.testing.assert_allclose(_run(ported, x), want, rtol=1e-4, atol=1e-4 * np.abs(want).max(),
                                   err_msg=f"step {step}")
        _assert_state(ported, model, f"after step {step}")
    model.eval()
    ported.eval()
    x = _x((1, 3, 29, 35), seed=7)
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(_run(ported, x), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


class BlockDrop(nn.Module):
    """A drop layer the port does not carry (timm's ``DropBlock2d`` kind: random 2x2 blocks zeroed in training)."""

    def __init__(self, drop_prob=0.3):
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x):
        if not self.training:
            return x
        keep = (torch.rand(x.shape[0], x.shape[1], (x.shape[2] + 1) // 2, (x.shape[3] + 1) // 2) > self.drop_prob)
        keep = keep.repeat_interleave(2, 2).repeat_interleave(2, 3)[:, :, :x.shape[2], :x.shape[3]]
        return x * keep / (1 - self.drop_prob)


def test_bn_act_with_an_unported_drop_layer_refuses_the_drop_layer_by_name():
    """The batch norm maps and trains; its ``drop`` child computes something the port does not: refused by its path,
    not the batch norm's."""
    torch.manual_seed(0)
    model = _randomized(_conv_then(BatchNormAct2d(4, drop_layer=BlockDrop)))
    ported = porter.convert(model, (_x((4, 3, 9, 7)),), io_layout="torch")
    assert ported.graph["modules"]["1"]["type"] == "BatchNorm"
    assert set(ported.train_refusals) == {"1.drop"}
    with pytest.raises(porter.TrainModeError, match=r"'1\.drop'.*BlockDrop"):
        ported.train()
