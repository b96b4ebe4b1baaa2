"""State a port updates in training mode outside its layers: spectral norm's power iteration. Torch-free.

``torch.nn.utils.spectral_norm`` (hook form: buffers ``{name}_u``/``{name}_v``, weight ``{name}_orig``) and
``torch.nn.utils.parametrizations.spectral_norm`` (``parametrizations.{name}.original``, ``....0._u``/``._v``)
divide a weight by ``sigma = u . (W v)``, ``W`` the weight as a matrix (dim ``dim`` first, the rest flattened). In
eval mode ``u``/``v`` are constants, which is what conversion captured. In training mode torch first runs
``n_power_iterations`` steps of the power method under ``no_grad`` and writes the new ``u``/``v`` into the buffers,
then computes ``sigma`` from them. A port does the same: before a training-mode forward, :func:`power_iterate`
updates the port's ``u``/``v`` (the arrays the captured graph reads), as batch norm updates its running statistics;
the graph then computes ``sigma`` and ``W / sigma`` from the new vectors, with gradients through ``W`` only (``u``
and ``v`` are constants there, as in torch).

One step, hook form: ``v = normalize(W^T u)``, then ``u = normalize(W v)``; parametrization form: ``u =
normalize(W v)``, then ``v = normalize(W^T u)``; ``normalize(x) = x / max(||x||, eps)`` (``F.normalize``).

Each entry of ``graph["train_state"]``: ``{"kind": "spectral_norm", "form": "hook" | "parametrization", "module":
the torch module path whose training flag decides (the hooked module, or the ``_SpectralNorm`` parametrization),
"weight", "u", "v": parameter names, "dim", "n_power_iterations", "eps"}``. A module called ``k`` times per forward
(HiFi-GAN's scale discriminators see ``y`` and ``y_hat``) computes its weight ``k`` times, and torch iterates before
each: the graph then reads ``u`` and ``v`` in ``k`` nodes each, the ``i``-th call's pair before the next call's
(:func:`readers`), and the ``i``-th pair of readers gets the vectors after ``i`` rounds; the last are stored.
"""

from __future__ import annotations

import mlx.core as mx

FORMS = ("hook", "parametrization")
MAX_ITERATIONS = 1 << 12  # a crafted artifact cannot make a forward loop forever


def _normalize(x: mx.array, eps: float) -> mx.array:
    return x / mx.maximum(mx.sqrt(mx.sum(x * x)), eps)


def weight_matrix(weight: mx.array, dim: int) -> mx.array:
    """``weight`` (torch layout) as torch's spectral norm sees it: dim ``dim`` first, the others flattened."""
    if weight.ndim < 2 or not 0 <= dim < weight.ndim:
        raise ValueError(f"spectral norm: dim {dim} does not fit a weight of shape {tuple(weight.shape)}")
    if dim != 0:
        weight = weight.transpose((dim,) + tuple(d for d in range(weight.ndim) if d != dim))
    return weight.reshape(weight.shape[0], -1)


def power_iterate(entry: dict, weight: mx.array, u: mx.array, v: mx.array) -> tuple:
    """The new ``(u, v)`` after ``entry["n_power_iterations"]`` steps on ``weight`` (torch layout), as torch's
    training forward computes them (no gradient flows through them)."""
    w = mx.stop_gradient(weight_matrix(weight, entry["dim"]))
    u, v = mx.stop_gradient(u), mx.stop_gradient(v)
    if w.shape[0] != u.shape[0] or w.shape[1] != v.shape[0] or u.ndim != 1 or v.ndim != 1:
        raise ValueError(f"spectral norm: u {tuple(u.shape)} and v {tuple(v.shape)} do not fit the weight matrix "
                         f"{tuple(w.shape)}")
    eps = entry["eps"]
    w = w.astype(u.dtype) if w.dtype != u.dtype else w
    for _ in range(entry["n_power_iterations"]):
        if entry["form"] == "hook":
            v = _normalize(w.T @ u, eps)
            u = _normalize(w @ v, eps)
        else:
            u = _normalize(w @ v, eps)
            v = _normalize(w.T @ u, eps)
    return u, v


def readers(graph: dict, entry: dict):
    """``(u reader node indices, v reader node indices)`` in graph order, one pair per computation of the weight,
    or ``None`` when the reads do not pair up call by call (then the port cannot iterate as torch does)."""
    from .layer_map import spec_names

    found = {"u": [], "v": []}
    for index, node in enumerate(graph["nodes"]):
        names = set(spec_names(node["inputs"], "param"))
        top = {s["param"] for s in node["inputs"] if isinstance(s, dict) and set(s) == {"param"}}
        for key in found:
            if entry[key] in names:
                if entry[key] not in top:
                    return None  # read inside a list: the runtime hands the per-call vectors to direct reads only
                found[key].append(index)
    u, v = found["u"], found["v"]
    if not u or len(u) != len(v):
        return None
    for i in range(len(u) - 1):  # the calls do not interleave: call i reads both before call i + 1 reads either
        if max(u[i], v[i]) >= min(u[i + 1], v[i + 1]):
            return None
    return u, v
