"""``porter.validate``: run a torch model and its port on the same inputs and say where they differ.

Torch is the oracle. Inputs go through both models with the port's declared layouts accounted for; every output is
compared against the accuracy bar (:mod:`porter.compare`), every torch submodule's output (collected with forward
hooks) is compared with the port's ``trace`` of the same module, and the first module that diverges in execution
order is named, so a wrong port points at its first wrong layer instead of just "the logits differ". Gradient
parity (inputs and parameters, by torch ``state_dict`` name) is optional.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

from porter.compare import ATOL, RTOL, compare, leaves, port_inputs, port_outputs, split_call, torch_to_numpy

from .grads import grad_parity
from .hooks import derived, module_rows, torch_module_outputs
from .inputs import default_input_sets
from .report import Report


def _run_once(model, ported, xs, per_module: bool, rtol: float, atol: float, half=None) -> Dict[str, Any]:
    """One input set through both models: per-output rows and (``per_module``) per-module rows. ``half``: the
    half-precision context of a float16/bfloat16 port (torch's copy in that dtype, ``validate_half.py``)."""
    import torch

    xs_mx, _ = port_inputs(ported, xs)
    p_args, p_kwargs = split_call(ported, xs_mx)  # keyword inputs by name, to both models
    t_args, t_kwargs = split_call(ported, xs)
    if per_module:
        t_out, t_modules = torch_module_outputs(model, t_args, t_kwargs)
        p_out, p_modules = ported.trace(*p_args, **p_kwargs)
    else:
        with torch.no_grad():
            t_out = model(*t_args, **t_kwargs)
        p_out, t_modules, p_modules = ported(*p_args, **p_kwargs), {}, {}
    h_leaves, h_modules = [], {}
    if half is not None and half["model"] is not None:
        from porter.validate_half import inputs_in_dtype

        h_args, h_kwargs = split_call(ported, inputs_in_dtype(xs, half["dtype"]))
        try:
            if per_module:
                h_out, h_modules = torch_module_outputs(half["model"], h_args, h_kwargs)
            else:
                with torch.no_grad():
                    h_out = half["model"](*h_args, **h_kwargs)
            h_leaves = leaves(h_out)
        except Exception as exc:  # noqa: BLE001  (an op without a half CPU kernel: the fallback bar, said why)
            half["model"] = None
            half["note"] = (f"torch cannot run the model in {half['dtype']} ({type(exc).__name__}: "
                            f"{str(exc).splitlines()[0][:120] if str(exc) else ''})")

    t_leaves, p_arrays = leaves(t_out), port_outputs(ported, p_out)
    out_rows = []
    if len(t_leaves) != len(p_arrays):
        out_rows.append({"index": "all", "shape": [], "max_abs": math.inf, "max_rel": math.inf, "scale": None,
                         "ok": False, "note": f"torch returned {len(t_leaves)} tensors, the port {len(p_arrays)}"})
    for i, (t, p) in enumerate(zip(t_leaves, p_arrays)):
        row = compare(p, torch_to_numpy(t), rtol, atol)
        if half is not None:
            row = derived(row, t, h_leaves[i] if i < len(h_leaves) else None, half, rtol, atol)
        out_rows.append(dict(row, index=i))
    mod_rows, unmatched = module_rows(t_modules, p_modules, rtol, atol, half, h_modules)
    return {"input_shapes": [list(x.shape) for x in xs], "outputs": out_rows, "modules": mod_rows,
            "unmatched_modules": unmatched}


# ---------------------------------------------------------------------------------------------------- main
def validate(model, ported, inputs=None, *, rtol: float = RTOL, atol: float = ATOL, grads: bool = False,
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
        input_sets, size_notes = default_input_sets(model, ported, example_inputs, seed)
        notes += size_notes
    else:
        if not isinstance(inputs, list):
            raise TypeError("[validate] 'inputs' must be a list of input tuples, e.g. [(x,)] or [(x1,), (x2,)], "
                            f"but got {type(inputs).__name__}.")
        input_sets = [(s,) if isinstance(s, torch.Tensor) else tuple(s) for s in inputs]
        if not input_sets:
            raise ValueError("[validate] 'inputs' must hold at least one input tuple.")

    half = None
    from porter.validate_half import DEFAULT_FACTOR, FALLBACK_RTOL, port_dtype, summarize, torch_in_dtype

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
    # the torch model's dict/list attributes go back to what the caller had before the gradient pass and at the end:
    # a no_grad forward here would fill an eval cache (timm's attention_bias_cache) with a tensor gradients cannot
    # reach through, and torch's gradient would then miss the cached parameters (a false gradient failure)
    from porter.converters.capture_buffers import ContainerSnapshot

    containers = ContainerSnapshot(model)
    try:
        return _validate_runs(model, ported, input_sets, compare_modules, has_trace, rtol, atol, half, grads,
                              grad_rtol, seed, notes, source_name, containers)
    finally:
        containers.restore()


def _validate_runs(model, ported, input_sets, compare_modules, has_trace, rtol, atol, half, grads, grad_rtol, seed,
                   notes, source_name, containers):
    from porter.validate_half import FALLBACK_RTOL, summarize

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
        containers.restore()
        grad_report = grad_parity(model, ported, input_sets[0], grad_bar, atol, seed)
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
