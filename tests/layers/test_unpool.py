"""MaxUnpool1d/2d/3d and max_unpool1d/2d/3d against torch, exact (atol=0). The indices come from torch's own
max_pool(return_indices=True), converted to channels-last by the shared helper, so these tests do not depend on
Porter's max pools."""

import mlx.core as mx
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tests.error_helpers import check_error_against_torch
from tests.helpers import check_against_torch, torch_to_mx

from porter.layers import MaxUnpool1d, MaxUnpool2d, MaxUnpool3d
from porter.layers.functional import max_unpool1d, max_unpool2d, max_unpool3d

POOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
TORCH_FN = {1: F.max_unpool1d, 2: F.max_unpool2d, 3: F.max_unpool3d}
PORTER_FN = {1: max_unpool1d, 2: max_unpool2d, 3: max_unpool3d}
TORCH_CLS = {1: torch.nn.MaxUnpool1d, 2: torch.nn.MaxUnpool2d, 3: torch.nn.MaxUnpool3d}
PORTER_CLS = {1: MaxUnpool1d, 2: MaxUnpool2d, 3: MaxUnpool3d}

# (original input shape, kernel, stride, padding, output_size): "full" passes the original torch size (N, C, *S),
# "spatial" its spatial part, None the default size (only where the default recovers the input)
CASES = [
    (1, (2, 3, 8), 2, None, 0, None), (1, (2, 3, 9), 3, 2, 1, "spatial"), (1, (2, 3, 9), 3, 1, 1, "full"),
    (1, (3, 7), 2, None, 0, "spatial"), (1, (2, 3, 10), 4, 3, 2, "spatial"),
    (2, (2, 3, 4, 4), 2, None, 0, None), (2, (2, 3, 5, 5), 2, 2, 0, "spatial"), (2, (2, 3, 7, 9), 3, 2, 1, "full"),
    (2, (2, 3, 6, 7), (3, 2), (2, 1), (1, 0), "spatial"), (2, (3, 5, 6), 2, None, 0, "spatial"),
    (2, (2, 3, 6, 6), 3, 1, 1, None),
    (3, (2, 3, 4, 4, 4), 2, None, 0, None), (3, (2, 3, 5, 6, 7), 2, 2, 0, "full"),
    (3, (2, 2, 5, 6, 5), (3, 2, 3), (2, 1, 2), (1, 0, 1), "spatial"), (3, (2, 4, 5, 5), 2, None, 0, "spatial"),
]
IDS = [f"{c[0]}d-{c[1]}-k{c[2]}-s{c[3]}-p{c[4]}-{c[5]}" for c in CASES]


def _pooled(nd, shape, k, s, p, dtype=torch.float32):
    x = torch.randn(shape)
    y, idx = POOL[nd](x, k, s, p, return_indices=True)
    return y.to(dtype).detach(), idx


def _size(shape, nd, form):
    if form is None:
        return None
    if form == "full":
        return list(shape) if len(shape) == nd + 2 else [1] + list(shape)
    return tuple(shape[-nd:])


@pytest.mark.parametrize("nd, shape, k, s, p, form", CASES, ids=IDS)
def test_functional_matches_torch(nd, shape, k, s, p, form):
    y, idx = _pooled(nd, shape, k, s, p)
    size = _size(shape, nd, form)
    check_against_torch(lambda a, i: TORCH_FN[nd](a, i, k, s, p, size), lambda a, i: PORTER_FN[nd](a, i, k, s, p, size),
                        y, nd=nd, exact=True, extra_inputs=(idx,))


@pytest.mark.parametrize("nd, shape, k, s, p, form", CASES, ids=IDS)
def test_module_matches_torch(nd, shape, k, s, p, form):
    y, idx = _pooled(nd, shape, k, s, p)
    size = _size(shape, nd, form)
    tm, pm = TORCH_CLS[nd](k, s, p), PORTER_CLS[nd](k, s, p)
    check_against_torch(lambda a, i: tm(a, i, size), lambda a, i: pm(a, i, size), y, nd=nd, exact=True,
                        extra_inputs=(idx,))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("nd, shape, k, s, p, form", CASES[::2], ids=IDS[::2])
