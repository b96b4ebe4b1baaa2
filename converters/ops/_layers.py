"""The one place runtime kernels reach Porter's layers (``porter.layers`` and ``porter.layers.functional``, public
names only: no converter imports a private ``porter.layers._*`` module).

Every conv/pool/pad kernel calls ``fn("max_pool2d")``: the exact torch semantics of those ops live only in Porter's
layers. Names come from an artifact, so they are looked up in the explicit table :data:`FUNCTIONS`, never with
``getattr`` on the module. The other kernels import what they need from here by name: the activations and softmax,
``relu``, ``channel_affine``, ``interpolate_linear``, ``concatenate``, ``channel_shuffle``, ``linear``, ``matmul``, ``reshape``, ``roll`` and
``add``/``subtract``/``multiply``/``divide`` (native passes on the CPU, MLX ops elsewhere), ``layer_norm``/``group_norm``/``rms_norm``/``l2_normalize``/``batch_norm_train``,
``blocked_sum``/``blocked_mean`` (torch's accuracy over many elements), and
``float64_math``/``float64_erf`` (float64-accurate ``exp``, ``sin``, ``softmax``, ``erf``, ... where MLX's are
float32-accurate) and ``polevl``/``chbevl`` (series evaluation), and
export mode's ``exporting()``/``export_note()`` for kernels that must build serializable ops while exporting.
"""

from __future__ import annotations

from porter.layers import export_note, exporting  # noqa: F401
from porter.layers import functional as _functional
from porter.layers.functional import (  # noqa: F401
    HALF,
    batch_norm_train,
    blocked_mean,
    blocked_sum,
    channel_affine,
    channel_shuffle,
    chbevl,
    concatenate,
    exp,
    float64_erf,
    float64_math,
    gelu,
    group_norm,
    hardsigmoid,
    hardswish,
    hardtanh,
    in_float32,
    interpolate_linear,
    l2_normalize,
    layer_norm,
    linear,
    add,
    divide,
    matmul,
    multiply,
    subtract,
    reshape,
    roll,
    polevl,
    relu,
    rms_norm,
    sigmoid,
    silu,
    softmax,
    tanh,
    upcast,
)

_ND = (1, 2, 3)
CONV = tuple(f"conv{n}d" for n in _ND) + tuple(f"conv_transpose{n}d" for n in _ND)
POOLS = {
    "max": tuple(f"max_pool{n}d" for n in _ND),
    "avg": tuple(f"avg_pool{n}d" for n in _ND),
    "adaptive_avg": tuple(f"adaptive_avg_pool{n}d" for n in _ND),
    "adaptive_max": tuple(f"adaptive_max_pool{n}d" for n in _ND),
}
UNPOOL = tuple(f"max_unpool{n}d" for n in _ND)
FRACTIONAL = ("fractional_max_pool2d", "fractional_max_pool3d")
FUNCTIONS = {name: getattr(_functional, name)
             for name in CONV + sum(POOLS.values(), ()) + UNPOOL + FRACTIONAL + ("pad",)}


def fn(name: str):
    try:
        return FUNCTIONS[name]
    except (KeyError, TypeError):
        raise NotImplementedError(f"porter.layers.functional has no kernel function {name!r}") from None
