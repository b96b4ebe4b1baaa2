"""``porter.validate``: run a torch model and its port on the same inputs and say where they differ.

Torch is the oracle. Inputs go through both models with the port's declared layouts accounted for; every output is
compared against the accuracy bar, every torch submodule's output (collected with forward hooks) is compared with
the port's ``trace`` of the same module, and the first module that diverges in execution order is named, so a
wrong port points at its first wrong layer instead of just "the logits differ". Gradient parity (inputs and
parameters, by torch ``state_dict`` name) is optional.

The bar, for each compared tensor: ``max|porter - torch| <= max(rtol * max|torch|, atol)``, i.e. the error
relative to the tensor's largest magnitude, with ``atol`` as a floor for tensors that are all (nearly) zero.

Importing this module imports neither torch nor mlx: both are imported when :func:`validate` runs.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["validate", "Report"]


# ---------------------------------------------------------------------------------------------------- layouts
def parse_layout(layout: str, rank: int) -> Tuple[int, ...]:
    """The permutation ``p`` with ``ported_array = torch_array.transpose(p)`` for a layout string.

    Accepts ``"as-is"``, letter forms such as ``"NCHW->NHWC"`` and ``"permute(0,2,3,1)"``.
    """
    text = (layout or "as-is").strip()
    if text == "as-is":
        return tuple(range(rank))
    if "->" in text:
        src, dst = (part.strip() for part in text.split("->"))
        if sorted(src) != sorted(dst) or len(set(src)) != len(src):
            raise ValueError(f"[validate] layout {layout!r} does not name a permutation of one set of axes.")
        perm = tuple(src.index(c) for c in dst)
    else:
        match = re.fullmatch(r"permute\(([\d,\s]*)\)", text)
        if not match:
            raise ValueError(f"[validate] cannot read the layout {layout!r} (expected 'as-is', 'NCHW->NHWC' or "
                             "'permute(0,2,3,1)').")
        perm = tuple(int(v) for v in match.group(1).split(",") if v.strip())
    if len(perm) != rank or sorted(perm) != list(range(rank)):
        raise ValueError(f"[validate] layout {layout!r} does not fit a tensor of rank {rank}.")
    return perm


def _inverse(perm: Sequence[int]) -> Tuple[int, ...]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def _layouts(ported, name: str, count: int) -> List[str]:
    layouts = list(getattr(ported, name, None) or [])
    return layouts + ["as-is"] * (count - len(layouts))


# ---------------------------------------------------------------------------------------------------- trees
def _leaves(tree) -> List[Any]:
    """Tensors/arrays of a nested output in a fixed order (tuples and lists in order, dicts by insertion);
    non-array leaves (None, Python numbers) are not compared."""
    if isinstance(tree, dict):
        return [leaf for v in tree.values() for leaf in _leaves(v)]
    if isinstance(tree, (tuple, list)):
        return [leaf for v in tree for leaf in _leaves(v)]
    return [tree] if hasattr(tree, "shape") and hasattr(tree, "dtype") else []


def _torch_np(t) -> np.ndarray:
    import torch

    t = t.detach()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.float()
    return t.cpu().numpy()


def _mx_np(a) -> np.ndarray:
    import mlx.core as mx

    if isinstance(a, mx.array) and a.dtype in (mx.bfloat16, mx.float16):
        a = a.astype(mx.float32)
    return np.array(a)


# ---------------------------------------------------------------------------------------------------- compare
def _compare(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> Dict[str, Any]:
    """Max abs error, error relative to max|expected|, and the verdict under the bar."""
    row: Dict[str, Any] = {"shape": list(expected.shape)}
    if actual.shape != expected.shape:
        row.update(porter_shape=list(actual.shape), max_abs=math.inf, max_rel=math.inf, scale=None, ok=False,
                   note="shape differs")
        return row
    exact = expected.dtype.kind in "iub"
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    both_nan = np.isnan(a) & np.isnan(e)
    diff = np.where(both_nan, 0.0, np.abs(a - e))
    diff = np.where(np.isnan(diff), np.inf, diff)  # NaN on one side only is an infinite error
    finite = np.isfinite(e)
    scale = float(np.max(np.abs(e[finite]))) if finite.any() else 0.0
    same_inf = np.isinf(a) & np.isinf(e) & (np.sign(a) == np.sign(e))
    diff = np.where(same_inf, 0.0, diff)
    max_abs = float(diff.max()) if diff.size else 0.0
    if exact:
        ok = max_abs == 0.0
    else:
        ok = max_abs <= max(rtol * scale, atol)
    if scale > 0:
        max_rel = max_abs / scale
    else:
        max_rel = 0.0 if max_abs == 0 else math.inf
    row.update(max_abs=max_abs, max_rel=max_rel, scale=scale, ok=bool(ok))
    if exact:
        row["exact"] = True
    return row


# ---------------------------------------------------------------------------------------------------- inputs
def _example_specs(ported, example_inputs) -> List[Tuple[Tuple[int, ...], str]]:
    """(shape, dtype name) of each example input, from ``example_inputs`` or the port's recorded graph."""
    if example_inputs is not None:
        import torch

        items = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
        return [(tuple(t.shape), str(t.dtype).replace("torch.", "")) for t in items]
    graph = getattr(ported, "graph", None)
    specs = []
    if isinstance(graph, dict) and graph.get("inputs"):
        for entry in graph["inputs"]:
            meta = entry.get("meta", {})
            if meta.get("kind") != "tensor":
                raise ValueError("[validate] the port takes a non-tensor input; pass 'inputs' explicitly.")
            # Symbolic dims are recorded as names with the example's value as "hint".
            hint = meta.get("hint", meta.get("shape", []))
            specs.append((tuple(int(h) for h in hint), str(meta.get("dtype", "float32"))))
        return specs
    raise ValueError("[validate] cannot tell the example input shapes of this port; pass 'inputs' "
                     "(a list of input tuples in torch layout) or 'example_inputs'.")


