"""The layer classes a ported model's tree is made of, and how each is recorded in ``graph.json``. Torch-free.

A ported model is a tree of MLX modules under torch's names (``converters/tree.py``); every torch layer Porter maps
(``converters/layer_map.py``) becomes one of the layers below, recorded in the artifact as
``{"type": name, "config": {...}}``. The record is declarative: ``type`` indexes :data:`LAYER_TYPES` (an explicit
table, never ``getattr`` or an import), ``config`` is checked against the type's spec, and only then is the class
built. ``record(layer)`` goes the other way for ``porter.save``: the live layer's type and config.

| type | MLX class | torch classes |
|---|---|---|
| Conv / ConvTranspose | ``porter.layers.Conv{1,2,3}d`` / ``ConvTranspose{1,2,3}d`` | ``nn.Conv*`` / ``nn.ConvTranspose*`` |
| Linear | ``porter.layers.Linear`` (an ``mlx.nn.Linear``) | ``nn.Linear`` |
| Embedding | :class:`Embedding` (``mlx.nn.Embedding`` with torch's index check and ``padding_idx``) | ``nn.Embedding`` |
| BatchNorm | ``porter.layers.BatchNorm`` | ``nn.BatchNorm{1,2,3}d``, ``nn.SyncBatchNorm``, subclasses by behaviour |
| LayerNorm / GroupNorm / InstanceNorm | ``porter.layers.LayerNorm`` / ``GroupNorm`` / ``InstanceNorm`` | same names |
| RMSNorm | ``porter.layers.RMSNorm`` (an ``mlx.nn.RMSNorm``) | ``nn.RMSNorm`` |
| Dropout | ``mlx.nn.Dropout`` | ``nn.Dropout`` |
| TorchDropout | :class:`layer_dropout.TorchDropout` | ``nn.Dropout1d/2d/3d``, ``nn.AlphaDropout``, ``nn.FeatureAlphaDropout`` |
| TorchRReLU | :class:`layer_dropout.TorchRReLU` | ``nn.RReLU`` |
| StochasticDepth | :class:`layer_dropout.StochasticDepth` | torchvision's ``StochasticDepth``, timm's ``DropPath`` (by behaviour) |
| Activation | :class:`Activation` (one of the runtime's unary functions) | ``nn.ReLU``, ``nn.GELU``, ... |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import mlx.core as mx
import mlx.nn as nn

import porter.layers as PL
from porter.layers.quantized_conv import QUANTIZED_CONV

from . import spec as S
from .ops.elementwise import UNARY, _UNARY_ATTRS
from .ops.misc import checked_indices, embedding_lookup
from .layer_dropout import DEPTH_MODES, KINDS as DROPOUT_KINDS, StochasticDepth, TorchDropout, TorchRReLU

_SIZE = S.Int(1, (1 << 31) - 1)  # MLX's dims are int32
_GEOM = S.Ints(1, 3, 0, S.GEOMETRY)
_POSITIVE = S.Ints(1, 3, 1, S.GEOMETRY)
_EPS = S.Float()
_INDEX = S.Int(0, (1 << 31) - 2)


def _embedding_config(m) -> dict:
    config = {"num_embeddings": m.weight.shape[0], "embedding_dim": m.weight.shape[1]}
    if getattr(m, "padding_idx", None) is not None:
        config["padding_idx"] = m.padding_idx
    return config


class Embedding(nn.Embedding):
    """``mlx.nn.Embedding`` that refuses out-of-range indices as torch does (MLX's gather reads other memory);
    with ``padding_idx`` that row gets no gradient from the places that look it up, as torch's."""

    def __init__(self, num_embeddings: int, dims: int, padding_idx=None):
        super().__init__(num_embeddings, dims)
        self.padding_idx = padding_idx

    def __call__(self, x: mx.array) -> mx.array:
        return embedding_lookup(self.weight, x, self.padding_idx, "Embedding")

    def to_quantized(self, group_size: int = 64, bits: int = 4, mode: str = "affine"):
        return QuantizedEmbedding.from_embedding(self, group_size, bits, mode=mode)


class QuantizedEmbedding(nn.QuantizedEmbedding):
    """``mlx.nn.QuantizedEmbedding`` with :class:`Embedding`'s index check."""

    def __call__(self, x: mx.array) -> mx.array:
        return super().__call__(checked_indices(x, self.num_embeddings, "Embedding"))


class PReLU(nn.PReLU):
    """torch.nn.PReLU on channels-last input: one slope, or one per channel along the last axis (torch's dim 1),
    computed as the runtime's ``prelu`` kernel does (``where(x > 0, x, x * weight)``)."""

    def __call__(self, x: mx.array) -> mx.array:
        from .ops.elementwise import k_prelu

        return k_prelu(x, self.weight, axis=x.ndim - 1)


class MultiheadAttention(nn.Module):
    """torch.nn.MultiheadAttention (packed in-projection, same q/k/v width) with torch's parameter names:
    ``in_proj_weight`` ``(3E, E)``, ``in_proj_bias`` ``(3E,)``, ``out_proj`` an ``mlx.nn.Linear``. Arrays
    ``(N, L, E)`` with ``batch_first``, else ``(L, N, E)`` (in a port: the order the arrays have there, which the
    layout pass may have swapped from the torch module's). Returns the attention output only (torch's
    ``need_weights=False``); no masks. Attention as the runtime's ``sdpa`` kernel computes it; in training mode
    dropout ``p`` on the attention weights, as torch's.
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 batch_first: bool = False):
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"[MultiheadAttention] embed_dim ({embed_dim}) must be divisible by num_heads "
                             f"({num_heads})")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"[MultiheadAttention] 'dropout' must be in [0, 1) but got {dropout!r}")
        bound = 1.0 / embed_dim ** 0.5
        self.in_proj_weight = mx.random.uniform(-bound, bound, (3 * embed_dim, embed_dim))
        if bias:
            self.in_proj_bias = mx.zeros((3 * embed_dim,))
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        object.__setattr__(self, "embed_dim", embed_dim)
        object.__setattr__(self, "num_heads", num_heads)
        object.__setattr__(self, "dropout", float(dropout))
        object.__setattr__(self, "batch_first", bool(batch_first))

    def _extra_repr(self) -> str:
        return f"{self.embed_dim}, num_heads={self.num_heads}, batch_first={self.batch_first}"

    def __call__(self, query: mx.array, key: mx.array = None, value: mx.array = None) -> mx.array:
        if not MHA_PACKED:
            return self._unpacked(query, key, value)
        e, h = self.embed_dim, self.num_heads
        w, b = self.in_proj_weight, self.get("in_proj_bias")
        # the arrays' own (N, L) or (L, N) order is kept: the projections act on rows, so no transposed view is
        # handed to a GEMM (MLX would copy it first) and the heads are gathered by one copy
        heads_order = (0, 2, 1, 3) if self.batch_first else (1, 2, 0, 3)  # (., ., H, D) -> (N, H, L, D)
        if key is None and value is None:  # self-attention: one GEMM with the packed weight, one copy into heads
            qkv = _rows(query, w, b).reshape(*query.shape[:2], 3, h, e // h)
            qkv = PL.functional.contiguous(qkv.transpose((2,) + tuple(i + (i > 1) for i in heads_order)))
            q, k, v = qkv[0], qkv[1], qkv[2]
        else:
            key = query if key is None else key
            value = key if value is None else value

            def project(x, i):
                y = _rows(x, w[i * e:(i + 1) * e], None if b is None else b[i * e:(i + 1) * e])
                return y.reshape(*x.shape[:2], h, e // h).transpose(heads_order)

            q, k, v = project(query, 0), project(key, 1), project(value, 2)
        out = _attention(q, k, v, self.dropout if self.training else 0.0)  # (N, H, L, D)
        lead = query.shape[:2]
        out = out.transpose((0, 2, 1, 3) if self.batch_first else (2, 0, 1, 3)).reshape(-1, e)
        return self.out_proj(out).reshape(*lead, e)

    def _unpacked(self, query: mx.array, key: mx.array = None, value: mx.array = None) -> mx.array:
        """The previous computation (``MHA_PACKED = False``): three projections of a transposed view."""
        from .ops.linear import k_sdpa

        key = query if key is None else key
        value = key if value is None else value
        if not self.batch_first:
            query, key, value = (t.swapaxes(0, 1) for t in (query, key, value))
        e, h = self.embed_dim, self.num_heads
        w, b = self.in_proj_weight, self.get("in_proj_bias")

        def project(x, i):
            y = x @ w[i * e:(i + 1) * e].T
            return y if b is None else y + b[i * e:(i + 1) * e]

        def heads(x):
            n, length = x.shape[0], x.shape[1]
            return x.reshape(n, length, h, e // h).transpose(0, 2, 1, 3)

        q, k, v = heads(project(query, 0)), heads(project(key, 1)), heads(project(value, 2))
        if self.training and self.dropout > 0:
            out = _attention(q, k, v, self.dropout)  # Porter's softmax: MLX's is float32-accurate in float64
        else:
            out = k_sdpa(q, k, v)
        n, length = out.shape[0], out.shape[2]
        out = self.out_proj(out.transpose(0, 2, 1, 3).reshape(n, length, e))
        return out if self.batch_first else out.swapaxes(0, 1)


# Switch (benchmarks/attention.py flips it): MultiheadAttention as one packed in-projection GEMM over the arrays'
# own row order, one copy into heads and Porter's native softmax, against three projections of a transposed view
# and MLX's softmax.
MHA_PACKED = True


def _rows(x: mx.array, weight: mx.array, bias) -> mx.array:
    """``x @ weight.T + bias`` over the last axis, as one 2-d GEMM (bias added by the GEMM: ``mx.addmm``)."""
    x2 = x.reshape(-1, x.shape[-1])
    return x2 @ weight.T if bias is None else mx.addmm(bias, x2, weight.T)


def _attention(q: mx.array, k: mx.array, v: mx.array, dropout: float) -> mx.array:
    """``softmax(q @ k^T / sqrt(D)) @ v`` over ``(N, H, L, D)``; with ``dropout`` > 0 (training) the attention weights
    are dropped as torch's (survivors scaled by ``1 / (1 - p)``). Porter's softmax: one native pass on the CPU."""
    scores = PL.functional.matmul(q * (q.shape[-1] ** -0.5), k.swapaxes(-1, -2))
    probs = PL.functional.softmax(scores, axis=-1)
    if dropout > 0:
        probs = nn.Dropout(dropout)(probs)
    return PL.functional.matmul(probs, v)


class Activation(nn.Module):
    """A parameter-free torch activation module (``nn.ReLU``, ``nn.GELU``, ...) computed by the runtime's own
    function for it (the one its ``unary`` kernel uses), so the tree changes no number. Any layout.

    Args:
        fn (str): the function (``"relu"``, ``"gelu"``, ``"hardtanh"``, ...).
        torch_type (str): the torch class it stands for, for ``repr``.
        **attrs: the function's arguments (``approximate``, ``negative_slope``, ...).
    """

    def __init__(self, fn: str, torch_type: str = "", **attrs):
        super().__init__()
        if fn not in UNARY:
            raise ValueError(f"[Activation] unknown function {fn!r}")
        object.__setattr__(self, "fn", fn)
        object.__setattr__(self, "attrs", dict(attrs))
        object.__setattr__(self, "torch_type", torch_type or fn)

    def _extra_repr(self) -> str:
        return ", ".join([self.fn] + [f"{k}={v!r}" for k, v in self.attrs.items()])

    def __call__(self, x: mx.array) -> mx.array:
        return UNARY[self.fn](x, **self.attrs)


@dataclass
class LayerType:
    """One recordable layer type: its config spec, how to build it, and which live classes record as it."""

    name: str
    config: S.Spec
    build: Callable[[dict], nn.Module]
    classes: tuple
    config_of: Callable[[nn.Module], dict]


def _has(layer, key) -> bool:
    return key in layer and isinstance(layer[key], mx.array)


def _conv_config(layer) -> dict:
    padding = layer.padding if isinstance(layer.padding, str) else list(layer.padding)
    out = {"nd": layer.nd, "in_channels": layer.in_channels, "out_channels": layer.out_channels,
           "kernel_size": list(layer.kernel_size), "stride": list(layer.stride), "padding": padding,
           "dilation": list(layer.dilation), "groups": layer.groups, "bias": _has(layer, "bias")}
    if hasattr(layer, "output_padding"):
        out["output_padding"] = list(layer.output_padding)
    return out


_CONV_CLASSES = {1: PL.Conv1d, 2: PL.Conv2d, 3: PL.Conv3d}
_CONV_T_CLASSES = {1: PL.ConvTranspose1d, 2: PL.ConvTranspose2d, 3: PL.ConvTranspose3d}
_CONV_FIELDS = {"nd": S.Int(1, 3), "in_channels": _SIZE, "out_channels": _SIZE, "kernel_size": _POSITIVE,
                "stride": _POSITIVE, "padding": S.OneOf(_GEOM, S.Enum("same", "valid")), "dilation": _POSITIVE,
                "groups": S.Int(1, S.GEOMETRY), "bias": S.Bool()}


def _build_conv(c):
    return _CONV_CLASSES[c["nd"]](c["in_channels"], c["out_channels"], tuple(c["kernel_size"]), tuple(c["stride"]),
                                  c["padding"] if isinstance(c["padding"], str) else tuple(c["padding"]),
                                  tuple(c["dilation"]), c["groups"], c["bias"])


def _build_conv_transpose(c):
    return _CONV_T_CLASSES[c["nd"]](c["in_channels"], c["out_channels"], tuple(c["kernel_size"]), tuple(c["stride"]),
                                    tuple(c["padding"]), tuple(c["output_padding"]), c["groups"], c["bias"],
                                    tuple(c["dilation"]))


def _batch_norm_config(layer) -> dict:
    config = {"num_features": layer.num_features, "eps": layer.eps, "momentum": layer.momentum,
              "affine": _has(layer, "weight"), "track_running_stats": layer.track_running_stats}
    if not getattr(layer, "count_batches", True):  # recorded only where it differs: older readers load the rest
        config["count_batches"] = False
    return config


def _dropout_p(layer) -> float:
    return float(1.0 - layer._p_1)


# MLX's quantization parameters (mx.quantize): group size, bits per weight, mode
_QUANT = {"group_size": S.Int(1, 1 << 12), "bits": S.Int(1, 8), "mode": S.Enum("affine", "mxfp4", "nvfp4", "mxfp8")}
QUANTIZED_TYPES = ("QuantizedLinear", "QuantizedEmbedding", "QuantizedConv")


def _quant_config(m) -> dict:
    return {"group_size": m.group_size, "bits": m.bits, "mode": m.mode}


# pooling layers: porter.layers' class per functional name, the constructor arguments each family takes
_POOL_CLASSES = {f"{kind}_pool{n}d": getattr(PL, f"{name}Pool{n}d")
                 for kind, name in (("max", "Max"), ("avg", "Avg"), ("adaptive_avg", "AdaptiveAvg"),
                                    ("adaptive_max", "AdaptiveMax")) for n in (1, 2, 3)}
_POOL_SIZE = S.OneOf(S.Int(0, S.GEOMETRY), S.Ints(1, 3, 0, S.GEOMETRY))
_POOL_ARGS = {"kernel_size": _POOL_SIZE, "stride": S.Opt(_POOL_SIZE), "padding": _POOL_SIZE, "dilation": _POOL_SIZE,
              "ceil_mode": S.Bool(), "count_include_pad": S.Bool(),
              "divisor_override": S.Opt(S.Int(-S.GEOMETRY, S.GEOMETRY)),
              "output_size": S.OneOf(S.Int(1, S.GEOMETRY), S.Seq(S.Opt(S.Int(1, S.GEOMETRY)), 1, 3))}
POOL_FAMILY_ARGS = {"max": {"kernel_size", "stride", "padding", "dilation", "ceil_mode"},
                    "avg": {"kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"},
                    "adaptive_avg": {"output_size"}, "adaptive_max": {"output_size"}}


def pool_family(fn: str) -> str:
    return fn.rsplit("_pool", 1)[0]


def _build_pool(c):
    layer = _POOL_CLASSES[c["fn"]](**{k: tuple(v) if isinstance(v, list) else v for k, v in c["args"].items()})
    object.__setattr__(layer, "porter_config", {"fn": c["fn"], "args": dict(c["args"])})  # what it was built from
    return layer


def _pool_config(layer) -> dict:
    config = getattr(layer, "porter_config", None)
    if config is None:
        raise ValueError(f"a {type(layer).__name__} built outside Porter's conversion cannot be recorded")
    return config


_ACTIVATION_FIELDS = {"fn": S.Enum(*UNARY), "torch_type": S.Text(128), "attrs": S.Obj(_UNARY_ATTRS)}

LAYER_TYPES = {t.name: t for t in (
    LayerType("Conv", S.Obj(_CONV_FIELDS, list(_CONV_FIELDS)), _build_conv,
              tuple(_CONV_CLASSES.values()), _conv_config),
    LayerType("ConvTranspose", S.Obj({**_CONV_FIELDS, "padding": _GEOM, "output_padding": _GEOM},
                                     list(_CONV_FIELDS) + ["output_padding"]),
              _build_conv_transpose, tuple(_CONV_T_CLASSES.values()), _conv_config),
    LayerType("Linear", S.Obj({"in_features": _SIZE, "out_features": _SIZE, "bias": S.Bool()},
                              ["in_features", "out_features", "bias"]),
              lambda c: PL.Linear(c["in_features"], c["out_features"], bias=c["bias"]), (PL.Linear, nn.Linear),
              lambda m: {"in_features": m.weight.shape[1], "out_features": m.weight.shape[0], "bias": _has(m, "bias")}),
    LayerType("Embedding", S.Obj({"num_embeddings": _SIZE, "embedding_dim": _SIZE, "padding_idx": S.Opt(_INDEX)},
                                 ["num_embeddings", "embedding_dim"]),
              lambda c: Embedding(c["num_embeddings"], c["embedding_dim"], c.get("padding_idx")), (Embedding,),
              _embedding_config),
    LayerType("BatchNorm", S.Obj({"num_features": _SIZE, "eps": _EPS, "momentum": S.Opt(S.Float()),
                                  "affine": S.Bool(), "track_running_stats": S.Bool(), "count_batches": S.Bool()},
                                 ["num_features", "eps", "momentum", "affine", "track_running_stats"]),
              lambda c: PL.BatchNorm(c["num_features"], c["eps"], c["momentum"], c["affine"],
                                     c["track_running_stats"], c.get("count_batches", True)), (PL.BatchNorm,),
              _batch_norm_config),
    LayerType("LayerNorm", S.Obj({"normalized_shape": S.Ints(1, S.MAX_LEN, 1, (1 << 31) - 1), "eps": _EPS,
                                  "elementwise_affine": S.Bool(), "bias": S.Bool()},
                                 ["normalized_shape", "eps", "elementwise_affine", "bias"]),
              lambda c: PL.LayerNorm(tuple(c["normalized_shape"]), c["eps"], c["elementwise_affine"], c["bias"]),
              (PL.LayerNorm,),
              lambda m: {"normalized_shape": list(m.dims) if isinstance(m.dims, tuple) else [m.dims], "eps": m.eps,
                         "elementwise_affine": _has(m, "weight"), "bias": _has(m, "bias")}),
    LayerType("RMSNorm", S.Obj({"normalized_shape": S.Ints(1, S.MAX_LEN, 1, (1 << 31) - 1), "eps": S.Opt(_EPS),
                                "elementwise_affine": S.Bool()}, ["normalized_shape", "eps", "elementwise_affine"]),
              lambda c: PL.RMSNorm(tuple(c["normalized_shape"]), c["eps"], c["elementwise_affine"]), (PL.RMSNorm,),
              lambda m: {"normalized_shape": list(m.normalized_shape), "eps": m.eps,
                         "elementwise_affine": _has(m, "weight")}),
    LayerType("GroupNorm", S.Obj({"num_groups": _SIZE, "num_channels": _SIZE, "eps": _EPS, "affine": S.Bool()},
                                 ["num_groups", "num_channels", "eps", "affine"]),
              lambda c: PL.GroupNorm(c["num_groups"], c["num_channels"], c["eps"], c["affine"]), (PL.GroupNorm,),
              lambda m: {"num_groups": m.num_groups, "num_channels": m.dims, "eps": m.eps,
                         "affine": _has(m, "weight")}),
    LayerType("InstanceNorm", S.Obj({"num_features": _SIZE, "eps": _EPS, "affine": S.Bool(),
                                     "momentum": S.Opt(S.Float()), "track_running_stats": S.Bool()},
                                    ["num_features", "eps", "affine"]),
              lambda c: PL.InstanceNorm(c["num_features"], c["eps"], c["affine"], c.get("momentum", 0.1),
                                        c.get("track_running_stats", False)), (PL.InstanceNorm,),
              lambda m: {"num_features": m.dims, "eps": m.eps, "affine": _has(m, "weight"), "momentum": m.momentum,
                         "track_running_stats": m.track_running_stats}),
    LayerType("QuantizedLinear", S.Obj({"in_features": _SIZE, "out_features": _SIZE, "bias": S.Bool(), **_QUANT},
                                       ["in_features", "out_features", "bias", *_QUANT]),
              lambda c: nn.QuantizedLinear(c["in_features"], c["out_features"], c["bias"], c["group_size"],
                                           c["bits"], c["mode"]), (nn.QuantizedLinear,),
              lambda m: {"in_features": m.weight.shape[1] * 32 // m.bits, "out_features": m.weight.shape[0],
                         "bias": _has(m, "bias"), **_quant_config(m)}),
    LayerType("QuantizedEmbedding", S.Obj({"num_embeddings": _SIZE, "embedding_dim": _SIZE, **_QUANT},
                                          ["num_embeddings", "embedding_dim", *_QUANT]),
              lambda c: QuantizedEmbedding(c["num_embeddings"], c["embedding_dim"], c["group_size"], c["bits"],
                                           c["mode"]), (QuantizedEmbedding,),
              lambda m: {"num_embeddings": m.num_embeddings, "embedding_dim": m.dims, **_quant_config(m)}),
    LayerType("Pool", S.Obj({"fn": S.Enum(*_POOL_CLASSES), "args": S.Obj(_POOL_ARGS)}, ["fn", "args"]),
              _build_pool, tuple(_POOL_CLASSES.values()), _pool_config),
    LayerType("QuantizedConv", S.Obj({**_CONV_FIELDS, **_QUANT}, list(_CONV_FIELDS) + list(_QUANT)),
              lambda c: QUANTIZED_CONV[c["nd"]](c["in_channels"], c["out_channels"], tuple(c["kernel_size"]),
                                                tuple(c["stride"]), c["padding"] if isinstance(c["padding"], str)
                                                else tuple(c["padding"]), tuple(c["dilation"]), c["groups"],
                                                c["bias"], group_size=c["group_size"], bits=c["bits"],
                                                mode=c["mode"]),
              tuple(QUANTIZED_CONV.values()), lambda m: {**_conv_config(m), **_quant_config(m)}),
    LayerType("PReLU", S.Obj({"num_parameters": _SIZE}, ["num_parameters"]),
              lambda c: PReLU(c["num_parameters"]), (PReLU,), lambda m: {"num_parameters": m.weight.shape[0]}),
    LayerType("MultiheadAttention", S.Obj({"embed_dim": _SIZE, "num_heads": _SIZE, "dropout": S.Float(),
                                           "bias": S.Bool(), "batch_first": S.Bool()},
                                          ["embed_dim", "num_heads", "dropout", "bias", "batch_first"]),
              lambda c: MultiheadAttention(c["embed_dim"], c["num_heads"], c["dropout"], c["bias"],
                                           c["batch_first"]), (MultiheadAttention,),
              lambda m: {"embed_dim": m.embed_dim, "num_heads": m.num_heads, "dropout": m.dropout,
                         "bias": "in_proj_bias" in m, "batch_first": m.batch_first}),
    LayerType("Dropout", S.Obj({"p": S.Float()}, ["p"]), lambda c: nn.Dropout(c["p"]), (nn.Dropout,),
              lambda m: {"p": _dropout_p(m)}),
    LayerType("TorchDropout", S.Obj({"p": S.Float(), "kind": S.Enum(*DROPOUT_KINDS),
                                     "axes": S.Ints(2, 2, 0, S.MAX_LEN - 1)}, ["p", "kind", "axes"]),
              lambda c: TorchDropout(c["p"], c["kind"], tuple(c["axes"])), (TorchDropout,),
              lambda m: {"p": m.p, "kind": m.kind, "axes": list(m.axes)}),
    LayerType("StochasticDepth", S.Obj({"p": S.Float(), "mode": S.Enum(*DEPTH_MODES), "scale": S.Bool(),
                                        "axis": S.Int(0, S.MAX_LEN - 1)}, ["p", "mode", "scale", "axis"]),
              lambda c: StochasticDepth(c["p"], c["mode"], c["scale"], c["axis"]), (StochasticDepth,),
              lambda m: {"p": m.p, "mode": m.mode, "scale": m.scale, "axis": m.axis}),
    LayerType("TorchRReLU", S.Obj({"lower": S.Float(), "upper": S.Float()}, ["lower", "upper"]),
              lambda c: TorchRReLU(c["lower"], c["upper"]), (TorchRReLU,),
              lambda m: {"lower": m.lower, "upper": m.upper}),
    LayerType("Activation", S.Obj(_ACTIVATION_FIELDS, ["fn", "attrs"]),
              lambda c: Activation(c["fn"], c.get("torch_type", ""), **c["attrs"]), (Activation,),
              lambda m: {"fn": m.fn, "torch_type": m.torch_type, "attrs": dict(m.attrs)}),
)}


def record(layer: nn.Module):
    """``(type name, config)`` of a live layer, or None when its class is not one Porter can record."""
    for t in LAYER_TYPES.values():
        if type(layer) in t.classes:
            return t.name, t.config_of(layer)
    return None


def build(type_name: str, config: dict) -> nn.Module:
    """The layer a record describes (``config`` already checked against the type's spec)."""
    return LAYER_TYPES[type_name].build(config)
