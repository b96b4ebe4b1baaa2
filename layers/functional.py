"""Functional forms of Porter's layers, with torch.nn.functional's names and argument order (channels-last).

Also the per-channel and normalisation helpers the converters' kernels use: ``relu``, ``channel_affine`` (eval batch
norm's ``x * alpha + beta`` over the last axis), ``layer_norm(x, weight, bias, k=, eps=)`` and
``group_norm(x, groups, weight, bias, eps=)`` (Porter's arguments: see ``layers/layer_norm.py``),
``batch_norm_train(x, weight, bias, eps)`` (batch statistics over every axis but the last, torch's backward as its
VJP: ``layers/_batch_norm_train.py``), and
``concatenate(arrays, axis)`` (torch's ``cat``: one multi-threaded native copy on the CPU, ``layers/concat.py``) and
``channel_shuffle(x, groups)`` (torch's, along the last axis: a native copy on the CPU, ``layers/shuffle.py``), and
``matmul(a, b)`` (torch's ``matmul`` over batch dims: one native node splitting the batch over threads on the CPU,
``layers/matmul.py``), ``reshape(x, shape)`` (MLX's, the copy of a non-contiguous input on threads:
``layers/reshape.py``), ``add``/``subtract``/``multiply``/``divide`` (MLX's, large float32 operands on threads:
``layers/binary.py``), ``roll(x, shifts, axes)`` (torch's, one threaded pass on the CPU: ``layers/roll.py``), and
``blocked_sum``/``blocked_mean(x, axes, keepdims)`` (sums over many elements in blocks, torch's accuracy:
``layers/_blocked_sum.py``), and
``float64_math`` (float64-accurate ``exp``, ``sigmoid``, ``sin``, ``cos``, ``softmax``, ``logsumexp``, ... for the
float64 arrays whose MLX functions compute in float32 precision: ``layers/_float64.py``), ``float64_erf`` (float64
``erf``/``erfc``/``erfcx``: ``layers/_erf64.py``) and ``polevl``/``chbevl`` (Horner and Chebyshev series:
``layers/_series.py``; the converters' special functions use them too).
"""

from .activation import exp, gelu, hardsigmoid, hardswish, hardtanh, relu, sigmoid, silu, softmax, tanh
from ._export import contiguous
from . import _erf64 as float64_erf, _float64 as float64_math
from ._series import chbevl, polevl
from .adaptive_avg import adaptive_avg_pool1d, adaptive_avg_pool2d, adaptive_avg_pool3d
from .affine import channel_affine
from ._batch_norm_train import batch_norm_train
from ._blocked_sum import blocked_mean, blocked_sum
from .concat import concatenate
from .adaptive_max import adaptive_max_pool1d, adaptive_max_pool2d, adaptive_max_pool3d
from .avg_pool import avg_pool1d, avg_pool2d, avg_pool3d
from .conv import conv1d, conv2d, conv3d
from .conv_transpose import conv_transpose1d, conv_transpose2d, conv_transpose3d
from ._precision import HALF, in_float32, upcast
from .fractional import fractional_max_pool2d, fractional_max_pool3d
from .layer_norm import group_norm, layer_norm
from .linear import linear
from .matmul import matmul
from .reshape import reshape
from .roll import roll
from .binary import add, divide, multiply, subtract
from .normalize import l2_normalize
from .lp_pool import lp_pool1d, lp_pool2d, lp_pool3d
from .max_pool import max_pool1d, max_pool2d, max_pool3d
from .padding import pad
from .resample import interpolate_linear
from .rms_norm import rms_norm
from .shuffle import channel_shuffle
from .unpool import max_unpool1d, max_unpool2d, max_unpool3d
