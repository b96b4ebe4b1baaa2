"""The second-size check of a shapeless ``.mlxfn`` export (``porter.export_function(..., shapeless=True)``).

MLX's shapeless export re-infers every op's output shape from its inputs when the file runs at another size. Some
ops cannot (MLX has no shape rule for ``Slice``, ``Pad``, ``AsStrided``, scatters: the call raises), and some keep
what was computed at trace time (a ``reshape`` to sizes read off the example, a broadcast to them, window tables and
constants built in Python): those give an error or, worse, numbers for the wrong size. Nothing in the file says which,
so the file is run at a second size and compared with the model there. When it fails, the torch module at fault is
found by exporting the model's per-module outputs (``model.trace``, a ported model's) and bisecting on them: the
first module in execution order whose output cannot be computed, or differs, at the second size is named, with
MLX's message naming the op.
"""

from __future__ import annotations

import os
import tempfile

import mlx.core as mx
import numpy as np

from .export import (ExportError, example_arrays, flatten_outputs, max_abs_diff, row_contiguous_parameters, within,
                     write_mlxfn)

# growth of every dynamic dim tried for the second size, first the one the model accepts
DELTAS = (1, 2, 3, 4, 5, 6, 7, 8, 16)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _call_axis(torch_axis: int, layout) -> int:
    """The axis of the model's call layout holding torch dim ``torch_axis`` (layouts like ``"NCHW->NHWC"``)."""
    if not layout or "->" not in layout:
        return torch_axis
    src, dst = (part.strip() for part in layout.split("->"))
    if sorted(src) != sorted(dst) or torch_axis >= len(src):
        return torch_axis
    return dst.index(src[torch_axis])


def dynamic_axes(model, inputs) -> list:
    """Per input, the call-layout axes allowed to vary: a ported model's ``dynamic_dims``; dim 0 for any other
    callable (the batch)."""
    dims = getattr(model, "dynamic_dims", None)
    if dims is None:
        return [{0} if a.ndim else set() for a in inputs]
    layouts = list(getattr(model, "input_layouts", None) or [])
    axes = [set() for _ in inputs]
    for entry in dims:
        i = entry["input"]
        if i < len(inputs):
            axes[i].add(_call_axis(entry["axis"], layouts[i] if i < len(layouts) else None))
    return axes


def _like(example: mx.array, shape, rng) -> mx.array:
    if mx.issubdtype(example.dtype, mx.floating):
        return mx.array(rng.standard_normal(shape).astype(np.float32)).astype(example.dtype)
    if example.dtype == mx.bool_:
        return mx.array(rng.random(shape) < 0.5)
    high = max(int(mx.max(example).item()) + 1, 1) if example.size else 1
    return mx.array(rng.integers(0, high, size=shape)).astype(example.dtype)


def derive_probe(model, inputs):
    """A second input size the model accepts: every dynamic dim grown by the first of :data:`DELTAS` that the model
    runs (its input checks refuse the others), else the first dynamic dim of each input alone (the batch: a port can
    keep a dim dynamic that a later layer cannot take); ``(inputs, reference outputs)``."""
    axes = dynamic_axes(model, inputs)
    if not any(axes):
        raise ExportError("[export_function] 'shapeless': the model keeps no input dim dynamic (it was converted "
                          "with static shapes, so it runs at the example's size only). Convert it with dynamic dims "
                          "(porter convert --dynamic, porter.convert(..., dynamic=...)), or export without shapeless.")
    rng = np.random.default_rng(1)
    refusals = []
    first_only = [set(sorted(a)[:1]) for a in axes]
    for delta, grown in [(d, axes) for d in DELTAS] + ([(d, first_only) for d in DELTAS] if first_only != axes else []):
        shapes = [tuple(d + delta if k in grown[i] else d for k, d in enumerate(a.shape)) for i, a in enumerate(inputs)]
        probe = [_like(a, s, rng) for a, s in zip(inputs, shapes)]
        try:
            reference = flatten_outputs(model(*probe))
            mx.eval([a for _, a in reference])
            return probe, reference
        except (ValueError, TypeError) as exc:
            refusals.append(f"{shapes}: {_first_line(exc)}")
    raise ExportError("[export_function] 'shapeless': found no second input size the model accepts to check the "
                      "export at; give one with probe_inputs (--probe-shape). Tried:\n  " + "\n  ".join(refusals[:3]))


