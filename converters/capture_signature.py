"""The forward's signature and each graph input's argument, recorded at capture (``graph["signature"]``).

Producer of the record ``input_binding.py`` reads (its docstring has the format). A capture knows where each graph
input came from as a location: ``("arg", i)`` (the i-th positional example input) or ``("kw", key)`` (an
``example_kwargs`` entry); this module turns locations into the forward's parameters: a positional input past the
named positional parameters goes to ``*args`` by index, a keyword that names no parameter to ``**kwargs`` by key.
Torch-free (``inspect`` only): the frontends pass what torch told them.
"""

from __future__ import annotations

import inspect

from .input_binding import KIND_NAMES, compile_signature, is_scalar

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def forward_params(forward) -> "list | None":
    """The parameter records of a bound ``forward`` (``self`` excluded), or None when Python cannot read them."""
    try:
        params = inspect.signature(forward).parameters.values()
    except (TypeError, ValueError):
        return None
    out = []
    for p in params:
        record = {"name": p.name, "kind": KIND_NAMES[p.kind]}
        if p.default is not p.empty:
            record["default"] = {"value": p.default} if is_scalar(p.default) else "other"
        out.append(record)
    return out


def program_params(locations: list, names: list) -> list:
    """Parameters for a program without a Python forward (a ``.pt2``): its positional inputs positional-only,
    named as its placeholders (``None``: ``arg<i>``), and its keyword inputs keyword-only, all required."""
    positional = {}  # a tuple argument's leaves have a placeholder each: the argument is arg<i>
    for loc, name in zip(locations, names):
        if loc[0] == "arg":
            positional.setdefault(loc[1], name if name and len(loc) == 2 else f"arg{loc[1]}")
    out = [{"name": positional[i], "kind": "positional_only"} for i in sorted(positional)]
    out += [{"name": key, "kind": "keyword_only"} for key in dict.fromkeys(loc[1] for loc in locations
                                                                           if loc[0] == "kw")]
    return out


def signature_record(params: list, locations: list, constants: list, num_inputs: int) -> dict:
    """``graph["signature"]`` for inputs at ``locations`` (one per graph input) and baked-in ``constants``
    (``[(location, value)]``), checked as a loaded artifact's would be (``ValueError`` when the example does not
    fit the forward: torch would have refused it first)."""
    positional = [p["name"] for p in params if p["kind"] in ("positional_only", "positional_or_keyword")]
    named = {p["name"] for p in params if p["kind"] in ("positional_or_keyword", "keyword_only")}
    var_positional = next((p["name"] for p in params if p["kind"] == "var_positional"), None)
    var_keyword = next((p["name"] for p in params if p["kind"] == "var_keyword"), None)

    def place(location) -> dict:
        where, what = location[:2]
        path = {"path": list(location[2])} if len(location) > 2 else {}  # inside a tuple argument
        if where == "arg":
            if what < len(positional):
                return {"param": positional[what], **path}
            if var_positional is None:
                raise ValueError(f"the forward takes {len(positional)} positional argument(s) but the example gives "
                                 f"more ({what + 1})")
            return {"param": var_positional, "index": what - len(positional), **path}
        if what in named:
            return {"param": what, **path}
        if var_keyword is None:
            raise ValueError(f"the forward has no parameter {what!r} (and no **kwargs)")
        return {"param": var_keyword, "key": what, **path}

    record = {"params": params, "inputs": [place(loc) for loc in locations]}
    if constants:
        if any(len(loc) > 2 for loc, _ in constants):
            raise ValueError("a non-tensor value inside a tuple argument cannot be baked into the port")
        record["constants"] = [dict(place(loc), value=value) for loc, value in constants]
    compile_signature(record, num_inputs)
    return record
