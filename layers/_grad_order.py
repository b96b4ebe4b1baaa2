"""A weighted layer's parameter gradients computed as soon as its cotangent is (issue 15: training memory).

MLX evaluates a gradient graph depth first from the arrays asked for (the parameters' gradients, in the tree's
order). From the first layer's weight gradient it walks the input-gradient chain down to the loss, computing every
layer's input gradient on the way and leaving every other layer's weight gradient pending until the walk comes back
up: each layer's cotangent stays live until then. A chain of n convs held about n cotangents more than torch's
autograd, which computes a layer's weight and input gradients together and frees the cotangent (4 Conv3d layers on a
24.5 MiB activation: peak 7.7 -> 5.4 input sizes; R3D-18's training step at batch 8 peaked 1.4x above torch).

:func:`weights_first` passes a training layer's input and trainable parameters through one identity
``mx.custom_function`` (``_gate``) before the layer computes: the layer's own VJP is untouched (same ops, same
values), and the gate's VJP makes the input's gradient depend on the parameters' gradients (``mx.depends``), so
whatever needs the input gradient (every earlier layer's gradients) computes this layer's parameter gradients first,
while its cotangent and saved input are live. Eval mode, frozen parameters and export (a custom function cannot be
serialized) keep the plain call: inference builds no extra node. A gradient the caller does not ask for is still
never computed (a lazy array nobody reads): the input image's gradient at the first layer, frozen layers' weights.
A new MLX module is in training mode: called for inference without ``eval()`` (converted and zoo models load in eval
mode), a layer pays the gate's node and computes from the gate's copies of its weights, so the weight-keyed caches
(Winograd transforms) are not reused across calls.

A converted model's functional nodes that read a parameter beside an activation (``F.linear(x, self.qkv.weight)``
in torchvision's Swin, ``addmm``, a tied head) pass theirs through the same gate (:func:`gated`, called from
``PortedModel._weights_first`` in ``converters/runtime.py``) under the same rules.
"""

from __future__ import annotations

import mlx.core as mx

from . import _export


@mx.custom_function
def _gate(inputs, params):
    return inputs, params


@_gate.vjp
def _gate_vjp(primals, cotangents, outputs):
    ginputs, gparams = cotangents
    return mx.depends(ginputs, gparams), gparams


def gated(inputs: list, params: list) -> tuple:
    """``(inputs, params)`` passed through the gate: the same values; each input's gradient waits for every
    parameter's gradient (see the module docstring). ``inputs`` and ``params`` are lists of arrays, neither empty.
    Also the converted graphs' functional weight nodes' (``PortedModel._weights_first``)."""
    return _gate(inputs, params)


def weights_first(module, x, weight, bias=None) -> tuple:
    """``(x, weight, bias)`` to compute ``module``'s forward from: as given in eval mode, while exporting, or when no
    parameter is trainable; else passed through the gate (identity forward; see the module docstring). ``weight``
    and ``bias`` are the module's ``"weight"`` / ``"bias"`` entries (``None`` when absent)."""
    if not module.training or _export.active() or not isinstance(x, mx.array):
        return x, weight, bias
    frozen = module._no_grad
    names = [name for name, value in (("weight", weight), ("bias", bias))
             if isinstance(value, mx.array) and name not in frozen]
    if not names:
        return x, weight, bias
    (x,), gated_params = gated([x], [weight if name == "weight" else bias for name in names])
    out = dict(zip(names, gated_params))
    return x, out.get("weight", weight), out.get("bias", bias)
