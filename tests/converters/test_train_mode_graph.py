"""Ports that train where the torch forward branches on ``self.training`` without a random op
(``converters/capture_train_graph.py``, ``converters/train_graph.py``).

torchvision's Inception v3 and GoogLeNet return their auxiliary logits in training (named tuples), timm's distilled
DeiT its two heads (with ``distilled_training``), a hand-written module ``x + f(x)`` in training only: conversion
captures such forwards a second time in training mode, and the port runs that graph while those modules train.
Torch is the oracle in each test: the training outputs (every leaf), the gradients of a loss over all of them, SGD
steps' losses, weights and running statistics, then eval. A random training difference keeps its refusal."""

from __future__ import annotations

import json

import mlx.core as mx
import mlx.nn as mnn
import mlx.optimizers as optim
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import porter
from porter.converters.schema import ArtifactError
from tests.converters.train_branch_models import AuxNet, FlatAux, Residual, seeded
from tests.models.timm_hybrid import deit_small
from tests.zoo.twins.googlenet import googlenet
from tests.zoo.twins.inception import inception_v3


def _x(shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _mx(t):
    """A torch tensor as MLX, float64 kept (``mx.array`` reads float64 numpy as float32)."""
    return mx.array(t.numpy(), dtype=mx.float64) if t.dtype == torch.float64 else mx.array(t.numpy())


def _labels(n, classes, seed):
    return torch.randint(0, classes, (n,), generator=torch.Generator().manual_seed(seed))


def _leaves(out):
    return list(out) if isinstance(out, tuple) else [out]


def _loss(outputs, labels, cross_entropy):
    """The main output's loss plus 0.3 of each further output's (torchvision's auxiliary weighting)."""
    leaves = _leaves(outputs)
    return sum((1.0 if i == 0 else 0.3) * cross_entropy(o, labels) for i, o in enumerate(leaves))


def _mlx_ce(logits, labels):
    return mnn.losses.cross_entropy(logits, labels, reduction="mean")


def _torch_margin(logits, labels):
    """Minus the label's logit: a loss without exp (MLX computes float64 exp float32-accurately, so a float64
    trajectory under cross-entropy leaves torch's by MLX's rounding, not the port's)."""
    return -logits.gather(1, labels[:, None]).mean()


def _mlx_margin(logits, labels):
    return -mx.take_along_axis(logits, labels[:, None], axis=1).mean()


def _assert_outputs(got, want, rtol, atol, what):
    """Same structure as torch's (a named tuple's fields, a tuple's length, or one array), then each leaf."""
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), (what, type(got))
        if hasattr(want, "_fields"):
            assert got._fields == want._fields, what
    else:
        assert isinstance(got, mx.array), (what, type(got))
    for i, (g, w) in enumerate(zip(_leaves(got), _leaves(want))):
        assert tuple(g.shape) == tuple(w.shape), (what, i)
        w = w.detach().numpy()  # within rtol of the leaf's largest value: deep training-mode batch norms in float32
        np.testing.assert_allclose(np.array(g), w, rtol=rtol, atol=max(atol, rtol * float(np.abs(w).max())),
                                   err_msg=f"{what} {i}")


def _train_like_torch(model, ported, shapes, classes, lr, rtol, atol, weights_rtol=1e-3):
    """SGD over ``shapes`` (one batch each) from the same weights, both in training mode: outputs and gradients of
    every parameter at the first step, each step's loss, then every weight and running statistic (within
    ``weights_rtol`` of the array's largest value)."""
    model.train()
    ported.train()
    dtype = next(model.parameters()).dtype
    losses = (_torch_margin, _mlx_margin) if dtype == torch.float64 else (F.cross_entropy, _mlx_ce)
    opt_t = torch.optim.SGD(model.parameters(), lr=lr)
    # a float64 model's learning rate in float64 (a Python float is a float32 array to MLX's optimizer)
    opt_p = optim.SGD(learning_rate=mx.array(lr, dtype=mx.float64) if dtype == torch.float64 else lr)
    step_port = mnn.value_and_grad(ported, lambda m, x, y: _loss(m(x), y, losses[1]))
    for step, shape in enumerate(shapes):
        x, labels = _x(shape, step + 1).to(dtype), _labels(shape[0], classes, step)
        if step == 0:  # one more training forward on each side (running statistics move alike)
            with torch.no_grad():
                _assert_outputs(ported(_mx(x)), model(x), rtol, atol, "training output")
        opt_t.zero_grad()
        loss_t = _loss(model(x), labels, losses[0])
        loss_t.backward()
        loss_p, grads = step_port(ported, _mx(x), mx.array(labels.numpy()))
        if step == 0:
            got = ported.torch_parameter_grads(grads)
            # relative to the largest gradient: a conv bias before a training batch norm has none (rounding only)
            scale = max(float(p.grad.abs().max()) for p in model.parameters())
            for name, p in model.named_parameters():
                assert got[name].shape == tuple(p.grad.shape), name
                np.testing.assert_allclose(got[name] / scale, p.grad.numpy() / scale, atol=10 * atol,
                                           err_msg=f"gradient of {name}")
        opt_t.step()
        opt_p.update(ported, grads)
        mx.eval(ported.parameters(), ported.state)
        np.testing.assert_allclose(float(loss_p), float(loss_t.detach()), rtol=rtol, err_msg=f"loss at step {step}")
    arrays = ported.torch_parameters()
    for name, value in model.state_dict().items():
        if value.dtype == torch.int64:
            np.testing.assert_array_equal(np.array(arrays[name]), value.numpy(), err_msg=name)
        else:
            bar = weights_rtol * float(value.abs().max())
            np.testing.assert_allclose(np.array(arrays[name]), value.numpy(), rtol=weights_rtol, atol=bar,
                                       err_msg=name)


