"""A seeded slice of tests/pooling_fuzz.py (the long fuzzer: scripts/fuzz_pooling.py, run by hand and under
ASan/UBSan): every pooling family, forward and backward, against torch in the test, on what the sweeps (test_sweep_*.py) do not draw: channel
counts 15/16/17/32/48/272 (the native kernels' register-resident float32 paths), float64 and small integer dtypes,
non-contiguous inputs (transposed, strided, sliced-channel and broadcast views), fractional samples of 0 and just
below 1, unpool with many duplicate indices, and a few inputs large enough for the kernels' thread pool.
Runs on both backends (the ``backend`` fixture); a failure names the seed, which the script reruns alone."""

import pytest
import torch

from tests import pooling_fuzz as fuzz

pytestmark = pytest.mark.slow  # subprocesses or long sweeps: `pytest -m "not slow"` skips them

CONFIGS = 480
BLOCKS = 6  # seeds in blocks: one test per block keeps the report short and the overhead low


@pytest.fixture(autouse=True)
def _single_threaded_torch():
    # torch's unpool keeps the last duplicate only on one thread (docs/SEMANTICS.md §8.2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("block", range(BLOCKS))
def test_fuzz_slice(block, backend):
    failures = []
    per_block = CONFIGS // BLOCKS
    for seed in range(block * per_block, (block + 1) * per_block):
        case = fuzz.make_case(50_000 + seed)
        problems = fuzz.run_case(case, backend)
        if problems:
            failures.append(f"seed={case.seed}: {case}\n  " + "\n  ".join(problems))
    assert not failures, f"{len(failures)} configs differ from torch (rerun one: scripts/fuzz_pooling.py " \
                         f"--seed SEED --configs 1 --backend {'native' if backend == 'native' else 'mlx'}):\n" + \
                         "\n".join(failures[:5])