def test_low_precision(nd, shape, k, s, p, form, dtype):
    y, idx = _pooled(nd, shape, k, s, p, dtype)
    size = _size(shape, nd, form)
    check_against_torch(lambda a, i: TORCH_FN[nd](a, i, k, s, p, size), lambda a, i: PORTER_FN[nd](a, i, k, s, p, size),
                        y, nd=nd, exact=True, extra_inputs=(idx,))


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_duplicate_indices_last_writer_and_full_gradient(nd):
    # every input value aims at one slot and the values differ, so the winner matters: Porter keeps the last
    # writer in row-major order (docs/SEMANTICS.md §8.2), and every duplicate receives the full gradient (a gather)
    shape = (1, 1) + (3,) * nd
    y = torch.arange(1.0, 3 ** nd + 1).reshape(shape)
    idx = torch.full(shape, 5 if nd > 1 else 2, dtype=torch.int64)
    # torch's winner among duplicates depends on its threading (its 3d kernel splits one plane across threads);
    # single-threaded, it is the last writer
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        check_against_torch(lambda a, i: TORCH_FN[nd](a, i, 2, 1, 0), lambda a, i: PORTER_FN[nd](a, i, 2, 1, 0),
                            y, nd=nd, exact=True, extra_inputs=(idx,))
    finally:
        torch.set_num_threads(threads)
    out = PORTER_FN[nd](torch_to_mx(y, True), torch_to_mx(idx, True), 2, 1, 0)
    assert float(np.array(out).reshape(-1)[int(idx.flatten()[0])]) == 3 ** nd


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_explicit_last_writer_path(nd, monkeypatch):
    # the winner resolution used where scatters race (GPU) must give the same result as the sequential CPU scatter
    import porter.layers.unpool as unpool

    monkeypatch.setattr(unpool, "_sequential_scatter", lambda: False)
    test_duplicate_indices_last_writer_and_full_gradient(nd)
    y, idx = _pooled(nd, (2, 3) + (5,) * nd, 3, 1, 1)
    check_against_torch(lambda a, i: TORCH_FN[nd](a, i, 3, 1, 1), lambda a, i: PORTER_FN[nd](a, i, 3, 1, 1), y, nd=nd,
                        exact=True, extra_inputs=(idx,))


def test_duplicates_from_overlapping_pools():
    x = torch.randn(2, 3, 9, 9)
    y, idx = F.max_pool2d(x, 3, 1, 1, return_indices=True)
    assert (idx[..., 1:] == idx[..., :-1]).any()
    check_against_torch(lambda a, i: F.max_unpool2d(a, i, 3, 1, 1), lambda a, i: max_unpool2d(a, i, 3, 1, 1), y, nd=2,
                        exact=True, extra_inputs=(idx,))


def test_empty_output_and_zero_batch():
    y, idx = _pooled(2, (0, 3, 4, 4), 2, None, 0)
    check_against_torch(lambda a, i: F.max_unpool2d(a, i, 2), lambda a, i: max_unpool2d(a, i, 2), y, nd=2, exact=True,
                        extra_inputs=(idx,))
    y, idx = _pooled(2, (1, 2, 4, 4), 2, None, 0)
    # a default size of 0 gives an empty output and no index check, in torch as here
    check_against_torch(lambda a, i: F.max_unpool2d(a, i, 3, 1, 2), lambda a, i: max_unpool2d(a, i, 3, 1, 2), y, nd=2,
                        exact=True, extra_inputs=(idx,))


# ---------------------------------------------------------------------------------------------------- errors
def _mx(t, batched=True):
    return torch_to_mx(t, batched)


@pytest.mark.parametrize("nd, size", [
    (2, (6, 6)), (2, (2, 2)), (2, (2, 2, 2)), (2, [1, 2, -1, 4]), (1, [9]), (1, (1, 1, 1, 1)), (3, (2, 9, 9)),
    (3, (4, 4, 4, 4)),
])
def test_output_size_errors(nd, size):
    y, idx = _pooled(nd, (1, 2) + (4,) * nd, 2, None, 0)
    check_error_against_torch(lambda: TORCH_FN[nd](y, idx, 2, output_size=size),
                              lambda: PORTER_FN[nd](_mx(y), _mx(idx), 2, output_size=size), layer=f"max_unpool{nd}d")


def test_output_size_int_is_a_type_error():
    y, idx = _pooled(1, (1, 2, 4), 2, None, 0)
    check_error_against_torch(lambda: F.max_unpool1d(y, idx, 2, output_size=5),
                              lambda: max_unpool1d(_mx(y), _mx(idx), 2, output_size=5), match="", porter_type=TypeError)


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("shift", [100, -100])
def test_invalid_index(nd, shift):
    y, idx = _pooled(nd, (1, 2) + (4,) * nd, 2, None, 0)
    bad = idx.clone()
    bad.view(-1)[-1] += shift  # one invalid index, so the reported value does not depend on torch's threading
    check_error_against_torch(lambda: TORCH_FN[nd](y, bad, 2), lambda: PORTER_FN[nd](_mx(y), _mx(bad), 2),
                              layer=f"max_unpool{nd}d")