def check_shapeless(model, imported, inputs, probe_inputs, report, *, rtol: float, atol: float) -> None:
    """Run the shapeless file ``imported`` at a second size; raise :class:`ExportError` naming the module and op
    when it fails or differs from ``model``; on success record the size (and what the file cannot check)."""
    if probe_inputs is None:
        probe, reference = derive_probe(model, inputs)
    else:
        probe = example_arrays(probe_inputs, "probe_inputs", seed=1)
        try:
            reference = flatten_outputs(model(*probe))
            mx.eval([a for _, a in reference])
        except (ValueError, TypeError) as exc:
            raise ExportError(f"[export_function] 'probe_inputs' {[tuple(a.shape) for a in probe]}: the model "
                              f"refuses them: {_first_line(exc)}") from exc
    shapes = [tuple(a.shape) for a in probe]
    problem = detail = None
    try:
        diff = max_abs_diff(imported(*probe), reference, "the shapeless file")
        if not within(diff, reference, rtol, atol):
            problem = f"its outputs differ from the model's by up to {diff:.3g}"
    except ExportError as exc:
        problem = str(exc)
    except Exception as exc:  # MLX's own refusal, e.g. "[Primitive::output_shapes] Slice cannot infer output shapes."
        problem, detail = "it fails", _first_line(exc)
    if problem is not None:
        where = locate(model, inputs, probe) or (f"MLX: {detail} " if detail else "")
        raise ExportError(f"A shapeless export of this model is wrong at other input sizes: at {shapes} {problem}. "
                          f"{where}Export with fixed shapes instead (without shapeless; one file per input size).")
    report.probe_shapes = shapes
    checks = getattr(model, "input_checks", None)
    if checks is not None and len(checks):
        report.notes.append(f"the port checks {len(checks)} condition(s) on its input sizes on every call; the "
                            "shapeless file cannot, so it also runs at sizes the port would refuse (and torch "
                            "never computed): call it only at sizes the port accepts")


def locate(model, inputs, probe) -> str:
    """``"Module 'x' ... "``: the first module (execution order) whose output a shapeless export cannot compute, or
    computes wrongly, at the probe size; empty when the model has no ``trace`` or it does not say."""
    trace = getattr(model, "trace", None)
    if not callable(trace):
        return ""
    try:
        _, expected = trace(*probe)
        _, at_example = trace(*inputs)
    except Exception:
        return ""
    names = [name for name in at_example if name in expected and isinstance(expected[name], mx.array)]
    if not names:
        return ""

    def run_first(k):
        def fn(*args):
            record = trace(*args)[1]
            return tuple(record[name] for name in names[:k])

        handle, tmp = tempfile.mkstemp(prefix="porter-probe-", suffix=".mlxfn")
        os.close(handle)
        try:
            with row_contiguous_parameters(model):
                write_mlxfn(fn, tmp, [inputs], True)
            return mx.import_function(tmp)(*probe)
        finally:
            os.unlink(tmp)

    try:
        outputs = run_first(len(names))
    except ExportError:
        return ""
    except Exception:
        lo, hi = 1, len(names)  # the smallest k whose first-k export fails lies in [lo, hi]
        message = ""
        while lo < hi:
            mid = (lo + hi) // 2
            try:
                run_first(mid)
                lo = mid + 1
            except Exception as exc:
                hi, message = mid, _first_line(exc)
        if not message:
            try:
                run_first(lo)
            except Exception as exc:
                message = _first_line(exc)
        return (f"Module {names[lo - 1]!r} is the first whose output cannot be computed at that size: an op there "
                f"cannot follow a size change in a shapeless file (MLX: {message}) ")
    for name, ours in zip(names, outputs):
        theirs = expected[name]
        if tuple(ours.shape) != tuple(theirs.shape):
            return (f"Module {name!r} is the first whose output is wrong at that size (shape "
                    f"{tuple(ours.shape)} instead of {tuple(theirs.shape)}): an op there kept a size read off the "
                    "example. ")
        if ours.size and mx.issubdtype(theirs.dtype, mx.floating):
            gap = float(mx.max(mx.abs(ours.astype(mx.float32) - theirs.astype(mx.float32))))
            scale = float(mx.max(mx.abs(theirs.astype(mx.float32))))
            if not gap <= max(1e-4 * scale, 1e-4):
                return (f"Module {name!r} is the first whose output is wrong at that size (off by up to {gap:.3g}): "
                        "an op there kept a size or table computed from the example. ")
    return ""
