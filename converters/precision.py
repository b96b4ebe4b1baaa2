"""Half precision for a ported model: float16 / bfloat16 weights and compute, float32 where torch keeps it.
Torch-free.

``ported.astype("float16")`` (and ``porter.convert(..., dtype=...)``) casts every floating parameter and buffer to
the dtype, records it in the graph's params (``"dtype"``) and as the graph's ``"compute_dtype"``, and the runtime
then follows torch's mixed-precision rules (CPU autocast and torch's half kernels):

* float inputs are cast to the model's dtype on entry, except those the graph itself casts to float32/float64
  before any other use (:func:`inputs_cast_first`: diffusers' timestep), which torch's half model computes with
  in the dtype they come in; integer and bool inputs are untouched;
* autocast's lower-precision ops (:data:`LOWER_PRECISION_KERNELS`, and the ``Conv``/``ConvTranspose``/``Linear``
  layers) cast float32 operands to the model's dtype, so a float32 value the graph makes on its own (a constant,
  an explicit ``.float()``, an attention mask built with ``torch.finfo(torch.float32).min``) never turns the rest
  of the model into float32;
* statistics and normalising reductions (:data:`FLOAT32_KERNELS`: softmax / log_softmax, logsumexp, mean / sum,
  var / std, vector norms, cumsum / cumprod / logcumsumexp, prod) and ``grid_sample``'s coordinates and weights are
  computed in float32 and rounded back once to their input's dtype; the norm layers (batch / layer / group / instance
  norm) do the same in ``porter.layers`` itself (``layers/_precision.py``). Porter converts no ATen loss op
  (``nll_loss``, ``mse_loss``, ...); a loss written with these ops (``-log_softmax(x).gather(...).mean()``) gets their
  float32 rule.

* a cast or creation whose float32 dtype the model took from a tensor (``mask.to(h.dtype)``, ``type_as``,
  ``zeros(dtype=q.dtype)``; ``graph["dtype_follows"]``, found at conversion by ``capture_dtypes.py``) gives its
  result in the model's dtype, float32's finfo extremes saturating (:func:`saturating_cast`), as torch's half model
  computes it; casts written float32 (``.float()``) stay float32, and so do the constants the model computes in
  float32 whatever its dtype (``graph["float32_constants"]``).

Everything else (elementwise ops, pooling, activations) runs in the input's dtype, rounding per op as torch does
(a product or quotient by a Python number the dtype cannot hold is computed in float32 and rounded once, as
torch's CPU ``mul``/``div``: ``ops/elementwise.py``).
"""

from __future__ import annotations

import json
import math

import mlx.core as mx

from porter.layers.functional import in_float32

DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}
HALF_NAMES = ("float16", "bfloat16")
_HALF = (mx.float16, mx.bfloat16)
_FLOAT32_MAX = float(mx.finfo(mx.float32).max)
# torch's CPU autocast "lower_precision_fp" ops, as Porter's kernels
LOWER_PRECISION_KERNELS = frozenset({"conv", "conv_transpose", "conv_runtime_groups",
                                     "conv_transpose_runtime_groups", "linear", "matmul", "addmm", "sdpa",
                                     "sdpa_dropout", "native_mha", "einsum"})
LOWER_PRECISION_LAYERS = frozenset({"Conv", "ConvTranspose", "Linear"})
# computed in float32 and rounded back once (torch's half kernels accumulate in float32); "reduce" only for these.
# grid_sample: coordinates, corner weights and their sum in float32 (torch's CUDA kernel's opmath): in bfloat16 the
# unnormalised coordinate of a 21-pixel row is a multiple of 1/4, and the samples were off by 90% of their range
FLOAT32_KERNELS = frozenset({"softmax", "logsumexp", "variance", "vector_norm", "cumsum", "scan", "prod", "reduce",
                             "grid_sample"})
_FLOAT32_REDUCE = ("mean", "sum")

__all__ = ["DTYPES", "HALF_NAMES", "check_dtype", "astype", "dtype_of", "cast_input", "inputs_cast_first",
           "node_policies", "saturating_cast"]


def check_dtype(dtype, argument: str = "dtype") -> str:
    """The dtype's name (``"float32"``, ``"float16"`` or ``"bfloat16"``) for a name or an ``mx.Dtype``.

    Raises:
        ValueError: naming ``argument`` and the accepted values.
    """
    if isinstance(dtype, mx.Dtype):
        for name, value in DTYPES.items():
            if value == dtype:
                return name
    elif isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    raise ValueError(f"'{argument}' must be one of {', '.join(DTYPES)} but got {dtype!r}")