def _eval_like_torch(model, ported, shape, rtol, atol):
    model.eval()
    ported.eval()
    x = _x(shape, 9).to(next(model.parameters()).dtype)
    with torch.no_grad():
        _assert_outputs(ported(_mx(x)), model(x), rtol, atol, "eval output")


def _oracle_differs(model, x):
    """Torch shows the training forward is not the eval forward here (else the test could not fail)."""
    with torch.no_grad():
        model.train()
        trained = _leaves(model(x))
        model.eval()
        evaluated = _leaves(model(x))
    assert len(trained) != len(evaluated) or not all(torch.equal(a, b) for a, b in zip(trained, evaluated))


# ---------------------------------------------------------------------------------------------------- a small twin
def test_a_root_training_branch_trains_with_its_auxiliary_head():
    """AuxNet (Inception-style): the named tuple in training, the logits in eval; gradients reach the auxiliary
    head, which only the training graph reads; three SGD steps at two sizes, then eval."""
    model = seeded(AuxNet())
    x = _x((4, 3, 10, 9))
    _oracle_differs(model, x)
    ported = porter.convert(model, (x,), io_layout="torch")
    assert ported.train_refusals == {}
    assert ported.graph["train_graph"]["switch"] == [""]
    assert "aux.0" in ported.graph["modules"]  # the auxiliary conv: a layer of the one tree
    assert ported.unused_params == []  # the training graph reads the auxiliary head
    _train_like_torch(model, ported, ((4, 3, 10, 9), (3, 3, 7, 12), (4, 3, 10, 9)), 5, 0.1, 1e-4, 1e-5)
    _eval_like_torch(model, ported, (2, 3, 11, 8), 1e-4, 1e-5)


def test_a_submodule_training_branch_follows_its_mode():
    """``if self.training: x = x + f(x)`` below the root: the port switches graphs by that module's mode (its
    place in the tree), as torch does module by module."""
    torch.manual_seed(0)
    model = seeded(nn.Sequential(nn.Linear(4, 6), Residual(), nn.Linear(6, 3)))
    x = _x((5, 4))
    ported = porter.convert(model, (x,), io_layout="torch")
    assert ported.train_refusals == {} and ported.graph["train_graph"]["switch"] == ["1"]
    for root, child in ((True, True), (False, True), (True, False)):
        model.train(root)
        model[1].train(child)
        ported.train(root)
        ported["1"].train(child)
        with torch.no_grad():
            np.testing.assert_allclose(np.array(ported(mx.array(x.numpy()))), model(x).numpy(), rtol=1e-5,
                                       atol=1e-6, err_msg=f"root {root}, child {child}")
    model.eval()
    _train_like_torch(model, ported, ((5, 4), (3, 4)), 3, 0.2, 1e-5, 1e-6)


