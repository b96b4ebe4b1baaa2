import os

import numpy as np
import pytest
import torch


def _share_the_cpus_between_workers():
    """Under pytest-xdist (``-n N``, what CI runs) each worker gets its share of the CPUs: N workers each running
    torch, OpenBLAS and Porter's native pool at every core would oversubscribe the machine. The variables are set only
    where the user has not set them, before ``import porter`` reads them (the native kernels' pool and the BLAS are
    sized at load) and inherited by the subprocesses tests start. Tests that need a given count set it themselves
    (``_native.set_num_threads``, ``torch.set_num_threads``) and restore the previous one."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if workers <= 1:
        return
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    share = max(1, cpus // workers)
    for variable in ("PORTER_NUM_THREADS", "PORTER_BLAS_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(variable, str(share))
    torch.set_num_threads(share)


_share_the_cpus_between_workers()

# Before any test module imports mlx.core: porter hands MLX an optimized BLAS only if it is imported first.
import porter  # noqa: E402,F401
import mlx.core as mx  # noqa: E402  (after porter: BLAS first)

# The capture's time budget (converters/capture_strategy.py) is wall-clock: on a shared, loaded CI machine it would
# make which dims stay dynamic depend on the load. Tests run without it; tests of the budget set it themselves.
os.environ.setdefault("PORTER_CAPTURE_BUDGET", "off")


@pytest.fixture(autouse=True)
def _seed():
    """Every test sees the same random data whatever ran before it (and on a re-run of that test alone)."""
    torch.manual_seed(0)
    np.random.seed(0)
    mx.random.seed(0)
