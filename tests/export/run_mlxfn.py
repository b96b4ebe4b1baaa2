"""Run .mlxfn files in a fresh interpreter where importing torch or porter fails (what a user of the file has).

Usage: python run_mlxfn.py JOBS.json
JOBS.json: a list of {"file": PATH, "inputs": [NPY, ...], "out": PREFIX}; writes PREFIX0.npy, PREFIX1.npy, ...
(one per output; a bfloat16 output widened to float32, which holds it exactly), or PREFIX.error.txt with MLX's
message when the call raises.
"""

import json
import sys


class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "porter"):
            raise ImportError(f"{name} must not be needed to run an .mlxfn file (tried to import {name})")
        return None


sys.meta_path.insert(0, _Block())

for name in ("porter", "torch"):
    try:
        __import__(name)
    except ImportError:
        pass
    else:
        raise SystemExit(f"the blocker failed: {name} imported")

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

with open(sys.argv[1]) as fh:
    jobs = json.load(fh)
for job in jobs:
    fn = mx.import_function(job["file"])
    arrays = [np.load(path) for path in job["inputs"]]  # mx.array reads float64 numpy as float32 unless told
    inputs = [mx.array(a, dtype=mx.float64) if a.dtype == np.float64 else mx.array(a) for a in arrays]
    try:
        outputs = fn(*inputs)
        mx.eval(outputs)
    except Exception as exc:  # a fixed-shape file at another size: MLX's refusal is the expected result
        with open(job["out"] + ".error.txt", "w") as fh:
            fh.write(str(exc))
        continue
    for i, out in enumerate(outputs):  # numpy has no bfloat16: such an output is saved widened to float32
        np.save(f"{job['out']}{i}.npy", np.array(out.astype(mx.float32) if out.dtype == mx.bfloat16 else out))
leaked = sorted(name for name in sys.modules if name.split(".")[0] in ("torch", "porter"))
if leaked:
    raise SystemExit(f"imported: {leaked}")
print("ran", len(jobs), "jobs without torch or porter")