def test_modules_captured_together_in_mixed_modes_are_refused_by_name():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = Residual(), Residual()

        def forward(self, x):
            return self.b(self.a(x))

    model = seeded(Two())
    x = _x((3, 6))
    ported = porter.convert(model, (x,), io_layout="torch")
    assert ported.graph["train_graph"]["switch"] == ["a", "b"]
    ported.a.train()
    with pytest.raises(porter.TrainModeError, match=r"'b': its training forward was captured together with \['a'\]"):
        ported(mx.array(x.numpy()))
    ported.b.train()
    model.train()
    with torch.no_grad():
        np.testing.assert_allclose(np.array(ported(mx.array(x.numpy()))), model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_a_random_training_difference_is_still_refused_by_name():
    """A deterministic root branch and a noise module below it: the training graph is recorded, but training mode
    stays refused naming the noise (torch's training output differs between seeds); eval is exact."""
    model = seeded(AuxNet(noise=0.5))
    x = _x((4, 3, 10, 9))
    with torch.no_grad():
        model.train()
        torch.manual_seed(1)
        first = model(x).logits
        torch.manual_seed(2)
        assert not torch.equal(first, model(x).logits)
        model.eval()
    ported = porter.convert(model, (x,), io_layout="torch")
    assert set(ported.train_refusals) == {"noise"} and "Noise" in ported.train_refusals["noise"]
    with pytest.raises(porter.TrainModeError, match="Noise"):
        ported.train()
    _eval_like_torch(model, ported, (2, 3, 10, 9), 1e-4, 1e-5)


def test_a_training_model_converts_and_trains():
    """``porter.convert`` of a model in training mode: the port starts in training mode, running the training
    graph (it was refused before)."""
    model = seeded(AuxNet()).train()
    x = _x((4, 3, 10, 9))
    ported = porter.convert(model, (x,), io_layout="torch")
    assert ported.training and model.training
    with torch.no_grad():
        _assert_outputs(ported(mx.array(x.numpy())), model(x), 1e-4, 1e-5, "training output")


# ---------------------------------------------------------------------------------------------------- artifacts
def test_save_and_load_keep_both_graphs(tmp_path):
    """The loaded port (no torch) trains with the auxiliary head and evaluates without it, as the converted one;
    the training graph's layouts follow its mode."""
    model = seeded(AuxNet())
    x = _x((4, 3, 10, 9))
    porter.save(porter.convert(model, (x,), io_layout="torch"), tmp_path / "m")
    graph = json.loads((tmp_path / "m" / "graph.json").read_text())
    assert graph["format_version"] == 7 and graph["train_graph"]["output_tree"]["namedtuple"] == ["logits",
                                                                                                  "aux_logits"]
    loaded = porter.load(tmp_path / "m")
    assert loaded.output_layouts == ["as-is"]
    _train_like_torch(model, loaded, ((4, 3, 10, 9), (2, 3, 9, 9)), 5, 0.1, 1e-4, 1e-5)
    assert loaded.output_layouts == ["as-is", "as-is"]
    _eval_like_torch(model, loaded, (2, 3, 10, 9), 1e-4, 1e-5)
    porter.save(loaded, tmp_path / "again")  # saved in training mode: the top-level layouts stay the eval graph's
    assert json.loads((tmp_path / "again" / "graph.json").read_text())["output_layouts"] == ["as-is"]


def test_the_training_graph_is_checked_on_load(tmp_path):
    model = seeded(AuxNet())
    porter.save(porter.convert(model, (_x((4, 3, 10, 9)),)), tmp_path / "m")
    path = tmp_path / "m" / "graph.json"
    graph = json.loads(path.read_text())
    graph["train_graph"]["nodes"][-1]["kernel"] = "no_such_kernel"
    path.write_text(json.dumps(graph))
    with pytest.raises(ArtifactError, match=r"train_graph: node \d+ .*no runtime kernel"):
        porter.load(tmp_path / "m")


def test_dynamic_dims_and_input_checks_follow_the_graph_the_modes_run():
    """FlatAux's training branch flattens the map into a fixed linear layer: the training graph pins height and
    width, the eval graph keeps them dynamic. ``dynamic_dims`` and ``input_checks`` report the graph the port runs
    in its modes now; each mode gives torch's numbers at another size it takes, and training at another height is
    refused naming the dim and the size it needs, as torch fails there."""
    model = seeded(FlatAux())
    x = _x((2, 3, 6, 5))
    ported = porter.convert(model, (x,), io_layout="torch")
    assert ported.graph["train_graph"]["switch"] == [""]
    every = [{"input": 0, "axis": 0}, {"input": 0, "axis": 2}, {"input": 0, "axis": 3}]
    assert ported.dynamic_dims == every and ported.input_checks.refusal([(3, 3, 8, 7)]) is None
    _eval_like_torch(model, ported, (3, 3, 8, 7), 1e-5, 1e-6)
    ported.train()
    model.train()
    assert ported.dynamic_dims == [{"input": 0, "axis": 0}]
    assert "size 8 in dim 2" in ported.input_checks.refusal([(3, 3, 8, 5)])
    with pytest.raises(RuntimeError):  # torch: the flattened map no longer fits the auxiliary linear layer
        model(_x((3, 3, 8, 5)))
    with pytest.raises(ValueError, match=r"has size 8 in dim 2.*x\.size\(2\) == 6"):
        ported(_mx(_x((3, 3, 8, 5))))
    y = _x((3, 3, 6, 5), 4)
    with torch.no_grad():
        _assert_outputs(ported(_mx(y)), model(y), 1e-5, 1e-6, "training output at batch 3")
    ported.eval()
    assert ported.dynamic_dims == every


def test_the_training_graph_is_built_at_the_example_on_load(tmp_path):
    """``porter.load`` builds both graphs at the example's sizes (nothing evaluated): an axis out of range in the
    training graph is the file's fault, found at load rather than at the first training call."""
    model = seeded(FlatAux())
    porter.save(porter.convert(model, (_x((2, 3, 6, 5)),), io_layout="torch"), tmp_path / "m")
    path = tmp_path / "m" / "graph.json"
    graph = json.loads(path.read_text())
    node = next(n for n in graph["train_graph"]["nodes"] if n["kernel"] == "reduce")
    node["attrs"]["axes"] = [1, 7]
    path.write_text(json.dumps(graph))
    with pytest.raises(ArtifactError, match=r"train_graph: node \d+"):
        porter.load(tmp_path / "m")


# ---------------------------------------------------------------------------------------------------- real twins
def _twin_case(model, x):
    model = seeded(model).to(x.dtype)
    _oracle_differs(model, x)
    ported = porter.convert(model, (x,), io_layout="torch")
    assert ported.train_refusals == {} and ported.graph["train_graph"]["switch"] == [""]
    return model, ported


@pytest.mark.slow
def test_googlenet_trains_with_both_auxiliary_classifiers():
    """torchvision's GoogLeNet (twin, 1/8 width, dropouts 0) in float64, where torch's and the port's training
    trajectories can be held tight (in float32 the batch-2 training batch norms made the first conv's weights 0.4%
    apart after two steps): ``GoogLeNetOutputs(logits, aux_logits2, aux_logits1)`` in training, gradients, three SGD
    steps at two sizes (a loss without exp: ``_torch_margin``), every weight and running statistic, then eval's
    logits. Measured: outputs 7e-14 apart, weights after three steps within 7e-9 of the largest."""
    model, ported = _twin_case(googlenet(num_classes=7, width_divisor=8, dropout=0.0, dropout_aux=0.0),
                               _x((2, 3, 64, 64)).double())
    _train_like_torch(model, ported, ((2, 3, 64, 64), (2, 3, 61, 67), (2, 3, 64, 64)), 7, 0.05, 1e-9, 1e-11,
                      weights_rtol=1e-7)
    _eval_like_torch(model, ported, (1, 3, 61, 47), 1e-7, 1e-9)  # after the weights' 7e-9 drift


@pytest.mark.slow
def test_inception_v3_trains_with_its_auxiliary_classifier():
    """torchvision's Inception v3 (twin, 1/16 width) at 299x299, the size its auxiliary head needs:
    ``InceptionOutputs(logits, aux_logits)`` in training, two SGD steps, then eval's logits. At 1/16 width and batch
    2 the training-mode network is ill-conditioned in float32 (tests/zoo/twins/inception.py): the losses follow
    torch's to 2e-4, the first layers' weights after two steps only to a few percent (measured 0.5% of the largest
    weight with two threads, 3% with one: the summation order alone moves them that far; the GoogLeNet test above
    holds the training graph's math in float64)."""
    model, ported = _twin_case(inception_v3(num_classes=7, width_divisor=16, dropout=0.0), _x((2, 3, 299, 299)))
    _train_like_torch(model, ported, ((2, 3, 299, 299), (2, 3, 299, 299)), 7, 0.01, 2e-4, 2e-5, weights_rtol=6e-2)
    _eval_like_torch(model, ported, (1, 3, 107, 93), 1e-4, 1e-5)


def test_distilled_deit_trains_with_both_heads():
    """timm's distilled DeiT with ``distilled_training``: ``(x, x_dist)`` in training, their mean in eval."""
    model = deit_small()
    model.distilled_training = True
    model, ported = _twin_case(model, _x((2, 3, 48, 48)))
    _train_like_torch(model, ported, ((2, 3, 48, 48), (3, 3, 48, 48), (2, 3, 48, 48)), 10, 0.1, 1e-4, 1e-5)
    _eval_like_torch(model, ported, (2, 3, 48, 48), 1e-4, 1e-5)


def test_past_the_branch_check_budget_the_modules_stay_refused(monkeypatch):
    """More refused modules than ``MAX_BRANCH_CHECKS`` (two forwards each): none is captured again, all stay
    refused by name (the budget at 0 here), and eval is exact."""
    from porter.converters import capture_train

    monkeypatch.setattr(capture_train, "MAX_BRANCH_CHECKS", 0)
    model = seeded(nn.Sequential(nn.Linear(4, 6), Residual(), nn.Linear(6, 3)))
    x = _x((5, 4))
    ported = porter.convert(model, (x,), io_layout="torch")
    assert "train_graph" not in ported.graph and set(ported.train_refusals) == {"1"}
    with pytest.raises(porter.TrainModeError, match="Residual"):
        ported.train()
    with torch.no_grad():
        np.testing.assert_allclose(np.array(ported(mx.array(x.numpy()))), model(x).numpy(), rtol=1e-5, atol=1e-6)
