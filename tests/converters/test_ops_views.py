"""View ops torch.export keeps as single calls: ``narrow`` (static, negative and size-derived starts), ``movedim`` /
``moveaxis`` (one dim and lists), ``mT`` / ``mH`` / ``adjoint``, ``hsplit`` / ``vsplit`` / ``dsplit``,
``atleast_1d/2d/3d``, ``ravel``. Against torch on the same data at two input sizes
(the second not seen at conversion), through a channels-last producer so each op reads torch's dims through the
port's layout; values are moved, never computed, so they compare exactly; gradients too."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn as nn

import porter
from tests.converter_check import run_ported

torch.manual_seed(0)


class Views(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(1)  # exact, and channels-last inside the port

    def forward(self, x):
        y = self.pool(x)
        a = y.narrow(2, 1, 3)
        b = y.narrow(-1, -2, 2)  # the last two columns
        c = y.narrow(3, y.shape[3] // 2, 2)  # a start read from the input's size
        d = y.movedim(1, -1)
        e = torch.movedim(y, (0, 1), (3, 2))
        f = torch.moveaxis(y, 2, 0)
        g = y.mT
        h = y.mH + y.adjoint()
        i = torch.moveaxis(y, [0, 1], [2, 3])
        j = torch.hsplit(y, [1, 3])  # dim 1 at indices
        k = torch.vsplit(y[:2], 2)  # dim 0 in equal parts
        m = torch.dsplit(y, [2])  # dim 2
        n = torch.hsplit(y[0, 0, 0], [3])  # a 1-d tensor splits on dim 0
        o = (torch.atleast_1d(y[0, 0, 0, 0]), torch.atleast_2d(y[0, 0, 0]), torch.atleast_3d(y[0, 0, 0]),
             torch.atleast_3d(y[0, 0]), torch.atleast_2d(y[0]), torch.atleast_3d(y[0, 0, 0, 0]))
        p = (torch.hsplit(y, 3), torch.vsplit(y, [1]), torch.dsplit(y[:, :, :4], 2))
        return a, b, c, d, e, f, g, h, i, j, k, m, n, o, p, y.ravel(), y[0].ravel()


@pytest.fixture(scope="module")
def ported():
    return Views().eval(), porter.convert(Views().eval(), torch.randn(2, 3, 6, 7), io_layout="torch")


@pytest.mark.parametrize("shape", [(2, 3, 6, 7), (3, 3, 5, 9)])
def test_views_match_torch_exactly(ported, shape):
    model, port = ported
    x = torch.randn(*shape)
    with torch.no_grad():
        expected = [t.numpy() for t in torch.utils._pytree.tree_leaves(model(x))]
    actual = run_ported(port, (x,))
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.shape == e.shape, (i, a.shape, e.shape)
        np.testing.assert_array_equal(a, e, err_msg=f"output {i}")


def test_views_gradient_matches_torch(ported):
    model, port = ported
    x = torch.randn(2, 3, 6, 7, requires_grad=True)
    outputs = torch.utils._pytree.tree_leaves(model(x))
    weights = [torch.randn_like(t) for t in outputs]
    sum(map(lambda t, w: (t * w).sum(), outputs, weights)).backward()
    ws = [mx.array(w.numpy()) for w in weights]

    def loss(inp):
        leaves = mlx_leaves(port(inp))
        assert len(leaves) == len(ws)
        return sum((o * w).sum() for o, w in zip(leaves, ws))

    grad = mx.grad(loss)(mx.array(x.detach().numpy()))
    np.testing.assert_allclose(np.array(grad), x.grad.numpy(), rtol=1e-5, atol=1e-5)


def mlx_leaves(tree):
    if isinstance(tree, (list, tuple)):
        return [leaf for item in tree for leaf in mlx_leaves(item)]
    return [tree]


def test_vsplit_into_unequal_parts_is_refused_by_torch_and_named():
    class Uneven(nn.Module):
        def forward(self, x):
            return torch.vsplit(x, 3)

    with pytest.raises(Exception, match="vsplit|divisible"):
        porter.convert(Uneven(), torch.randn(4, 3))


def test_narrow_past_the_end_is_refused_at_a_smaller_size(ported):
    """narrow(2, 1, 3) needs at least 4 rows: torch raises; the port refuses the size instead of a shorter slice."""
    _, port = ported
    with pytest.raises(ValueError, match="dim 2 .*breaks the condition"):
        port(mx.random.normal((1, 3, 3, 7)))


def test_movedim_bad_arguments_are_named():
    class Bad(nn.Module):
        def forward(self, x):
            return torch.ops.aten.movedim.intlist(x, [0, 0], [1, 2])

    with pytest.raises(Exception, match="repeated dim"):
        porter.convert(Bad(), torch.randn(2, 3, 4))


_A = torch.ops.aten
_COPY_CASES = {  # op -> forward of a (2, 3, 4, 5) input; values only move, so the port must be exact
    "view_copy": lambda x: _A.view_copy(x, [x.shape[0], -1]),
    "_reshape_copy": lambda x: _A._reshape_copy(x, [-1, 5]),
    "permute_copy": lambda x: _A.permute_copy(x, [2, 0, 3, 1]),
    "transpose_copy": lambda x: _A.transpose_copy(x, 1, 3),
    "t_copy": lambda x: _A.t_copy(x[0, 0]),
    "expand_copy": lambda x: _A.expand_copy(x[:, :1], [-1, 6, -1, -1]),
    "broadcast_to": lambda x: torch.broadcast_to(x[:, :1], (2, 6, 4, 5)) * _A.broadcast_to(x[0, 0, :1], [4, 5]),
    "narrow_copy": lambda x: _A.narrow_copy(x, 3, 1, 3),
    "squeeze_copy": lambda x: (_A.squeeze_copy(x[:, :1], 1) * _A.squeeze_copy(x[:, :1, :1], [1, 2]).unsqueeze(1)
                             * _A.squeeze_copy(x[:1, :1, :1, :1])),
    "unsqueeze_copy": lambda x: _A.unsqueeze_copy(x, 2),
    "select_copy": lambda x: _A.select_copy(x, 2, -1),
    "slice_copy": lambda x: _A.slice_copy(x, 3, 1, None, 2),
    "diagonal_copy": lambda x: _A.diagonal_copy(x, 1, 2, 3),
    "unfold_copy": lambda x: _A.unfold_copy(x, 3, 2, 1),
    "alias_copy": lambda x: _A.alias_copy(x) * 2,
    "detach_copy": lambda x: _A.detach_copy(x) * 2,
    "split_copy": lambda x: torch.cat(_A.split_copy(x, 2, 3)[::-1], 3),
    "split_with_sizes_copy": lambda x: torch.cat(_A.split_with_sizes_copy(x, [1, 3, 1], 3)[::-1], 3),
    "unbind_copy": lambda x: torch.stack(_A.unbind_copy(x, 1)[::-1], 1),
    "unsafe_split": lambda x: torch.cat(torch.unsafe_split(x, 2, 3)[::-1], 3),
    "unsafe_split_with_sizes": lambda x: torch.cat(torch.unsafe_split_with_sizes(x, [3, 2], 3)[::-1], 3),
    "unsafe_chunk": lambda x: torch.cat(torch.unsafe_chunk(x, 2, 2)[::-1], 2),
    "positive_resolve": lambda x: torch.positive(x) + x.resolve_conj() + x.resolve_neg(),
}


class CopyForm(nn.Module):
    """One of ``_COPY_CASES`` on a (2, 3, 4, 5) input."""

    def __init__(self, name):
        super().__init__()
        self.name = name

    def forward(self, x):
        return _COPY_CASES[self.name](x)


@pytest.mark.parametrize("name", sorted(_COPY_CASES))
def test_copy_forms_of_view_ops(name):
    """``*_copy`` forms of view ops (what functionalized and edge-dialect programs record), ``broadcast_to``,
    the ``unsafe_*`` splits and the real-tensor no-ops were refused although their view forms convert."""
    model = CopyForm(name)
    x = torch.randn(2, 3, 4, 5)
    ported = porter.convert(model, x, io_layout="torch")
    np.testing.assert_array_equal(run_ported(ported, (x,))[0], model(x).numpy())
