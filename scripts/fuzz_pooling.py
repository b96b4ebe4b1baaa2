"""Long fuzz of Porter's pooling layers against torch, run by hand (and under ASan/UBSan).

A thin wrapper: the fuzzer itself is tests/pooling_fuzz.py (its docstring has the options and the sanitizer
recipe), shared with the seeded slice the test suite runs (tests/layers/test_fuzz.py).

    .venv/bin/python scripts/fuzz_pooling.py --configs 3000 --seed 0 [--backend native|mlx|both] [--threads N]
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository root: `tests` is a package

from tests.pooling_fuzz import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
