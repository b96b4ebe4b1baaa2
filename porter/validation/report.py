"""What :func:`porter.validate` found, as an object, JSON and a printed table."""

from __future__ import annotations

import json
import math
from typing import Any, Dict, List, Optional


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
            from porter.validate_half import format_lines

            lines.append("")
            lines.extend(format_lines(d["precision"]))
        for note in d["notes"]:
            lines.append(f"  note: {note}")
        return "\n".join(lines)
