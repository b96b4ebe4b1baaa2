"""The check shared by tests of passes that make MLX's BLAS single-threaded while Porter's threads run GEMMs: the
library's thread count must read what it did before once the pass is done."""

import contextlib

import pytest

from porter.layers import _native


@contextlib.contextmanager
def blas_count_at_two():
    """Porter's pool and the BLAS both at 2 threads inside the block, which gets the BLAS's count getter (the test
    asserts it still reads 2 after its passes); both restored after. Skips where the BLAS has no get/set pair."""
    getter = _native.mlx_blas_symbol("openblas_get_num_threads")
    setter = _native.mlx_blas_symbol("openblas_set_num_threads")
    if getter is None or setter is None:
        pytest.skip("this BLAS has no openblas_get/set_num_threads")
    before_blas, before = getter(), _native.kernels().num_threads()
    _native.set_num_threads(2)
    setter(2)
    try:
        yield getter
    finally:
        _native.set_num_threads(before)
        setter(before_blas)
