"""Random architectures through the converter against torch (tests/model_fuzz.py). Usage:

    .venv/bin/python scripts/fuzz_models.py --seeds 200 [--start 0] [--ops 10] [--no-grad] [--dtype float64]

Prints one line per seed (ok / refused_b / FAIL with the network and what differed); exit status 1 on any failure.
"""

import argparse
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import porter  # noqa: E402,F401  (before torch: BLAS policy)

from tests import model_fuzz  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--ops", type=int, default=10)
    parser.add_argument("--no-grad", action="store_true")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    counts, failed = {}, 0
    for seed in range(args.start, args.start + args.seeds):
        result = model_fuzz.run_seed(seed, args.ops, grad=not args.no_grad, dtype=args.dtype)
        counts[result["status"]] = counts.get(result["status"], 0) + 1
        if result["status"] == "fail":
            failed += 1
            print(f"FAIL seed={seed}: {result['net']}\n  " + "\n  ".join(result["problems"]), flush=True)
        else:
            print(f"{result['status']} seed={seed}" + (f" ({result['refusal'][:160]})" if "refusal" in result
                                                       else ""), flush=True)
    print(counts)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