def test_indices_dtype_and_shape():
    y, idx = _pooled(2, (1, 2, 4, 4), 2, None, 0)
    check_error_against_torch(lambda: F.max_unpool2d(y, idx.int(), 2),
                              lambda: max_unpool2d(_mx(y), _mx(idx.int()), 2),
                              match="elements in indices should be type int64 but got", porter_type=TypeError)
    check_error_against_torch(lambda: F.max_unpool2d(y, idx[..., :1], 2),
                              lambda: max_unpool2d(_mx(y), _mx(idx)[:, :, :1], 2),
                              match="Expected shape of indices to be same as that of the input tensor")


def test_input_dtype_and_rank():
    y, idx = _pooled(2, (1, 2, 4, 4), 2, None, 0)
    check_error_against_torch(lambda: F.max_unpool2d(y.long(), idx, 2),
                              lambda: max_unpool2d(_mx(y).astype(mx.int64), _mx(idx), 2),
                              match="not implemented for", porter_type=TypeError)
    with pytest.raises(ValueError, match=r"\[max_unpool2d\] expected 'input' of rank"):
        max_unpool2d(mx.zeros((2, 2)), mx.zeros((2, 2), dtype=mx.int64), 2)
    with pytest.raises(ValueError, match=r"\[MaxUnpool3d\] 'kernel_size'"):
        MaxUnpool3d((2, 2))


# ------------------------------------------------------------------------------------- kernel == stride fast path
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_block_path_special_values(nd):
    # indices of a kernel == stride pool take the scatter-free path; NaN, inf and -0.0 must land bit-exactly
    shape = (2, 3) + (4,) * (nd - 1) + (5,)
    y, idx = _pooled(nd, shape, 2, None, 0)
    flat = y.view(-1)
    flat[0], flat[1], flat[2], flat[3] = float("nan"), float("inf"), -float("inf"), -0.0
    size = tuple(shape[2:])
    check_against_torch(lambda a, i: TORCH_FN[nd](a, i, 2, None, 0, size),
                        lambda a, i: PORTER_FN[nd](a, i, 2, None, 0, size), y, nd=nd, exact=True, extra_inputs=(idx,))
    out = np.array(PORTER_FN[nd](_mx(y), _mx(idx), 2, None, 0, size))
    assert np.signbit(out).sum() == np.signbit(TORCH_FN[nd](y, idx, 2, None, 0, size).numpy()).sum()


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_block_path_falls_back_for_other_indices(nd):
    # kernel == stride, but one index points into a neighbouring block (a legal unpool input): the scatter-free
    # form cannot express it, so the result must come from the general path, equal to torch's
    y, idx = _pooled(nd, (2, 3) + (4,) * nd, 2, None, 0)
    moved = idx.clone()
    moved.view(-1)[0] = idx.view(-1)[1]  # now a duplicate outside its own block
    moved.view(-1)[5] = 0 if int(idx.view(-1)[5]) != 0 else 1
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # torch's duplicate winner is the last writer only single-threaded
    try:
        check_against_torch(lambda a, i: TORCH_FN[nd](a, i, 2), lambda a, i: PORTER_FN[nd](a, i, 2), y, nd=nd,
                            exact=True, extra_inputs=(moved,))
    finally:
        torch.set_num_threads(threads)


@pytest.mark.pure_mlx
def test_block_path_is_taken(monkeypatch):
    import porter.layers.unpool as unpool

    calls = []
    real = unpool._masked_broadcast
    monkeypatch.setattr(unpool, "_masked_broadcast", lambda *a: calls.append(a) or real(*a))
    y, idx = _pooled(2, (2, 3, 8, 9), 2, None, 0)
    max_unpool2d(_mx(y), _mx(idx), 2, output_size=(8, 9))
    assert calls == [((2, 2), (8, 9))]  # (block, output plane)
    y, idx = _pooled(2, (2, 3, 9, 9), 3, 2, 1)
    max_unpool2d(_mx(y), _mx(idx), 3, 2, 1)
    assert len(calls) == 1