def dtype_of(graph: dict) -> str:
    """The model's compute dtype: the recorded ``compute_dtype``, else the floating dtype holding most parameter
    elements (``"float32"`` for a model without floating parameters)."""
    if graph.get("compute_dtype"):
        return graph["compute_dtype"]
    count: dict = {}
    for spec in graph["params"].values():
        if spec.get("dtype") in ("float64", "float32", "bfloat16", "float16"):
            n = 1
            for s in spec["torch_shape"]:
                n *= s
            count[spec["dtype"]] = count.get(spec["dtype"], 0) + n
    return max(count, key=count.get) if count else "float32"


def astype(ported, dtype):
    """A copy of ``ported`` with every floating parameter and buffer in ``dtype`` and, for float16/bfloat16,
    computed in it (see the module docstring); ``ported`` is left as it was. To a half dtype, the constants the
    model computes in float32 whatever its dtype (``graph["float32_constants"]``) stay float32. Integer and bool
    arrays (indices, ``num_batches_tracked``) are untouched. ``astype("float32")`` goes back to a float32 model (of
    the rounded weights).

    Args:
        ported (PortedModel): the model.
        dtype (str or mx.Dtype): ``"float32"``, ``"float16"`` or ``"bfloat16"``.

    Example:
        >>> half = ported.astype("bfloat16")
        >>> y = half(x)            # x float32 or bfloat16: cast to bfloat16 on entry
    """
    from .runtime import PortedModel
    from .serialize import _live_modules, _live_params

    name = check_dtype(dtype)
    target = DTYPES[name]
    graph = json.loads(json.dumps(ported.graph))  # a deep copy (the graph is JSON data)
    graph["modules"] = _live_modules(ported)  # the layers as they are now (a config may have been edited)
    # the arrays as they are now: a quantized layer's packed weight, scales and biases included
    graph["params"], live = _live_params(ported, graph["modules"])
    graph["params"] = json.loads(json.dumps(graph["params"]))
    weights = {}
    kept = set(graph.get("float32_constants", ()))  # float32 in torch's half model too (capture_dtypes.py)
    for key, array in live.items():
        if mx.issubdtype(array.dtype, mx.floating) and not (
                key in kept and name in HALF_NAMES and array.dtype == mx.float32):
            array = saturating_cast(array, target)
            graph["params"][key]["dtype"] = name
        weights[key] = array
    if name in HALF_NAMES:
        graph["compute_dtype"] = name
    else:
        graph.pop("compute_dtype", None)
    copy = PortedModel(graph, weights)
    copy.capture_note = getattr(ported, "capture_note", None)
    copy.set_graph_limits(**ported.graph_limits)  # bounds raised on the original hold for its copy
    modes = {name: m.training for name, m in ported.named_modules()}
    for name, m in copy.named_modules():  # the same tree: each module keeps its mode (refusals as checked)
        m._training = modes.get(name, m.training)
    return copy


def saturating_cast(value, dtype, *, clip: bool = False):
    """``value`` (an array or a Python number) as an array of ``dtype``, with float32's finite extremes (a float32
    array's entries or a number exactly ``finfo(float32).min``/``max``) becoming a half ``dtype``'s finite extremes,
    not infinities: a graph captured in float32 carries ``torch.finfo(torch.float32).min`` where the model wrote
    ``finfo(x.dtype).min`` (GPT-NeoX's causal ``mask_value``, BERT-style additive masks ``(1 - mask) * finfo.min``),
    which torch's half model computes with its own ``finfo``; overflowed to -inf, a fully masked softmax row
    turned NaN. Other values past the half range overflow as torch's casts do.

    ``clip``: every finite value past ``dtype``'s finite range saturates (``masked_fill``'s fill value, any floating
    ``dtype``); infinities and NaN are kept.
    """
    info = mx.finfo(dtype) if mx.issubdtype(dtype, mx.floating) else None
    if isinstance(value, mx.array):
        if clip and info is not None:
            wide = value.astype(mx.float32) if value.dtype != mx.float64 else value
            bounded = mx.clip(wide, float(info.min), float(info.max))
            return mx.where(mx.isinf(wide) | mx.isnan(wide), wide, bounded).astype(dtype)
        if dtype not in _HALF or value.dtype != mx.float32:
            return value.astype(dtype)
        half = mx.array(float(info.max), dtype=dtype)
        return mx.where(value == _FLOAT32_MAX, half, mx.where(value == -_FLOAT32_MAX, -half, value.astype(dtype)))
    if info is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        if clip and math.isfinite(value):
            value = min(max(float(value), float(info.min)), float(info.max))
        elif isinstance(value, float) and abs(value) == _FLOAT32_MAX and dtype in _HALF:
            value = float(info.max) * (1 if value > 0 else -1)
    return mx.array(value, dtype=dtype)


