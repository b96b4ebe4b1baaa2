"""Run a converted model in a fresh interpreter where importing torch fails (what users of the artifact get).

Usage: python torch_free.py DIR INPUT.npy [INPUT2.npy ...] OUTPUT_PREFIX
Writes OUTPUT_PREFIX0.npy, OUTPUT_PREFIX1.npy, ... (one per model output).
"""

import sys


class _BlockTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"torch must not be imported to load a converted model (tried {name})")
        return None


sys.meta_path.insert(0, _BlockTorch())

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402

import porter  # noqa: E402

directory, *inputs, prefix = sys.argv[1:]
model = porter.load(directory)
outputs = model(*[mx.array(np.load(path)) for path in inputs])
outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
for i, out in enumerate(outputs):
    np.save(f"{prefix}{i}.npy", np.array(out))
leaked = sorted(name for name in sys.modules if name == "torch" or name.startswith("torch."))
if leaked:
    raise SystemExit(f"torch was imported: {leaked}")
