"""What a lossy port costs (quantization, half precision): per-module error against torch, the worst module named.

A lossy port is not expected to pass the float32 bar; :func:`cost` reads a validation :class:`Report` of the lossy
port against the float torch model as a measurement instead of a verdict.
"""

from __future__ import annotations

from typing import Any, Dict


def cost(report) -> Dict[str, Any]:
    """``{"max_rel_error", "worst_module", "worst_module_rel_error", "modules": [{name, type, max_rel}, ...]}``:
    the worst relative error per module over every input size validated, largest first."""
    per_module: dict = {}
    for run in report.runs:
        for row in run["modules"]:
            name = row["name"]
            if name not in per_module or row["max_rel"] > per_module[name]["max_rel"]:
                per_module[name] = {"name": name, "type": row.get("type", ""), "max_rel": float(row["max_rel"])}
    rows = sorted(per_module.values(), key=lambda r: -r["max_rel"])
    worst_output = max((float(row["max_rel"]) for run in report.runs for row in run["outputs"]), default=0.0)
    return {"max_rel_error": worst_output, "worst_module": rows[0]["name"] if rows else None,
            "worst_module_rel_error": rows[0]["max_rel"] if rows else None, "modules": rows}


def describe(measured: Dict[str, Any], what: str, top: int = 5) -> str:
    """A few lines for the CLI: the output error and the modules that lose the most."""
    lines = [f"{what}: max relative error of the outputs against torch float32: {measured['max_rel_error']:.2e}"]
    if measured["modules"]:
        lines.append(f"  modules losing the most (relative error of their output):")
        for row in measured["modules"][:top]:
            lines.append(f"    {row['name']:<40} {row['type']:<20} {row['max_rel']:.2e}")
    return "\n".join(lines)