def _following(fn, dtype):
    """``fn`` whose float32 result (a cast or creation whose dtype the model took from a tensor,
    ``capture_dtypes.py``) is given in the half ``dtype``, as torch's half model computes it."""
    def run(*args, **attrs):
        out = fn(*args, **attrs)
        return saturating_cast(out, dtype) if isinstance(out, mx.array) and out.dtype == mx.float32 else out

    return run


# kernels that pass values on without computing with them (a view's, a repeat's, a selection's values are its input's)
_VALUE_PRESERVING = frozenset({"transpose", "reshape", "expand", "select", "slice", "squeeze", "unsqueeze",
                               "broadcast_layout", "identity"})
_WIDE = ("float32", "float64")


def _refs(spec, found):
    if isinstance(spec, dict) and "ref" in spec:
        found.append(spec["ref"])
    elif isinstance(spec, (list, tuple)):
        for item in spec:
            _refs(item, found)
    return found


def inputs_cast_first(graph: dict) -> frozenset:
    """The graph inputs a half model takes in the dtype they come in: those whose every use, through the kernels
    of :data:`_VALUE_PRESERVING` only, is an explicit cast to float32 or float64 (``.float()``, ``.to(float32)``).

    Torch's half model computes with such an input in its own dtype: diffusers' UNet takes a float32 timestep and
    its sinusoidal embedding runs ``timesteps[:, None].float() * freqs``; casting the timestep to float16 on entry
    rounded 601.3 to 601.5 before the ``.float()``, and the port was 3% off torch's float16 model. An input read
    anywhere else (arithmetic, a layer, a size, an output) is cast as before."""
    readers: dict = {}
    for node in graph["nodes"]:
        for name in _refs(node["inputs"], []):
            readers.setdefault(name, []).append(node)
    returned = set(_refs([o["value"] for o in graph["outputs"]], []))
    following = set(graph.get("dtype_follows", ()))  # casts to "the dtype of a tensor": half in a half model
    keep = set()
    for spec in graph["inputs"]:
        frontier, casts, ok = [spec["name"]], 0, True
        while frontier and ok:
            name = frontier.pop()
            ok = name not in returned
            for node in readers.get(name, []):
                if (node["kernel"] == "cast" and node["attrs"].get("dtype") in _WIDE
                        and node["outputs"][0] not in following):
                    casts += 1
                elif (node["kernel"] in _VALUE_PRESERVING and _refs(node["inputs"][:1], []) == [name]
                      and name not in _refs(node["inputs"][1:], [])):  # the data input; the others are sizes
                    frontier.extend(node["outputs"])
                else:
                    ok = False
        if ok and casts:
            keep.add(spec["name"])
    return frozenset(keep)


def cast_input(x, dtype):
    """A float input as the model's ``dtype``; integer and bool inputs unchanged."""
    if isinstance(x, mx.array) and mx.issubdtype(x.dtype, mx.floating) and x.dtype != dtype:
        return x.astype(dtype)
    return x


def lower(value, dtype):
    """float32 arrays in ``value`` (an array or a list of them) as ``dtype`` (autocast's cast for its
    lower-precision ops: float64 and integers are left alone)."""
    if isinstance(value, mx.array):
        return value.astype(dtype) if value.dtype == mx.float32 else value
    if isinstance(value, list):
        return [lower(v, dtype) for v in value]
    return value


def _lowered(fn, dtype):
    def run(*args, **attrs):
        return fn(*[lower(a, dtype) for a in args], **attrs)

    return run


def node_policies(graph: dict, kernels: list) -> tuple:
    """For a half model: ``(kernels, layer_nodes)``, the program's kernels with the mixed-precision rules applied
    and the indices of ``call_module`` nodes whose layer casts float32 input to the model's dtype."""
    dtype = DTYPES[graph["compute_dtype"]]
    out, layer_nodes = [], set()
    modules = graph.get("modules", {})
    following = set(graph.get("dtype_follows", ()))
    for i, (node, fn) in enumerate(zip(graph["nodes"], kernels)):
        name, attrs = node["kernel"], node["attrs"]
        if fn is not None and node["outputs"][0] in following:
            fn = _following(fn, dtype)
        elif fn is None:
            if modules.get(attrs.get("module"), {}).get("type") in LOWER_PRECISION_LAYERS:
                layer_nodes.add(i)
        elif name in LOWER_PRECISION_KERNELS:
            fn = _lowered(fn, dtype)
        elif name in FLOAT32_KERNELS and attrs.get("dtype") is None and (
                name != "reduce" or attrs.get("fn") in _FLOAT32_REDUCE):
            fn = in_float32(fn)  # an explicit dtype attr means the graph chose the result's dtype itself
        out.append(fn)
    return out, layer_nodes