def _random_inputs(specs, shapes, seed: int):
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for (_, dtype), shape in zip(specs, shapes):
        # a dtype name recorded in a graph: looked up in a fixed table, never getattr on torch with a file's name
        tdtype = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64, "bool": torch.bool,
                  "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
                  "int64": torch.int64}.get(dtype, torch.float32)
        if tdtype.is_floating_point:
            out.append(torch.randn(shape, generator=gen).to(tdtype))
        elif tdtype == torch.bool:
            out.append(torch.randint(0, 2, shape, generator=gen).bool())
        else:
            out.append(torch.randint(0, 2, shape, generator=gen).to(tdtype))  # ids 0/1 are valid for any table
    return tuple(out)


def _second_size_candidates(specs) -> List[List[Tuple[int, ...]]]:
    """Other input sizes to try, most informative first: odd and larger spatial sizes with another batch size,
    then sizes friendly to divisibility constraints, then batch only."""
    def varied(shape, spatial_fn):
        dims = list(shape)
        if dims:
            dims[0] = 1 if dims[0] > 1 else 2
        # Spatial dims (2 onwards) are varied even when the export was static: a port must not bake in the
        # example's size, and the torch model itself decides which sizes are allowed.
        for i in range(2, len(dims)):
            dims[i] = spatial_fn(dims[i])
        return tuple(dims)

    rules = [
        lambda s: s + max(1, s // 4) + (1 - (s + max(1, s // 4)) % 2),  # ~1.25x, odd
        lambda s: s + max(1, s // 4),
        lambda s: s + 8 * max(1, s // 16),  # keeps divisibility by 8
        lambda s: 2 * s,
    ]
    candidates = []
    for rule in rules:
        candidates.append([varied(shape, rule) for shape, _ in specs])
    candidates.append([varied(shape, lambda s: s) for shape, _ in specs])  # batch only
    seen, unique = set(), []
    for c in candidates:
        key = tuple(c)
        if key not in seen and key != tuple(shape for shape, _ in specs):
            seen.add(key)
            unique.append(c)
    return unique


def _default_input_sets(model, ported, example_inputs, seed: int):
    """Seeded inputs at the example size and, when the torch model accepts one, a second size."""
    import torch

    specs = _example_specs(ported, example_inputs)
    first = _random_inputs(specs, [s for s, _ in specs], seed)
    sets = [first]
    notes = []
    if all(len(s) >= 1 for s, _ in specs):
        for shapes in _second_size_candidates(specs):
            trial = _random_inputs(specs, shapes, seed + 1)
            try:
                with torch.no_grad():
                    model(*trial)
            except Exception as exc:  # the torch model's own limits decide what is "allowed"
                notes.append(f"torch rejects input shapes {shapes}: {type(exc).__name__}")
                continue
            checks = getattr(ported, "input_checks", None)
            refusal = checks.refusal(shapes) if checks is not None else None
            if refusal:  # the port was built under a shape condition these sizes break: it refuses them
                notes.append(f"the port refuses input shapes {shapes} (its input checks): {refusal.split(':')[0]}")
                continue
            sets.append(trial)
            break
    if len(sets) == 1:
        notes.append("the torch model accepts no second input size tried; validated at the example size only")
    return sets, notes


# ---------------------------------------------------------------------------------------------------- hooks
def _torch_module_outputs(model, inputs):
    """Run ``model`` with forward hooks on every submodule; return (outputs, {name: (type, output)}) with a
    module called several times keeping its last call, in the order the calls finished."""
    import torch

    record: Dict[str, Tuple[str, Any]] = {}
    handles = []

    def snapshot(value):
        # Clone: an in-place op later in the forward (ReLU(inplace=True), +=) would overwrite what we saw.
        if isinstance(value, torch.Tensor):
            return value.detach().clone()
        if isinstance(value, (tuple, list)):
            return type(value)(snapshot(v) for v in value) if not hasattr(value, "_fields") else tuple(
                snapshot(v) for v in value)
        if isinstance(value, dict):
            return {k: snapshot(v) for k, v in value.items()}
        return value

    def make_hook(name):
        def hook(module, args, output):
            record.pop(name, None)
            record[name] = (type(module).__name__, snapshot(output))
        return hook

    for name, module in model.named_modules():
        if name:
            handles.append(module.register_forward_hook(make_hook(name)))
    try:
        with torch.no_grad():
            outputs = model(*inputs)
    finally:
        for h in handles:
            h.remove()
    return outputs, record


def _module_rows(torch_record, ported_record, rtol: float, atol: float, half=None, half_record=None):
    rows, unmatched = [], []
    for name, (mtype, t_out) in torch_record.items():
        if name not in ported_record:
            unmatched.append(name)
            continue
        t_leaves = [t for t in _leaves(t_out) if hasattr(t, "shape")]
        p_leaves = [p for p in _leaves(ported_record[name]) if hasattr(p, "shape")]
        if not t_leaves or not p_leaves:
            unmatched.append(name)
            continue
        index = list(range(len(t_leaves)))
        if len(p_leaves) < len(t_leaves):
            # The port recorded one value for a multi-output module (e.g. MaxPool2d(return_indices=True)):
            # compare it with the torch output of the same shape, the first one if several.
            p_shape = tuple(p_leaves[0].shape)
            index = [next((i for i, t in enumerate(t_leaves) if tuple(t.shape) == p_shape), 0)]
            t_leaves = [t_leaves[index[0]]]
        compared = [_compare(_mx_np(p), _torch_np(t), rtol, atol) for t, p in zip(t_leaves, p_leaves)]
        if half is not None:  # judged against what torch itself loses in the port's dtype (validate_half.py)
            h_leaves = _leaves(half_record[name][1]) if half_record and name in half_record else []
            compared = [_derived(row, t, h_leaves[i] if i < len(h_leaves) else None, half, rtol, atol)
                        for row, t, i in zip(compared, t_leaves, index)]
        # One row per module: its first failing output, else its largest error.
        row = next((c for c in compared if not c["ok"]), None) or max(compared, key=lambda c: c["max_rel"])
        rows.append(dict(row, name=name, type=mtype))
    return rows, unmatched


def _derived(row, expected, torch_half, half, rtol: float, atol: float):
    """``row`` under the half-precision bar; ``torch_half`` is torch's own output in the port's dtype, or None."""
    from .validate_half import derived_row

    torch_row = None
    if torch_half is not None and hasattr(torch_half, "shape"):
        torch_row = _compare(_torch_np(torch_half), _torch_np(expected), rtol, atol)
    return derived_row(row, torch_row, half["dtype"], rtol, atol, half["factor"])


# ---------------------------------------------------------------------------------------------------- report
def _fmt(v, spec=".2e"):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "inf" if math.isinf(v) else format(v, spec)
    return str(v)


def _shape(s) -> str:
    return "(" + ",".join(str(d) for d in s) + ")"


class Report:
    """What :func:`validate` found.

    Attributes:
        ok (bool): every output (and, with ``grads=True``, every gradient) within the bar at every input size.
        first_divergence (dict or None): the first torch submodule, in execution order, whose output is outside
            the bar (``name``, ``type``, ``max_abs``, ``max_rel``, ``input_shapes``); ``None`` if none is.
        runs (list of dict): per input size: input shapes, per-output rows, per-module rows.
        grads (dict or None): gradient parity rows for inputs and parameters.
        notes (list of str): what was not checked and why.
    """

    def __init__(self, data: Dict[str, Any]):
        self._data = data

    @property
    def ok(self) -> bool:
        return bool(self._data["ok"])

    @property
    def first_divergence(self) -> Optional[Dict[str, Any]]:
        return self._data["first_divergence"]

    @property
    def runs(self) -> List[Dict[str, Any]]:
        return self._data["runs"]

    @property
    def grads(self) -> Optional[Dict[str, Any]]:
        return self._data["grads"]

    @property
    def notes(self) -> List[str]:
        return self._data["notes"]

    @property
    def precision(self) -> Optional[Dict[str, Any]]:
        """For a float16/bfloat16 port: its dtype, per-module relative errors against the float32 torch model
        (and torch's own in that dtype), ``loses_most`` and ``worst_module`` (``porter/validate_half.py``)."""
        return self._data.get("precision")

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready copy (infinite errors become the string ``"inf"``)."""
        def clean(v):
            if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
                return str(v)
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [clean(x) for x in v]
            return v
        return clean(self._data)

    def to_json(self, path: Optional[str] = None, *, indent: int = 2) -> str:
        """The report as JSON text; also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=indent)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        return text

    def summary(self) -> Dict[str, Any]:
        """A short dict for artifact metadata: verdict, worst output error, first divergence."""
        worst = max((row["max_rel"] for run in self.runs for row in run["outputs"]), default=0.0)
        out = {"ok": self.ok, "max_rel_error": worst, "rtol": self._data["rtol"], "atol": self._data["atol"],
               "input_shapes": [run["input_shapes"] for run in self.runs],
               "first_divergence": self.first_divergence and self.first_divergence["name"]}
        precision = self.precision
        if precision is not None:
            out.update(dtype=precision["dtype"],
                       loses_most=precision["loses_most"] and precision["loses_most"]["name"])
        return out

    def __repr__(self) -> str:
        fd = self.first_divergence
        return f"Report(ok={self.ok}, first_divergence={fd['name'] if fd else None!r})"

    def __str__(self) -> str:
        d = self._data
        lines = [
            f"Porter validation of {d['model']}: {'PASS' if d['ok'] else 'FAIL'}",
            f"  io_layout={d['io_layout']}  transposes={d['num_transposes']}  bar: max|porter - torch| <= "
            f"max(rtol * max|torch|, atol), rtol={d['rtol']:g}, atol={d['atol']:g}"
            + (f" (and the {d['precision']['dtype']} bar: see precision below)" if d.get("precision") else ""),
            "",
            f"  {'inputs':<26} {'output':<8} {'shape':<18} {'max|torch|':>11} {'max abs err':>12} "
            f"{'rel err':>10}  ok",
        ]
        for run in d["runs"]:
            ins = " ".join(_shape(s) for s in run["input_shapes"])
            for row in run["outputs"]:
                lines.append(f"  {ins:<26} {row['index']:<8} {_shape(row['shape']):<18} "
                             f"{_fmt(row.get('scale'), '.4g'):>11} {_fmt(row['max_abs']):>12} "
                             f"{_fmt(row['max_rel']):>10}  {'yes' if row['ok'] else 'NO'}"
                             + (f"  ({row['note']})" if row.get("note") else ""))
                ins = ""
        lines.append("")
        for run in d["runs"]:
            mods = run["modules"]
            bad = [m for m in mods if not m["ok"]]
            lines.append(f"  modules at {' '.join(_shape(s) for s in run['input_shapes'])}: {len(mods)} compared, "
                         f"{len(bad)} outside the bar, {len(run['unmatched_modules'])} without a traced output")
            if bad:
                lines.append(f"    {'module':<36} {'type':<20} {'max abs err':>12} {'rel err':>10}")
                for m in bad[:8]:
                    lines.append(f"    {m['name']:<36} {m['type']:<20} {_fmt(m['max_abs']):>12} "
                                 f"{_fmt(m['max_rel']):>10}")
                if len(bad) > 8:
                    lines.append(f"    ... and {len(bad) - 8} more")
        fd = d["first_divergence"]
        lines.append("")
        if fd:
            lines.append(f"  first divergence: {fd['name']} ({fd['type']}), max abs err {_fmt(fd['max_abs'])}, "
                         f"rel err {_fmt(fd['max_rel'])}, at inputs "
                         f"{' '.join(_shape(s) for s in fd['input_shapes'])}")
        else:
            lines.append("  first divergence: none")
        g = d["grads"]
        if g is not None:
            lines.append("")
            lines.append(f"  gradients: {'PASS' if g['ok'] else 'FAIL'} at inputs "
                         f"{' '.join(_shape(s) for s in g['input_shapes'])}")
            if g.get("error"):
                lines.append(f"    the port's backward failed: {g['error']}")
            for kind in ("inputs", "parameters"):
                rows = g[kind]
                bad = [r for r in rows if not r["ok"]]
                worst = max(rows, key=lambda r: r["max_rel"], default=None)
                lines.append(f"    {kind}: {len(rows)} compared, {len(bad)} outside the bar"
                             + (f", worst {worst['name']} rel err {_fmt(worst['max_rel'])}" if worst else ""))
                for r in bad[:5]:
                    lines.append(f"      {r['name']:<40} max abs err {_fmt(r['max_abs'])} rel {_fmt(r['max_rel'])}"
                                 + (f" ({r['note']})" if r.get("note") else ""))
        if d.get("precision"):
            from .validate_half import format_lines

            lines.append("")
            lines.extend(format_lines(d["precision"]))
        for note in d["notes"]:
            lines.append(f"  note: {note}")
        return "\n".join(lines)


def _port_inputs(ported, xs) -> Tuple[list, list]:
    """Torch-layout inputs as the port takes them (its declared input layouts); also returns the permutations."""
    import mlx.core as mx
    import torch

    perms, arrays = [], []
    for x, lay in zip(xs, _layouts(ported, "input_layouts", len(xs))):
        a = _torch_np(x) if x.dtype.is_floating_point else x.detach().cpu().numpy()
        perm = parse_layout(lay, a.ndim)
        m = mx.array(np.ascontiguousarray(np.transpose(a, perm)), dtype=mx.float64 if a.dtype == np.float64 else None)
        if x.dtype == torch.bfloat16:
            m = m.astype(mx.bfloat16)  # widened to float32 for the transpose above: exact both ways
        elif x.dtype == torch.float16:
            m = m.astype(mx.float16)
        perms.append(perm)
        arrays.append(m)
    return arrays, perms


def _run_once(model, ported, xs, per_module: bool, rtol: float, atol: float, half=None) -> Dict[str, Any]:
    """One input set through both models: per-output rows and (``per_module``) per-module rows. ``half``: the
    half-precision context of a float16/bfloat16 port (torch's copy in that dtype, ``validate_half.py``)."""
    import torch

    xs_mx, _ = _port_inputs(ported, xs)
    if per_module:
        t_out, t_modules = _torch_module_outputs(model, xs)
        p_out, p_modules = ported.trace(*xs_mx)
    else:
        with torch.no_grad():
            t_out = model(*xs)
        p_out, t_modules, p_modules = ported(*xs_mx), {}, {}
    h_leaves, h_modules = [], {}
    if half is not None and half["model"] is not None:
        from .validate_half import inputs_in_dtype

        xs_h = inputs_in_dtype(xs, half["dtype"])
        try:
            if per_module:
                h_out, h_modules = _torch_module_outputs(half["model"], xs_h)
            else:
                with torch.no_grad():
                    h_out = half["model"](*xs_h)
            h_leaves = _leaves(h_out)
        except Exception as exc:  # noqa: BLE001  (an op without a half CPU kernel: the fallback bar, said why)
            half["model"] = None
            half["note"] = (f"torch cannot run the model in {half['dtype']} ({type(exc).__name__}: "
                            f"{str(exc).splitlines()[0][:120] if str(exc) else ''})")

    t_leaves, p_leaves = _leaves(t_out), _leaves(p_out)
    out_rows = []
    if len(t_leaves) != len(p_leaves):
        out_rows.append({"index": "all", "shape": [], "max_abs": math.inf, "max_rel": math.inf, "scale": None,
                         "ok": False, "note": f"torch returned {len(t_leaves)} tensors, the port {len(p_leaves)}"})
    out_layouts = _layouts(ported, "output_layouts", len(p_leaves))
    for i, (t, p, lay) in enumerate(zip(t_leaves, p_leaves, out_layouts)):
        p_np = _mx_np(p)
        p_np = np.transpose(p_np, _inverse(parse_layout(lay, p_np.ndim)))
        row = _compare(p_np, _torch_np(t), rtol, atol)
        if half is not None:
            row = _derived(row, t, h_leaves[i] if i < len(h_leaves) else None, half, rtol, atol)
        out_rows.append(dict(row, index=i))
    mod_rows, unmatched = _module_rows(t_modules, p_modules, rtol, atol, half, h_modules)
    return {"input_shapes": [list(x.shape) for x in xs], "outputs": out_rows, "modules": mod_rows,
            "unmatched_modules": unmatched}


# ---------------------------------------------------------------------------------------------------- main
def validate(model, ported, inputs=None, *, rtol: float = 1e-4, atol: float = 1e-4, grads: bool = False,
             seed: int = 0, example_inputs=None, grad_rtol: Optional[float] = None,
             compare_modules: bool = True, half_factor: Optional[float] = None) -> Report:
    """Compare a torch model and its port on the same inputs.

    Args:
        model (torch.nn.Module, torch.export.ExportedProgram or torch.jit.ScriptModule): the torch model (used
            as is: put it in eval mode first if that is what was converted). TorchScript is compared on its
            outputs only (no forward hooks).
        ported (PortedModel): the result of :func:`porter.convert` (or :func:`porter.load`).
        inputs (list of tuples of torch.Tensor, optional): input sets in torch layout. Default: seeded random
            inputs shaped like the conversion example, plus a second size when the torch model accepts one.
        rtol (float, optional): bar relative to a tensor's largest magnitude. Default: ``1e-4``.
        atol (float, optional): floor of the bar for tensors that are (nearly) all zero. Default: ``1e-4``.
        grads (bool, optional): also compare gradients of ``sum(output * g)`` (seeded ``g``) w.r.t. the inputs and
            every trainable parameter, on the first input set. Default: ``False``.
        seed (int, optional): seed of the random inputs and gradient weights. Default: ``0``.
        example_inputs (tensor or tuple, optional): the conversion example, when the port does not record its
            input shapes. Default: ``None``.
        grad_rtol (float, optional): ``rtol`` for gradients. Default: ``rtol``.
        compare_modules (bool, optional): per-module comparison through ``ported.trace``. Default: ``True``.
        half_factor (float, optional): for a float16/bfloat16 port (``ported.dtype``), compared with the float32
            torch model: the bar of each tensor is also ``half_factor`` times torch's own error when run in that
            dtype (a copy of ``model``); ``report.precision`` gives the per-module errors and the module that loses
            the most (``porter/validate_half.py``). Default: ``4.0``.

    Returns:
        Report: ``.ok``, ``.first_divergence``, per-run tables; ``print(report)`` for a table,
        ``report.to_json()`` for JSON.

    Example::

        >>> ported = porter.convert(model, torch.randn(1, 3, 32, 32))
        >>> report = porter.validate(model, ported)
        >>> print(report)
    """
    import torch

    if rtol < 0 or atol < 0:
        raise ValueError(f"[validate] 'rtol' and 'atol' must be non-negative but got rtol={rtol}, atol={atol}.")
    notes: List[str] = []
    source_name = type(model).__name__
    if isinstance(model, torch.export.ExportedProgram):
        model = model.module()  # callable with the same inputs; its submodules are flattened into one graph
    if isinstance(model, torch.jit.ScriptModule) and compare_modules:
        compare_modules = False
        notes.append("TorchScript modules run no forward hooks: compared on the outputs only")
    if getattr(model, "training", False):
        notes.append("the torch model is in training mode (dropout/BatchNorm statistics differ from eval)")
    if inputs is None:
        input_sets, size_notes = _default_input_sets(model, ported, example_inputs, seed)
        notes += size_notes
    else:
        if not isinstance(inputs, list):
            raise TypeError("[validate] 'inputs' must be a list of input tuples, e.g. [(x,)] or [(x1,), (x2,)], "
                            f"but got {type(inputs).__name__}.")
        input_sets = [(s,) if isinstance(s, torch.Tensor) else tuple(s) for s in inputs]
        if not input_sets:
            raise ValueError("[validate] 'inputs' must hold at least one input tuple.")

    half = None
    from .validate_half import DEFAULT_FACTOR, FALLBACK_RTOL, port_dtype, summarize, torch_in_dtype

    half_dtype = port_dtype(ported)
    if half_dtype is not None:
        factor = DEFAULT_FACTOR if half_factor is None else float(half_factor)
        if not factor >= 0:
            raise ValueError(f"[validate] 'half_factor' must be non-negative but got {half_factor!r}.")
        half_model, why = torch_in_dtype(model, half_dtype)
        half = {"dtype": half_dtype, "model": half_model, "factor": factor, "note": why}
    has_trace = callable(getattr(ported, "trace", None))
    if compare_modules and not has_trace:
        notes.append("the port has no trace(); per-module comparison skipped")
    runs, first = [], None
    for xs in input_sets:
        run = _run_once(model, ported, xs, compare_modules and has_trace, rtol, atol, half)
        runs.append(run)
        bad = next((m for m in run["modules"] if not m["ok"]), None)
        if first is None and bad is not None:
            first = {k: bad[k] for k in ("name", "type", "max_abs", "max_rel") + (("note",) if "note" in bad else ())}
            first["input_shapes"] = run["input_shapes"]
    if compare_modules and has_trace and not runs[0]["modules"]:
        notes.append("no torch submodule output could be matched with the port's trace (no forward hooks fired, "
                     "or the trace names differ): per-module comparison found nothing to compare")

    grad_report = None
    if grads:
        grad_bar = rtol if grad_rtol is None else grad_rtol
        if half is not None and grad_rtol is None:
            grad_bar = max(grad_bar, FALLBACK_RTOL[half["dtype"]])  # no torch half backward is run for a bar
            notes.append(f"gradients of the {half['dtype']} port are compared with rtol={grad_bar:g}")
        grad_report = _grad_parity(model, ported, input_sets[0], grad_bar, atol, seed)
    ok = all(row["ok"] for run in runs for row in run["outputs"])
    if grad_report is not None:
        ok = ok and grad_report["ok"]
    data = {
        "model": source_name,
        "ok": bool(ok),
        "io_layout": getattr(ported, "io_layout", None),
        "num_transposes": getattr(ported, "num_transposes", None),
        "rtol": rtol,
        "atol": atol,
        "first_divergence": first,
        "runs": runs,
        "grads": grad_report,
        "notes": notes,
    }
    if half is not None:
        if half["note"]:
            notes.append(half["note"])
        data["precision"] = summarize(runs[0]["modules"], half["dtype"], half["factor"], half["model"] is not None)
    return Report(data)


def _grad_parity(model, ported, xs, rtol: float, atol: float, seed: int) -> Dict[str, Any]:
    """Gradients of ``sum(out_i * g_i)`` w.r.t. float inputs and trainable parameters, torch vs port."""
    import mlx.core as mx
    import torch

    gen = np.random.default_rng(seed + 7)
    xs_t = tuple(x.detach().clone().requires_grad_(x.dtype.is_floating_point) for x in xs)
    params_before = {n: p.grad for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    t_leaves = _leaves(model(*xs_t))
    weights = [gen.standard_normal(tuple(t.shape)).astype(np.float32) if t.dtype.is_floating_point else None
               for t in t_leaves]
    loss = sum((t.float() * torch.from_numpy(w)).sum() for t, w in zip(t_leaves, weights) if w is not None)
    loss.backward()
    t_param_grads = {n: p.grad.detach().numpy() for n, p in model.named_parameters()
                     if p.requires_grad and p.grad is not None}
    t_input_grads = [x.grad.detach().numpy() if x.grad is not None else None for x in xs_t]
    for n, p in model.named_parameters():  # leave the model's .grad as we found it
        p.grad = params_before[n]

    xs_mx, in_perms = _port_inputs(ported, xs)
    float_idx = [i for i, x in enumerate(xs) if x.dtype.is_floating_point]
    out_layouts = None
    original = ported.trainable_parameters()

    def loss_fn(params, float_inputs):
        nonlocal out_layouts
        ported.update(params)
        args = list(xs_mx)
        for i, v in zip(float_idx, float_inputs):
            args[i] = v
        leaves = _leaves(ported(*args))
        if out_layouts is None:
            out_layouts = _layouts(ported, "output_layouts", len(leaves))
        total = mx.array(0.0)
        for p, w, lay in zip(leaves, weights, out_layouts):
            if w is None:
                continue
            p_t = p.transpose(_inverse(parse_layout(lay, p.ndim))) if p.ndim else p
            total = total + (p_t.astype(mx.float32) * mx.array(w)).sum()
        return total

    try:
        g_params, g_inputs = mx.grad(loss_fn, argnums=(0, 1))(original, [xs_mx[i] for i in float_idx])
        p_param_grads = ported.torch_parameter_grads(g_params)
    except (ValueError, TypeError, RuntimeError, NotImplementedError) as exc:
        # A port whose backward cannot run fails gradient parity; the report says why instead of raising.
        return {"ok": False, "input_shapes": [list(x.shape) for x in xs], "inputs": [], "parameters": [],
                "error": f"{type(exc).__name__}: {exc}"}
    finally:
        ported.update(original)

    input_rows = []
    for k, i in enumerate(float_idx):
        expected = t_input_grads[i]
        got = np.transpose(_mx_np(g_inputs[k]), _inverse(in_perms[i]))
        if expected is None:
            expected = np.zeros_like(got)
        input_rows.append(dict(_compare(got, expected, rtol, atol), name=f"input[{i}]"))
    param_rows = []
    for name, expected in t_param_grads.items():
        if name not in p_param_grads:
            param_rows.append({"name": name, "shape": list(expected.shape), "max_abs": math.inf,
                               "max_rel": math.inf, "scale": None, "ok": False, "note": "no gradient in the port"})
            continue
        param_rows.append(dict(_compare(np.asarray(p_param_grads[name]), expected, rtol, atol), name=name))
    for name in p_param_grads:
        if name not in t_param_grads:
            got = np.asarray(p_param_grads[name])
            row = _compare(got, np.zeros_like(got), rtol, atol)
            row.update(name=name, note="torch has no gradient for it")
            param_rows.append(row)
    ok = all(r["ok"] for r in input_rows + param_rows)
    return {"ok": bool(ok), "input_shapes": [list(x.shape) for x in xs], "inputs": input_rows,
            "parameters": param_rows}
