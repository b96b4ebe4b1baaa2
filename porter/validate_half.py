"""What half precision costs: ``porter.validate`` of a float16/bfloat16 port against the float32 torch model.

A half port is compared with the float32 torch model (the oracle), output by output and module by module, and
torch itself is run in the port's dtype on the same inputs (a copy of the model, ``.to(dtype)``). The bar of each
compared tensor is then derived from what torch loses::

    max|porter - torch32| <= max(rtol * max|torch32|, atol, factor * max|torch_half - torch32|)

so a port passes when it loses at most ``factor`` (default 4) times what torch's own half-precision run loses.
When torch cannot run the model in that dtype (an op without a half CPU kernel, float32 constants baked into an
exported graph), the bar is ``max(FALLBACK_RTOL[dtype] * max|torch32|, atol)`` and the report says so.

The report names the module that loses the most: in execution order, the module whose output's relative error
rises furthest above the largest relative error of the modules that finished before it.

Imports torch only inside the functions that run it.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

HALF = ("float16", "bfloat16")
DEFAULT_FACTOR = 4.0
# the bar when torch cannot run the model in the dtype: a few units of the dtype's rounding (2^-11, 2^-8) times the
# error growth of a deep network; used only then, and the report says so
FALLBACK_RTOL = {"float16": 1e-2, "bfloat16": 8e-2}

__all__ = ["HALF", "DEFAULT_FACTOR", "FALLBACK_RTOL", "port_dtype", "torch_in_dtype", "inputs_in_dtype",
           "derived_row", "summarize", "format_lines"]


def port_dtype(ported) -> Optional[str]:
    """``"float16"``/``"bfloat16"`` for a half-precision port, else None."""
    dtype = getattr(ported, "dtype", None)
    return dtype if dtype in HALF else None


def _torch_dtype(dtype: str):
    import torch

    return {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]


def torch_in_dtype(model, dtype: str):
    """``(copy of model in dtype, None)`` or ``(None, why not)``; ``model`` itself is not touched."""
    import copy

    try:
        return copy.deepcopy(model).to(_torch_dtype(dtype)), None
    except Exception as exc:  # noqa: BLE001  (a module that cannot be copied or cast: fall back, say why)
        return None, f"torch's model cannot be copied into {dtype} ({type(exc).__name__}: {str(exc)[:120]})"


def inputs_in_dtype(xs, dtype: str) -> tuple:
    """Float inputs cast to ``dtype`` (as the port casts them), others unchanged."""
    target = _torch_dtype(dtype)
    return tuple(x.to(target) if x.dtype.is_floating_point else x for x in xs)


def derived_row(row: Dict[str, Any], torch_row: Optional[Dict[str, Any]], dtype: str, rtol: float, atol: float,
                factor: float) -> Dict[str, Any]:
    """``row`` (porter vs torch32) judged against the half bar; ``torch_row`` is torch_half vs torch32 (None
    when torch did not run in the dtype)."""
    out = dict(row)
    if row.get("note") == "shape differs" or row.get("exact"):
        return out  # a wrong shape, or an exact (integer) output: the float32 verdict stands
    scale = row.get("scale") or 0.0
    if torch_row is not None and torch_row.get("note") != "shape differs":
        out["torch_half_max_abs"] = torch_row["max_abs"]
        out["torch_half_max_rel"] = torch_row["max_rel"]
        bar = max(rtol * scale, atol, factor * torch_row["max_abs"])
    else:
        bar = max(FALLBACK_RTOL[dtype] * scale, atol)
    out["bar"] = bar
    out["ok"] = bool(row["max_abs"] <= bar)
    return out


def summarize(modules: List[Dict[str, Any]], dtype: str, factor: float, torch_ran: bool) -> Dict[str, Any]:
    """The precision section of a report, from the per-module rows of the first input set (execution order)."""
    rows, running = [], 0.0
    for m in modules:
        rel = m["max_rel"] if math.isfinite(m["max_rel"]) else math.inf
        step = max(0.0, rel - running) if math.isfinite(rel) else math.inf
        running = max(running, rel)
        rows.append({"name": m["name"], "type": m["type"], "max_rel": m["max_rel"],
                     "torch_half_max_rel": m.get("torch_half_max_rel"), "step": step})
    loses = max(rows, key=lambda r: r["step"], default=None)
    worst = max(rows, key=lambda r: r["max_rel"], default=None)
    return {"dtype": dtype, "against": "float32", "torch_in_dtype": torch_ran, "factor": factor,
            "fallback_rtol": None if torch_ran else FALLBACK_RTOL[dtype],
            "loses_most": loses and {k: loses[k] for k in ("name", "type", "max_rel", "step")},
            "worst_module": worst and {k: worst[k] for k in ("name", "type", "max_rel")},
            "modules": rows}


def _fmt(v) -> str:
    if v is None:
        return "-"
    return "inf" if isinstance(v, float) and math.isinf(v) else format(v, ".2e")


def format_lines(p: Dict[str, Any]) -> List[str]:
    """The precision section of ``str(report)``."""
    if p["torch_in_dtype"]:
        bar = f"max(rtol * max|torch|, atol, {p['factor']:g} x torch's own {p['dtype']} error)"
    else:
        bar = f"max({p['fallback_rtol']:g} * max|torch|, atol) (torch could not run the model in {p['dtype']})"
    lines = [f"  precision: {p['dtype']} port against the float32 torch model; bar {bar}"]
    top = sorted(p["modules"], key=lambda r: -r["step"])[:8]
    if top:
        lines.append(f"    {'module':<36} {'type':<20} {'rel err':>10} {'torch ' + p['dtype']:>16} {'step':>10}")
        for r in top:
            lines.append(f"    {r['name']:<36} {r['type']:<20} {_fmt(r['max_rel']):>10} "
                         f"{_fmt(r['torch_half_max_rel']):>16} {_fmt(r['step']):>10}")
    loses = p["loses_most"]
    if not p["modules"]:
        lines.append("    no per-module outputs to compare (outputs only): no module named as losing the most")
    if loses:
        lines.append(f"  loses the most: {loses['name']} ({loses['type']}): relative error {_fmt(loses['max_rel'])}, "
                     f"{_fmt(loses['step'])} above every module before it")
    return lines
