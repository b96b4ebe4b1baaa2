"""Seeded random-architecture fuzzer for the converter, torch the oracle (the core; tests/converters/
test_model_fuzz.py runs a seeded slice, scripts/fuzz_models.py the long run).

Each seed builds a random network out of torch.nn layers and functional ops as users write them: convolutions
(strides, paddings incl. "same", dilation, groups, every padding mode), transposed convs with output padding,
max/avg/adaptive/LP pooling with ceil mode, norms (batch in eval with random statistics, group, instance, layer norm
over channels through permutes), activations, resampling, pixel (un)shuffle, explicit pads, channel slices, strided
slices, rolls and flips, residual adds and concatenations with earlier values, squeeze-excitation gates, channel
shuffles, then a hop to tokens (``flatten(2).transpose(1, 2)``: linears, layer norms, multi-head attention, a conv1d
over the sequence through a transpose, cumsum), to volumes (``(N, C, 3, H, W)``: conv3d, transposed conv3d, 3-d pools,
trilinear resampling, back by a mean/max over depth) and 1-d signals (conv1d, pools, linear resampling), and to
flat features (linears, eval batch norm). Every op is kept
only if torch runs it at the example size (A) and at a second size (B: other batch, height and width), so the
network is valid at both.

The port (``porter.convert(..., dynamic="auto")``, the torch I/O layout) must give torch's numbers at A, and at B
either torch's numbers or a refusal that is an exception (a silently different result is a failure). Values are
compared against max |torch| of each output (``REL``); gradients of a weighted sum with respect to the input at A.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

REL = 2e-4  # max |porter - torch| <= REL * max |torch| per output (float32, deep random stacks)
ACTS = ("relu", "gelu", "gelu_tanh", "silu", "hardswish", "leaky_relu", "elu", "sigmoid", "tanh", "softplus", "mish",
        "relu6", "hardsigmoid", "selu")


def activation(name: str, x):
    return {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"), "silu": F.silu,
            "hardswish": F.hardswish, "leaky_relu": lambda v: F.leaky_relu(v, 0.1), "elu": F.elu,
            "sigmoid": torch.sigmoid, "tanh": torch.tanh, "softplus": F.softplus, "mish": F.mish,
            "relu6": F.relu6, "hardsigmoid": F.hardsigmoid, "selu": F.selu}[name](x)


@dataclasses.dataclass
class Step:
    """One op: ``kind`` names it, ``args`` its parameters, ``inputs`` indices of earlier values (0: the input)."""
    kind: str
    args: dict
    inputs: tuple
    module: str | None = None


class FuzzNet(nn.Module):
    """Runs ``steps`` in order over a list of values (the input first); returns the values ``outputs`` names."""

    def __init__(self, steps, modules: dict, outputs):
        super().__init__()
        self.steps = steps
        self.mods = nn.ModuleDict(modules)
        self.outputs = tuple(outputs)

    def forward(self, x):
        values = [x]
        for step in self.steps:
            values.append(apply(step, [values[i] for i in step.inputs], self.mods[step.module] if step.module else None))
        return tuple(values[i] for i in self.outputs)


def apply(step: Step, xs, mod):  # noqa: C901  (one branch per op kind: the vocabulary in one place)
    a, x = step.args, xs[0]
    k = step.kind
    if mod is not None and k in ("module", "conv", "convt", "norm", "linear", "conv1d", "prelu"):
        return mod(x)
    if k == "act":
        return activation(a["name"], x)
    if k == "maxpool":
        return F.max_pool2d(x, a["k"], a["s"], a["p"], a["d"], ceil_mode=a["ceil"])
    if k == "avgpool":
        return F.avg_pool2d(x, a["k"], a["s"], a["p"], ceil_mode=a["ceil"], count_include_pad=a["cip"],
                            divisor_override=a["div"])
    if k == "lppool":
        return F.lp_pool2d(x.abs() + 0.1, a["norm"], a["k"], a["s"], ceil_mode=a["ceil"])
    if k == "adaptive":
        fn = F.adaptive_avg_pool2d if a["avg"] else F.adaptive_max_pool2d
        return fn(x, a["size"])
    if k == "interp":
        if a["mode"] == "nearest":
            return F.interpolate(x, scale_factor=a["scale"], mode="nearest")
        return F.interpolate(x, scale_factor=a["scale"], mode=a["mode"], align_corners=a["ac"])
    if k == "interp_size":
        return F.interpolate(x, size=(x.shape[2] + a["dh"], x.shape[3] + a["dw"]), mode=a["mode"],
                             **({} if a["mode"] == "nearest" else {"align_corners": a["ac"]}))
    if k == "add":
        return x + xs[1] * a["w"]
    if k == "mul":
        return x * torch.sigmoid(xs[1])
    if k == "cat":
        return torch.cat([x, xs[1]], dim=a["dim"])
    if k == "se":
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(mod[1](F.relu(mod[0](s))))
    if k == "ln_channels":
        y = mod[0](x.permute(0, 2, 3, 1))
        return mod[1](y).permute(0, 3, 1, 2)
    if k == "pixel_shuffle":
        return F.pixel_shuffle(x, 2)
    if k == "pixel_unshuffle":
        return F.pixel_unshuffle(x, 2)
    if k == "pad":
        return F.pad(x, a["pads"], mode=a["mode"], **({"value": 0.5} if a["mode"] == "constant" else {}))
    if k == "slice_c":
        return x[:, a["lo"]:a["hi"]]
    if k == "slice_s":
        return x[:, :, a["h0"]::a["st"], a["w0"]:]
    if k == "roll":
        return torch.roll(x, a["shift"], a["dims"])
    if k == "flip":
        return torch.flip(x, a["dims"])
    if k == "shuffle":
        n, c, h, w = x.shape
        return x.view(n, a["g"], c // a["g"], h, w).transpose(1, 2).reshape(n, c, h, w)
    if k == "softmax":
        return torch.softmax(x, a["dim"])
    if k == "reduce":
        return x.amax(a["dim"], keepdim=True) + x.sum(a["dim"], keepdim=True) * 0.1
    if k == "to_seq":
        return x.flatten(2).transpose(1, 2)
    if k == "to_vec":
        return x.mean((2, 3)) if a["mean"] else F.adaptive_max_pool2d(x, 1).flatten(1)
    if k == "seq_to_vec":
        return x.mean(1)
    if k == "attn":
        out, _ = mod(x, x, x, need_weights=False)
        return out
    if k == "sdpa":
        n, length, d = x.shape
        q = x.view(n, length, a["heads"], d // a["heads"]).transpose(1, 2)
        return F.scaled_dot_product_attention(q, q * 0.5, q, is_causal=a["causal"]).transpose(1, 2).reshape(
            n, length, d)
    if k == "seq_conv":
        return mod(x.transpose(1, 2)).transpose(1, 2)
    if k == "cumsum":
        return torch.cumsum(x, 1) / x.shape[1]
    if k == "to_vol":  # (N, C, H, W) -> (N, C, 3, H, W): three different depth slices
        return torch.stack([x, torch.roll(x, 1, 3), x * 0.5 + 0.1], dim=2)
    if k == "vol_to_img":
        return x.mean(2) if a["mean"] else x.amax(2)
    if k == "to_sig":  # (N, C, H, W) -> (N, C, W)
        return x.mean(2)
    if k == "sig_to_vec":
        return x.mean(-1)
    if k == "maxpool_nd":
        fn = (F.max_pool1d, F.max_pool2d, F.max_pool3d)[x.ndim - 3]
        return fn(x, a["k"], a["s"], a["p"], a["d"], ceil_mode=a["ceil"])
    if k == "avgpool_nd":
        fn = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[x.ndim - 3]
        return fn(x, a["k"], a["s"], a["p"], ceil_mode=a["ceil"], count_include_pad=a["cip"])
    if k == "adaptive_nd":
        fn = ((F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d) if a["avg"] else
              (F.adaptive_max_pool1d, F.adaptive_max_pool2d, F.adaptive_max_pool3d))[x.ndim - 3]
        return fn(x, a["size"])
    if k == "interp_nd":
        mode = a["mode"] if a["mode"] == "nearest" else ("linear", "bilinear", "trilinear")[x.ndim - 3]
        return F.interpolate(x, scale_factor=a["scale"], mode=mode,
                             **({} if mode == "nearest" else {"align_corners": a["ac"]}))
    raise AssertionError(k)


def _rand_weights(module: nn.Module, rng: random.Random):
    """Re-randomise every parameter and float buffer (norm statistics too), so no branch hides behind a 0 or 1."""
    gen = torch.Generator().manual_seed(rng.randrange(2 ** 31))
    with torch.no_grad():
        for name, p in list(module.named_parameters()) + list(module.named_buffers()):
            if not p.is_floating_point():
                continue
            if "running_var" in name:
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            else:
                scale = 1.0 / max(1.0, (p[0].numel() if p.ndim > 1 else 1) ** 0.5)
                p.copy_(torch.randn(p.shape, generator=gen) * (scale if p.ndim > 1 else 0.5) +
                        (1.0 if name.endswith("weight") and p.ndim == 1 else 0.0))


def _normalizes_constants(module, x) -> bool:
    """Whether a norm layer would normalise a (near-)constant group of ``x``: its output is then rounding noise
    times 1/sqrt(eps) on torch's side and the port's alike (a softmax over one channel feeding a GroupNorm), not a
    comparison."""
    if isinstance(module, nn.GroupNorm):
        groups = x.reshape(x.shape[0], module.num_groups, -1)
    elif isinstance(module, (nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d)):
        groups = x.flatten(2)
    elif isinstance(module, nn.LayerNorm):
        groups = x.reshape(*x.shape[:x.ndim - len(module.normalized_shape)], -1)
    elif isinstance(module, nn.ModuleList) and len(module) and isinstance(module[0], nn.LayerNorm):
        groups = x.movedim(1, -1)  # ln_channels: a LayerNorm over the channels
    else:
        return False
    return bool(groups.var(-1, unbiased=False).min() < 1e-6)


class Builder:
    """Grows a network one random op at a time, keeping an op only if torch runs it at both sizes."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        r = self.rng
        c = r.choice([1, 3, 4, 6])
        h, w = r.randint(6, 13), r.randint(6, 13)
        h2, w2 = h + r.choice([-3, -1, 1, 2, 5]), w + r.choice([-2, 1, 3, 4])
        gen = torch.Generator().manual_seed(seed)
        self.xa = torch.randn(2, c, h, w, generator=gen)
        self.xb = torch.randn(3, c, max(h2, 4), max(w2, 4), generator=gen)
        self.steps, self.modules = [], {}
        self.values = [(self.xa, self.xb, "img")]  # (value at A, value at B, kind)

    # -- helpers -----------------------------------------------------------------------------------------------------
    def _try(self, step: Step, module=None, kind=None) -> bool:
        name = None
        if module is not None:
            name = f"m{len(self.modules)}"
            _rand_weights(module, self.rng)
            module.eval()
            step.module = name
        xs_a = [self.values[i][0] for i in step.inputs]
        xs_b = [self.values[i][1] for i in step.inputs]
        try:
            with torch.no_grad():
                ya, yb = apply(step, xs_a, module), apply(step, xs_b, module)
        except (RuntimeError, ValueError, IndexError):
            return False
        if ya.numel() == 0 or yb.numel() == 0 or ya.numel() > 200_000 or yb.numel() > 200_000 or \
                not torch.isfinite(ya).all() or not torch.isfinite(yb).all() or ya.abs().max() > 1e4:
            return False
        if any(_normalizes_constants(module, x) for x in (xs_a[0], xs_b[0])):
            return False
        if module is not None:
            self.modules[name] = module
        self.steps.append(step)
        self.values.append((ya, yb, kind or self.values[step.inputs[0]][2]))
        return True

    def _normalizes_one(self, i: int, per_group_channels: int, spatial: bool) -> bool:
        """Whether a norm over ``per_group_channels`` channels (times the spatial positions) of value ``i`` would
        normalise single values at either size: its output is its bias, and its gradient 1/sqrt(eps)-amplified
        rounding noise on torch's side and the port's (not a comparison)."""
        for v in self.values[i][:2]:
            count = per_group_channels * (v.shape[2] * v.shape[3] if spatial else 1)
            if count < 2:
                return True
        return False

    def _pool_args(self, avg: bool, divisor: bool = False) -> dict:
        """Kernel, stride (None: the kernel), padding up to half the kernel, ceil mode; max: dilation; avg:
        count_include_pad and (``divisor``) a divisor_override."""
        r = self.rng
        k = r.choice([2, 3])
        args = {"k": k, "s": r.choice([1, 2, None]), "p": r.randint(0, k // 2)}
        if not avg:
            args["d"] = r.choice([1, 1, 2])
        args["ceil"] = r.random() < 0.5
        if avg:
            args["cip"] = r.random() < 0.5
            if divisor:
                args["div"] = r.choice([None, None, 3])
        return args

    def _pick(self, kind: str, recent: int = 4):
        idx = [i for i, v in enumerate(self.values) if v[2] == kind]
        return idx[-1] if self.rng.random() < 0.7 else self.rng.choice(idx[-recent:])

    def _partner(self, i: int, same: str):
        """An earlier value matching value ``i`` at both sizes: its whole shape (``same="shape"``) or all but dim 1."""
        a, b = self.values[i][0].shape, self.values[i][1].shape
        ok = []
        for j, (va, vb, kind) in enumerate(self.values):
            if j == i or va.ndim != len(a):
                continue
            if same == "shape" and va.shape == a and vb.shape == b:
                ok.append(j)
            if same == "dim1" and va.shape[:1] + va.shape[2:] == a[:1] + a[2:] and \
                    vb.shape[:1] + vb.shape[2:] == b[:1] + b[2:]:
                ok.append(j)
        return self.rng.choice(ok) if ok else None

    # -- op families -------------------------------------------------------------------------------------------------
    def img_op(self, i: int) -> bool:  # noqa: C901
        r = self.rng
        c = self.values[i][0].shape[1]
        choice = r.choice(["conv", "conv", "conv", "dwconv", "convt", "maxpool", "avgpool", "lppool", "adaptive",
                           "bn", "gn", "inorm", "ln", "act", "act", "prelu", "interp", "interp_size", "add", "cat",
                           "mul", "se", "pixel_shuffle", "pixel_unshuffle", "pad", "slice_c", "slice_s", "roll",
                           "flip", "shuffle", "softmax", "reduce"])
        if choice in ("conv", "dwconv"):
            k = r.choice([1, 2, 3, 3, 5])
            stride = r.choice([1, 1, 2, 3])
            pad = r.choice([0, 1, 2, "same"]) if stride == 1 else r.choice([0, 1, 2])
            if pad != "same" and pad > k // 2 + 1:
                pad = k // 2
            cout = c if choice == "dwconv" else r.choice([c, 4, 6, 8])
            groups = c if choice == "dwconv" else r.choice([g for g in (1, 2, 3) if c % g == 0 and cout % g == 0])
            mode = r.choice(["zeros", "zeros", "reflect", "replicate", "circular"])
            conv = nn.Conv2d(c, cout, k, stride, pad, dilation=r.choice([1, 1, 2]), groups=groups,
                             bias=r.random() < 0.7, padding_mode=mode)
            return self._try(Step("conv", {}, (i,)), conv)
        if choice == "convt":
            stride = r.choice([1, 2, 2, 3])
            dil = r.choice([1, 1, 2])
            cout = r.choice([c, 4, 6])
            groups = r.choice([g for g in (1, 2) if c % g == 0 and cout % g == 0])
            conv = nn.ConvTranspose2d(c, cout, r.choice([1, 2, 3, 4]), stride, r.choice([0, 1]),
                                      output_padding=r.randrange(max(stride, dil)), groups=groups, dilation=dil,
                                      bias=r.random() < 0.7)
            return self._try(Step("convt", {}, (i,)), conv)
        if choice in ("maxpool", "avgpool"):
            return self._try(Step(choice, self._pool_args(choice == "avgpool", divisor=True), (i,)))
        if choice == "lppool":
            return self._try(Step("lppool", {"norm": r.choice([1, 2, 3]), "k": r.choice([2, 3]),
                                             "s": r.choice([1, 2]), "ceil": r.random() < 0.5}, (i,)))
        if choice == "adaptive":
            size = r.choice([1, 2, 3, (2, None), (None, 3), (3, 5)])
            return self._try(Step("adaptive", {"avg": r.random() < 0.5, "size": size}, (i,)))
        if choice == "bn":
            return self._try(Step("norm", {}, (i,)), nn.BatchNorm2d(c))
        if choice == "gn":
            g = r.choice([g for g in (1, 2, 3, c) if c % g == 0])
            if self._normalizes_one(i, c // g, True):
                return False
            return self._try(Step("norm", {}, (i,)), nn.GroupNorm(g, c, affine=r.random() < 0.8))
        if choice == "inorm":
            if self._normalizes_one(i, 1, True):
                return False
            return self._try(Step("norm", {}, (i,)), nn.InstanceNorm2d(c, affine=r.random() < 0.5))
        if choice == "ln":
            if c < 2:
                return False
            return self._try(Step("ln_channels", {}, (i,)), nn.ModuleList([nn.LayerNorm(c), nn.Linear(c, r.choice([c, 4, 8]))]))
        if choice == "act":
            return self._try(Step("act", {"name": r.choice(ACTS)}, (i,)))
        if choice == "prelu":
            return self._try(Step("prelu", {}, (i,)), nn.PReLU(r.choice([1, c])))
        if choice == "interp":
            mode = r.choice(["nearest", "bilinear", "bicubic"])
            return self._try(Step("interp", {"mode": mode, "scale": r.choice([2, 2, 0.5, 1.5]),
                                             "ac": r.random() < 0.5}, (i,)))
        if choice == "interp_size":
            return self._try(Step("interp_size", {"mode": r.choice(["nearest", "bilinear"]), "dh": r.randint(-2, 3),
                                                  "dw": r.randint(-2, 3), "ac": r.random() < 0.5}, (i,)))
        if choice in ("add", "mul"):
            j = self._partner(i, "shape")
            return j is not None and self._try(Step(choice, {"w": r.choice([1.0, 0.5, -1.0])}, (i, j)))
        if choice == "cat":
            j = self._partner(i, "dim1")
            return j is not None and self._try(Step("cat", {"dim": 1}, (i, j)))
        if choice == "se":
            mid = max(1, c // 2)
            return self._try(Step("se", {}, (i,)), nn.ModuleList([nn.Conv2d(c, mid, 1), nn.Conv2d(mid, c, 1)]))
        if choice in ("pixel_shuffle", "pixel_unshuffle"):
            return self._try(Step(choice, {}, (i,)))
        if choice == "pad":
            mode = r.choice(["constant", "reflect", "replicate", "circular"])
            pads = [r.randint(0, 2) for _ in range(4)]
            if mode == "constant" and r.random() < 0.3:
                pads[r.randrange(4)] = -1  # cropping
            return self._try(Step("pad", {"mode": mode, "pads": pads}, (i,)))
        if choice == "slice_c":
            if c < 2:
                return False
            lo = r.randrange(c - 1)
            return self._try(Step("slice_c", {"lo": lo, "hi": r.randint(lo + 1, c)}, (i,)))
        if choice == "slice_s":
            return self._try(Step("slice_s", {"h0": r.randint(0, 1), "st": r.choice([1, 2]), "w0": r.randint(0, 2)},
                                  (i,)))
        if choice == "roll":
            return self._try(Step("roll", {"shift": (r.randint(-3, 3), r.randint(-3, 3)),
                                           "dims": r.choice([(2, 3), (1, 3)])}, (i,)))
        if choice == "flip":
            return self._try(Step("flip", {"dims": r.choice([(1,), (2,), (3,), (1, 3)])}, (i,)))
        if choice == "shuffle":
            g = r.choice([g for g in (2, 3) if c % g == 0] or [1])
            return g > 1 and self._try(Step("shuffle", {"g": g}, (i,)))
        if choice == "softmax":
            return self._try(Step("softmax", {"dim": r.choice([1, 3, -1])}, (i,)))
        return self._try(Step("reduce", {"dim": r.choice([1, 2, 3])}, (i,)))

    def seq_op(self, i: int) -> bool:
        r = self.rng
        d = self.values[i][0].shape[-1]
        choice = r.choice(["linear", "ln", "act", "attn", "sdpa", "seq_conv", "add", "cumsum", "softmax"])
        if choice == "linear":
            return self._try(Step("linear", {}, (i,)), nn.Linear(d, r.choice([d, 4, 8, 12]), bias=r.random() < 0.8))
        if choice == "ln":
            if d < 2:
                return False
            return self._try(Step("norm", {}, (i,)), nn.LayerNorm(d, elementwise_affine=r.random() < 0.8))
        if choice == "act":
            return self._try(Step("act", {"name": r.choice(ACTS)}, (i,)))
        if choice == "attn":
            heads = r.choice([h for h in (1, 2, 4) if d % h == 0])
            return self._try(Step("attn", {}, (i,)), nn.MultiheadAttention(d, heads, batch_first=True))
        if choice == "sdpa":
            heads = r.choice([h for h in (1, 2, 4) if d % h == 0])
            return self._try(Step("sdpa", {"heads": heads, "causal": r.random() < 0.5}, (i,)))
        if choice == "seq_conv":
            k = r.choice([1, 3, 5])
            return self._try(Step("seq_conv", {}, (i,)), nn.Conv1d(d, d, k, padding=k // 2, groups=r.choice([1, d])))
        if choice == "add":
            j = self._partner(i, "shape")
            return j is not None and self._try(Step("add", {"w": 0.5}, (i, j)))
        if choice == "cumsum":
            return self._try(Step("cumsum", {}, (i,)))
        return self._try(Step("softmax", {"dim": -1}, (i,)))

    def vec_op(self, i: int) -> bool:
        r = self.rng
        f = self.values[i][0].shape[-1]
        choice = r.choice(["linear", "bn", "act", "ln"])
        if choice == "linear":
            return self._try(Step("linear", {}, (i,)), nn.Linear(f, r.choice([4, 8, 10])))
        if choice == "bn":
            return self._try(Step("norm", {}, (i,)), nn.BatchNorm1d(f))
        if choice == "ln":
            if f < 2:
                return False
            return self._try(Step("norm", {}, (i,)), nn.LayerNorm(f))
        return self._try(Step("act", {"name": r.choice(ACTS)}, (i,)))

    def nd_op(self, i: int) -> bool:
        """An op on a 1-d signal (N, C, L) or a volume (N, C, D, H, W)."""
        r = self.rng
        v = self.values[i][0]
        c, nd = v.shape[1], v.ndim - 2
        conv, convt, bn = ((nn.Conv1d, nn.ConvTranspose1d, nn.BatchNorm1d), None,
                           (nn.Conv3d, nn.ConvTranspose3d, nn.BatchNorm3d))[nd - 1]
        choice = r.choice(["conv", "conv", "convt", "maxpool", "avgpool", "adaptive", "bn", "gn", "act", "act",
                           "interp", "add"])
        if choice == "conv":
            k, stride = r.choice([1, 2, 3]), r.choice([1, 1, 2])
            pad = r.choice([0, 1, "same"]) if stride == 1 else r.choice([0, 1])
            cout = r.choice([c, 4, 6])
            groups = r.choice([g for g in (1, 2) if c % g == 0 and cout % g == 0])
            mode = r.choice(["zeros", "zeros", "reflect", "replicate", "circular"])
            return self._try(Step("conv", {}, (i,)), conv(c, cout, k, stride, pad, dilation=r.choice([1, 2]),
                                                          groups=groups, padding_mode=mode))
        if choice == "convt":
            stride, dil = r.choice([1, 2]), r.choice([1, 1, 2])
            return self._try(Step("convt", {}, (i,)), convt(c, r.choice([c, 4]), r.choice([1, 2, 3]), stride,
                                                            r.choice([0, 1]), output_padding=r.randrange(max(stride, dil)),
                                                            dilation=dil))
        if choice in ("maxpool", "avgpool"):
            return self._try(Step(f"{choice}_nd", self._pool_args(choice == "avgpool"), (i,)))
        if choice == "adaptive":
            return self._try(Step("adaptive_nd", {"avg": r.random() < 0.5, "size": r.choice([1, 2, 3, 5])}, (i,)))
        if choice == "bn":
            return self._try(Step("norm", {}, (i,)), bn(c))
        if choice == "gn":
            g = r.choice([g for g in (1, 2, c) if c % g == 0])
            spatial = v[0, 0].numel()
            if (c // g) * spatial < 2 or (c // g) * self.values[i][1][0, 0].numel() < 2:
                return False
            return self._try(Step("norm", {}, (i,)), nn.GroupNorm(g, c))
        if choice == "act":
            return self._try(Step("act", {"name": r.choice(ACTS)}, (i,)))
        if choice == "interp":
            return self._try(Step("interp_nd", {"mode": r.choice(["nearest", "linear"]), "scale": r.choice([2, 0.5, 1.5]),
                                                "ac": r.random() < 0.5}, (i,)))
        j = self._partner(i, "shape")
        return j is not None and self._try(Step("add", {"w": 0.5}, (i, j)))

    def build(self, ops: int = 10):
        r = self.rng
        tries = 0
        while len(self.steps) < ops and tries < ops * 20:
            tries += 1
            kinds = {v[2] for v in self.values}
            phase = "img"
            for kind, chance in (("vol", 0.6), ("sig", 0.6), ("seq", 0.6), ("vec", 0.5)):
                if kind in kinds and r.random() < chance:
                    phase = kind
            if phase == "img" and r.random() < 0.12:  # a hop to a volume or a 1-d signal and (later) back
                i = self._pick("img")
                self._try(Step("to_vol", {}, (i,)), kind="vol") if r.random() < 0.5 else \
                    self._try(Step("to_sig", {}, (i,)), kind="sig")
                continue
            if phase == "vol" and r.random() < 0.2:
                self._try(Step("vol_to_img", {"mean": r.random() < 0.5}, (self._pick("vol"),)), kind="img")
                continue
            if phase == "sig" and r.random() < 0.15:
                self._try(Step("sig_to_vec", {}, (self._pick("sig"),)), kind="vec")
                continue
            if phase == "img" and len(self.steps) >= ops // 2 and r.random() < 0.25:
                i = self._pick("img")
                if r.random() < 0.5:
                    self._try(Step("to_seq", {}, (i,)), kind="seq")
                else:
                    self._try(Step("to_vec", {"mean": r.random() < 0.5}, (i,)), kind="vec")
                continue
            if phase in ("vol", "sig"):
                self.nd_op(self._pick(phase))
                continue
            if phase == "seq" and r.random() < 0.15:
                self._try(Step("seq_to_vec", {}, (self._pick("seq"),)), kind="vec")
                continue
            getattr(self, f"{phase}_op")(self._pick(phase))
        last = len(self.values) - 1
        extra = [i for i in range(1, last) if r.random() < 0.15][:2]
        return FuzzNet(self.steps, self.modules, [last, *extra]).eval(), self.xa, self.xb


def describe(net: FuzzNet) -> str:
    mods = dict(net.mods.items())
    parts = []
    for s in net.steps:
        text = f"{s.kind}{s.inputs}"
        if s.module:
            text += f"={mods[s.module]!r}".replace("\n", " ")[:120]
        elif s.args:
            text += f"{s.args}"
        parts.append(text)
    return " -> ".join(parts)


REL64 = 1e-9  # float64 networks: the port computes in float64 too


def run_seed(seed: int, ops: int = 10, grad: bool = True, dtype: str = "float32") -> dict:
    """Builds seed ``seed``'s network (in ``dtype``: float32 or float64), converts it at size A and compares at A and
    B. Returns a dict with ``status`` (``ok``, ``refused_b``, or ``fail``), ``problems`` and the description."""
    import porter
    from porter.compare import assert_close
    from tests.converter_check import run_ported

    net, xa, xb = Builder(seed).build(ops)
    rel = REL
    if dtype == "float64":
        net, xa, xb, rel = net.double(), xa.double(), xb.double(), REL64
    out = {"seed": seed, "net": describe(net), "problems": [], "status": "ok", "dtype": dtype}
    try:
        ported = porter.convert(net, (xa,), io_layout="torch", dynamic="auto")
    except Exception as e:  # noqa: BLE001
        out["problems"].append(f"conversion failed: {type(e).__name__}: {str(e)[:400]}")
        out["status"] = "fail"
        return out
    for label, x in (("A", xa), ("B", xb)):
        with torch.no_grad():
            expected = [t.numpy() for t in net(x)]
        try:
            actual = run_ported(ported, (x,))
        except Exception as e:  # noqa: BLE001
            if label == "B" and isinstance(e, (ValueError, NotImplementedError)):
                out["status"] = "refused_b"
                out["refusal"] = str(e)[:300]
                continue
            out["problems"].append(f"size {label} {tuple(x.shape)}: {type(e).__name__}: {str(e)[:400]}")
            continue
        for k, (a, e) in enumerate(zip(actual, expected)):
            try:
                assert a.shape == e.shape, f"shape {a.shape} != torch {e.shape}"
                assert a.dtype == e.dtype, f"dtype {a.dtype} != torch {e.dtype}"
                # atol: an output that cancels to ~1e-8 (the mean of a normalised map) is rounding noise
                assert_close(a, e, rtol=rel, atol=1e-6 if dtype == "float32" else 1e-13, what=f"output {k}")
            except AssertionError as err:
                out["problems"].append(f"size {label} {tuple(x.shape)} output {k}: {str(err)[:400]}")
    if grad and not out["problems"]:
        _check_grad(net, ported, xa, out, rel)
    if out["problems"]:
        out["status"] = "fail"
    return out


def contiguous_norm_grads(net: nn.Module) -> list:
    """Hooks that hand torch's batch and instance norms a contiguous grad_output; returns the handles to remove.

    torch 2.13's CPU batch norm backward (instance norm runs it on an ``(1, N*C, *spatial)`` view) is wrong when the
    grad_output is channels-last-strided and the input contiguous: what ``flatten(2).transpose(1, 2)``'s backward
    gives at batch 1, and at any batch when multi-head attention's (L, N, E) gradient comes back through it (fuzz seed
    2000; tests/converters/test_torch_norm_grad_bug.py). Finite differences side with the port, so the oracle is
    torch's gradient with a contiguous grad_output (same values, torch's right kernel)."""
    def contiguous(module, grads):
        return tuple(g.contiguous() if g is not None else g for g in grads)

    norms = (nn.modules.batchnorm._BatchNorm, nn.modules.instancenorm._InstanceNorm)
    return [m.register_full_backward_pre_hook(contiguous) for m in net.modules() if isinstance(m, norms)]


def _check_grad(net, ported, xa, out, rel):
    """d/dx of sum(w_k * output_k) over every output, port against torch, at size A (the port takes and gives
    torch's layout: converted with ``io_layout="torch"``)."""
    import mlx.core as mx

    from porter.compare import assert_close

    gen = torch.Generator().manual_seed(1)
    x = xa.clone().requires_grad_()
    hooks = contiguous_norm_grads(net)
    try:
        outs = net(x)
        weights = [torch.randn(o.shape, generator=gen, dtype=xa.dtype) for o in outs]
        sum(((o * w).sum() for o, w in zip(outs, weights)), torch.zeros((), dtype=xa.dtype)).backward()
    finally:
        for hook in hooks:
            hook.remove()
    mdt = mx.float64 if xa.dtype == torch.float64 else mx.float32
    wm = [mx.array(w.numpy(), dtype=mdt) for w in weights]

    def loss(v):
        res = ported(v)
        res = res if isinstance(res, (tuple, list)) else (res,)
        return sum(((o * w).sum() for o, w in zip(res, wm)), mx.array(0.0, dtype=mdt))

    g = np.array(mx.grad(loss)(mx.array(xa.numpy(), dtype=mdt)))
    try:
        # atol: a gradient that cancels to ~1e-9 everywhere (a softmax over one value, norms of constant rows) is
        # rounding noise on both sides
        assert_close(g, x.grad.numpy(), rtol=rel * 5, atol=1e-6 if mdt == mx.float32 else 1e-12,
                     what="input gradient")
    except AssertionError as err:
        out["problems"].append(f"gradient at A: {str(err)[:400]}")
