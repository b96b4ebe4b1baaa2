"""Constant folding at capture (``converters/capture_fold.py``): what it saves per call, and what it costs at
conversion.

    PORTER_NUM_THREADS=1 PORTER_BLAS_THREADS=1 python benchmarks/constant_folding.py [--rounds 7]

1. Per call: an attention block that builds its sinusoidal position table and its relative-position index in the
   forward (constants only), converted with folding on and off (``capture_fold.ENABLED``), and torch; process CPU
   time per call, min over rounds, the three sides alternated within each round, one thread each.
2. Conversion: ``porter.convert`` of the same block, ResNet-18 and the Swin twin of tests/models (no constants to
   fold: the analysis's cost alone), folding on and off alternated; process CPU time, min over rounds.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import porter  # noqa: E402  (first: MLX's BLAS)
import mlx.core as mx  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from benchmarks.cpu_time import cpu_per_call  # noqa: E402
from porter.converters import capture_fold  # noqa: E402


class PositionalAttention(nn.Module):
    """One attention block over a 14x14 grid whose position table and relative-position index are computed in the
    forward from constants (sinusoids of ``arange``; Swin's index from ``meshgrid``)."""

    def __init__(self, side=14, dim=128, heads=4):
        super().__init__()
        self.side, self.dim, self.heads = side, dim, heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.table = nn.Parameter(torch.randn((2 * side - 1) ** 2, heads) * 0.02)

    def forward(self, x):  # (B, side*side, dim)
        n, d, h = self.side * self.side, self.dim, self.heads
        pos = torch.arange(n, dtype=torch.float32)[:, None]
        freq = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
        x = x + torch.cat([torch.sin(pos * freq), torch.cos(pos * freq)], dim=-1)
        coords = torch.stack(torch.meshgrid(torch.arange(self.side), torch.arange(self.side), indexing="ij"))
        coords = coords.flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (self.side - 1)
        index = rel[..., 0] * (2 * self.side - 1) + rel[..., 1]
        bias = self.table[index.reshape(-1)].reshape(n, n, h).permute(2, 0, 1)
        q, k, v = self.qkv(x).reshape(x.shape[0], n, 3, h, d // h).permute(2, 0, 3, 1, 4)
        attn = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // h) + bias, dim=-1)
        return (attn @ v).transpose(1, 2).reshape(x.shape[0], n, d)


def _convert(model, x, enabled: bool):
    capture_fold.ENABLED = enabled
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return porter.convert(model, x, io_layout="torch")
    finally:
        capture_fold.ENABLED = True


def per_call(rounds: int) -> None:
    torch.manual_seed(0)
    model = PositionalAttention().eval()
    print("per call (process CPU ms, min over rounds; one thread):")
    for batch in (1, 8):
        x = torch.randn(batch, 196, 128)
        ports = {on: _convert(model, (torch.randn(2, 196, 128),), on) for on in (True, False)}
        folded = sum(n.startswith("_folded_") for n in ports[True].graph["params"])
        nodes = {on: len(p.graph["nodes"]) for on, p in ports.items()}
        xm = mx.array(x.numpy())
        best = {"fold": math.inf, "no fold": math.inf, "torch": math.inf}
        for _ in range(rounds):
            best["fold"] = min(best["fold"], cpu_per_call(lambda: mx.eval(ports[True](xm)), 20))
            best["no fold"] = min(best["no fold"], cpu_per_call(lambda: mx.eval(ports[False](xm)), 20))
            with torch.no_grad():
                best["torch"] = min(best["torch"], cpu_per_call(lambda: model(x), 20))
        print(f"  batch {batch}: folded {best['fold'] * 1e3:.3f}  unfolded {best['no fold'] * 1e3:.3f}  "
              f"torch {best['torch'] * 1e3:.3f}  (graph nodes {nodes[True]} vs {nodes[False]}, "
              f"{folded} folded constants)")


def conversion(rounds: int) -> None:
    from porter.examples import EXAMPLES
    from tests.models._common import randomize_
    from tests.models.shape_guarded import SwinSmall

    cases = [("PositionalAttention", PositionalAttention().eval(), (torch.randn(2, 196, 128),)),
             ("resnet18", EXAMPLES["resnet18"]().eval(), (torch.randn(1, 3, 224, 224),)),
             ("SwinSmall twin", randomize_(SwinSmall(), 0).eval(), (torch.randn(2, 3, 64, 64),))]
    print("conversion (process CPU s, min over rounds):")
    for name, model, x in cases:
        best = {True: math.inf, False: math.inf}
        for _ in range(rounds):
            for on in (True, False):
                start = time.process_time()
                _convert(model, x, on)
                best[on] = min(best[on], time.process_time() - start)
        print(f"  {name}: folding on {best[True]:.2f}  off {best[False]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--conversion-rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    per_call(args.rounds)
    conversion(args.conversion_rounds)


if __name__ == "__main__":
    main()
