"""The input checks of an ExportedProgram (imports torch; used only for conversion). Read by ``guards.py``.

What torch.export specialised on, and where it records it (torch 2.13):

- ``ep._guards_code``: the shape env's guards as Python text over input sizes (``L['x'].size()[2] % 2 != 1``):
  branches taken on shapes, divisibility a reshape needed, equalities between inputs. ``ep.module()`` checks them.
- the user-input placeholders' ``meta["val"]`` shapes: an int where the dim was made static (a channel count a
  weight fixed, a size ``int()``-ed into the graph, a size-1 dim), the same symbol in two places (equal dims), or
  an expression of other dims (a derived dim such as ``2*s0``).
- ``ep.range_constraints``: the range of each symbol (a lower bound of 2 is torch's 0/1 specialisation, which
  torch itself does not check: a size-1 dim runs the size-oblivious graph; Porter follows torch).

Every one becomes a declarative check (see ``guards.py`` for the format). An ``or`` (einsum's broadcast guard
``a.size(0) == 1 or a.size(0) == b.size(0)``) is checked as its first alternative that is in the format and holds
at the example: a stronger condition, so every size that passes it satisfies torch's guard. A guard that cannot be
written in that format (no such alternative, a true division) makes every dim it reads static-checked at the
example's size: never dropped.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import re

import torch

from .guards import MAX_DEPTH, CMPS, compile_expr

_SOURCE = re.compile(r"L(?:\[[^\]]*\])+\.(size|stride)\(\)\[(\d+)\]")
_CMP = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
_NEGATE = {"eq": "ne", "ne": "eq", "lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}
_BIN = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.FloorDiv: "floordiv", ast.Mod: "mod"}
_CALLS = {"max": "max", "min": "min", "Max": "max", "Min": "min", "sym_max": "max", "sym_min": "min",
          "Mod": "mod", "PythonMod": "mod", "FloorDiv": "floordiv"}


class Untranslatable(Exception):
    """A guard outside the check format."""


def _dim(i, axis):
    return {"dim": [i, axis]}


def _op(op, a, b):
    return {"op": op, "args": [a, b]}


def _depth(e) -> int:
    return 1 + max((_depth(a) for a in e["args"]), default=0) if isinstance(e, dict) and "op" in e else 0


_SCALED_BITS = 32  # trunc(factor * float(E)) is translated for products below 2**32


def _scaled_float(node):
    """``(factor, E)`` for ``factor * sym_float(E)`` / ``sym_float(E) * factor`` (a positive finite float literal),
    else None."""
    import math

    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
        return None
    for const, other in ((node.left, node.right), (node.right, node.left)):
        if not (isinstance(const, ast.Constant) and type(const.value) is float and math.isfinite(const.value)
                and const.value > 0):
            continue
        if isinstance(other, ast.Call) and len(other.args) == 1 and not other.keywords:
            name = other.func.attr if isinstance(other.func, ast.Attribute) else getattr(other.func, "id", "")
            if name in ("sym_float", "float", "ToFloat"):
                return const.value, other.args[0]
    return None


class _Translator:
    """Python guard text (sources replaced by names ``d_<input>_<axis>``) -> list of checks."""

    def __init__(self, dims: dict, ranks: list, hints: dict = None):
        self.dims = dims  # "d_i_k" -> (i, k)
        self.ranks = ranks
        self.hints = hints or {}  # (i, k) -> the example's size, or None where unknown
        self.side: list = []  # conditions an expression is exact under (checked with the guard that read it)

    def expr(self, node):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name) and node.id in self.dims:
            return _dim(*self.dims[node.id])
        if isinstance(node, ast.Name) and node.id.startswith("stride_"):
            return self.stride(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            operand = self.expr(node.operand)
            return -operand if isinstance(operand, int) else _op("mul", -1, operand)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
            return self.expr(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
            return _op(_BIN[type(node.op)], self.expr(node.left), self.expr(node.right))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            exponent = node.right
            if isinstance(exponent, ast.Constant) and type(exponent.value) is int and 1 <= exponent.value <= 8:
                base = self.expr(node.left)
                out = base
                for _ in range(exponent.value - 1):
                    out = _op("mul", out, base)
                return out
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in _CALLS and len(node.args) >= 2 and not node.keywords:
                args = [self.expr(a) for a in node.args]
                if _CALLS[name] in ("mod", "floordiv") and len(args) != 2:
                    raise Untranslatable(ast.unparse(node))
                out = args[0]
                for a in args[1:]:
                    out = _op(_CALLS[name], out, a)
                return out
            if name in ("floor", "int", "trunc", "FloorToInt") and len(node.args) == 1 and _scaled_float(node.args[0]):
                return self.scaled(*_scaled_float(node.args[0]))
            if name in ("floor", "ceil", "int", "trunc", "FloorToInt", "CeilToInt") and len(node.args) == 1:
                return self.rounded(name, node.args[0])
        raise Untranslatable(ast.unparse(node))

    def alternative(self, node, negate) -> list:
        """The checks of the first alternative of ``a or b`` that is in the format and holds at the example sizes:
        every size passing them passes the guard (the port may refuse sizes torch would take, never the reverse)."""
        sizes: dict = {}
        for (i, k), size in self.hints.items():
            sizes.setdefault(i, {})[k] = size
        for value in node.values:
            try:
                checks = self.checks(value, negate)
                holds = all(CMPS[cmp](compile_expr(lhs)(sizes), compile_expr(rhs)(sizes)) for lhs, cmp, rhs in checks)
            except (Untranslatable, KeyError, TypeError):  # outside the format, or a size the example lacks
                continue
            if holds:
                return checks
        raise Untranslatable(ast.unparse(node))

    def rounded(self, name, arg):
        if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Div):
            a, b = self.expr(arg.left), self.expr(arg.right)
            if name in ("floor", "FloorToInt"):
                return _op("floordiv", a, b)
            if name in ("ceil", "CeilToInt"):  # ceil(a / b) == -((-a) // b), exact in integers
                return _op("mul", -1, _op("floordiv", _op("mul", -1, a), b))
            raise Untranslatable(f"{name}({ast.unparse(arg)})")
        return self.expr(arg)  # rounding an integer expression

    def scaled(self, factor: float, operand):
        """``trunc(factor * float(E))`` for a float literal ``factor > 0`` (the output size of
        ``F.interpolate(scale_factor=0.45)``), exactly as the float product rounds, in integers. ``factor`` is
        ``m / d`` exactly (``d`` a power of two), so the exact product's floor is ``q = (m * E) // d``; the float
        product is ``q + 1`` when the exact one lies within half a float spacing below it: ``G * 2**54 <= d * P2``
        with ``G = d - (m * E) % d`` (the gap times ``d``) and ``P2 = 2 * 2**floor(log2(q))`` (1 for ``q = 0``),
        half the spacing of the floats just below ``q + 1`` being ``P2 / 2**54`` (a tie rounds to the even
        ``q + 1``). Checked against Python's floats at every size below 10**5 and at random sizes to 2**32 for
        0.45, 1/3, 0.7 and other factors. Exact for ``0 <= E`` and ``q < 2**32``, which are checked too."""
        m, d = factor.as_integer_ratio()
        if m > 1 << 60 or d > 1 << 60:
            raise Untranslatable(f"{factor!r} * float(...)")
        e = self.expr(operand)
        product = _op("mul", m, e)
        q = _op("floordiv", product, d)
        gap = _op("sub", d, _op("mod", product, d))
        terms = [1] + [_op("mul", 1 << k, _op("min", 1, _op("floordiv", q, 1 << k))) for k in range(_SCALED_BITS)]
        while len(terms) > 1:  # a balanced sum: depth log2(terms), not one level per term
            terms = [_op("add", *terms[i:i + 2]) if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
        rounds_up = _op("min", 1, _op("max", 0, _op("add", _op("sub", _op("mul", d, terms[0]),
                                                                  _op("mul", gap, 1 << 54)), 1)))
        self.side.append((e, "ge", 0))
        self.side.append((q, "lt", 1 << _SCALED_BITS))
        return _op("add", q, rounds_up)

    def stride(self, name):
        # a contiguous torch input's stride: the product of the sizes after that dim
        _, i, k = name.split("_")
        i, k = int(i), int(k)
        out = 1
        for axis in range(k + 1, self.ranks[i]):
            out = _dim(i, axis) if out == 1 else _op("mul", out, _dim(i, axis))
        return out

    def quotient(self, node, other):
        """``A / B`` compared with an integer-valued float ``c`` (``|c| < 2**20``) as ``A`` against ``c * B``,
        with the side check ``B > 0``: exact for sizes below 2**32 (``A / B`` differs from ``c`` by at least
        ``1 / B``, more than half the float spacing at ``c``, so the rounded quotient is on the same side of ``c``).
        torch's non-strict export adds ``IntTrueDiv(E, E) >= 1.0`` while it computes a tensor's min/max
        (``_tensor_min_max``): left untranslated, it pinned SAM's image size. None when ``node`` is not such a
        quotient (the other side then translates ``c`` times ``B``)."""
        for a, b in ((node, other), (other, node)):
            if not (isinstance(a, ast.BinOp) and isinstance(a.op, ast.Div) and isinstance(b, ast.Constant)
                    and type(b.value) is float and b.value.is_integer() and abs(b.value) < 2 ** 20):
                continue
            if a is node:
                divisor = self.expr(a.right)
                side = (divisor, "gt", 0)
                if side not in self.side:
                    self.side.append(side)
                return self.expr(a.left)
            return _op("mul", int(b.value), self.expr(a.right))
        return None

    def checks(self, node, negate=False) -> list:
        if isinstance(node, ast.Expression):
            return self.checks(node.body, negate)
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And) and not negate:
            return [c for v in node.values for c in self.checks(v)]
        if isinstance(node, ast.BoolOp):  # an or (or a negated and): one alternative that held at the example
            return self.alternative(node, negate)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return self.checks(node.operand, not negate)
        if isinstance(node, ast.Compare):
            if negate and len(node.ops) != 1:
                raise Untranslatable(ast.unparse(node))
            out, left = [], node.left
            for op, right in zip(node.ops, node.comparators):
                if type(op) not in _CMP:
                    raise Untranslatable(ast.unparse(node))
                cmp = _CMP[type(op)]
                lhs, rhs = self.quotient(left, right) or self.expr(left), self.quotient(right, left) or self.expr(right)
                if max(_depth(lhs), _depth(rhs)) > MAX_DEPTH:
                    raise Untranslatable("nested deeper than the check format allows")
                out.append((lhs, _NEGATE[cmp] if negate else cmp, rhs))
                left = right
            out.extend(c for c in self.side if c not in out)  # never negated: what the expressions are exact under
            self.side = []
            return out
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            if node.value != negate:
                return []  # always true
        raise Untranslatable(ast.unparse(node))


def _input_paths(ep) -> list:
    """The guard-source prefix (``L['x']``) of every user input, in order; empty when torch cannot tell."""
    try:
        from torch.export._unlift import _get_input_paths
        from torch.utils import _pytree as pytree

        if ep.example_inputs is None:
            return []
        paths = _get_input_paths(ep.example_inputs, inspect.signature(ep.module().forward))
        return ["L" + pytree.keystr(p) for p in paths]
    except Exception:  # noqa: BLE001  (an older or unusual program: fall back to the shape env's sources)
        return []


def _add_named_sources(guards, sources: dict, names: list, ranks: list) -> None:
    """Locate guard sources neither the shape env nor the program's signature placed, by torch's placeholder
    naming (the keys of the source's path joined by ``_``): the inputs of a ``forward(self, *xs)`` are guarded as
    ``L['xs'][1]`` and named ``xs_1`` in the program, whose own signature is flat."""
    for guard, *_ in guards:
        for match in _SOURCE.finditer(guard):
            text = match.group(0).replace(".stride()", ".size()")
            if text in sources:
                continue
            keys = re.findall(r"\[([^\]]*)\]", text[:text.index(".size()")])
            name = "_".join(key.strip("'\"") for key in keys)
            axis = int(match.group(2))
            if name in names and axis < ranks[names.index(name)]:
                sources[text] = (names.index(name), axis)


def _shape_env_sources(ep, symbols: dict) -> dict:
    """Guard source text -> (input, axis), from the shape env of a program exported in this process."""
    try:
        from torch.export.exported_program import _get_shape_env

        env = _get_shape_env(ep.graph_module)
    except Exception:  # noqa: BLE001
        return {}
    out = {}
    for symbol, where in symbols.items():
        for source in (getattr(env, "var_to_sources", {}) or {}).get(symbol, []):
            out[source.name] = where
    return out


def input_checks(ep, user_inputs: list) -> tuple:
    """``(checks, dynamic_dims)`` for the user inputs (placeholder names, in order) of ``ep``."""
    import sympy

    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    # With the shape env at hand, every guard is translated one by one, and the ranges (which torch refines from
    # those same guards, the layout ones included) add nothing; a program loaded from a file keeps only text.
    guards, from_env = _guards(ep)
    names = list(user_inputs)
    vals = [placeholders[n].meta.get("val") for n in names]
    ranks = [v.dim() if isinstance(v, torch.Tensor) else 0 for v in vals]
    hints: dict = {}  # (i, axis) -> example size
    checks: list = []
    symbols: dict = {}  # sympy Symbol -> first (input, axis)
    dynamic: list = []
    derived: list = []

    seen: set = set()  # (lhs, cmp, rhs) already checked: a side condition shared by guards is written once

    def add(lhs, cmp, rhs, guard, message):
        key = json.dumps([lhs, cmp, rhs])
        if key not in seen:
            seen.add(key)
            checks.append({"lhs": lhs, "cmp": cmp, "rhs": rhs, "guard": guard, "message": message})

    for i, val in enumerate(vals):
        if not isinstance(val, torch.Tensor):
            continue
        for axis, size in enumerate(val.shape):
            text = f"{names[i]}.size({axis})"
            if isinstance(size, int):
                hints[(i, axis)] = size
                add(_dim(i, axis), "eq", size, f"{text} == {size}",
                    f"the capture made this dim static (the graph depends on it being {size})")
                continue
            hints[(i, axis)] = _hint(size)
            expr = size.node.expr
            if expr.is_number and from_env:
                # specialised by a guard of the shape env: that guard decides whether the port must check it
                hints[(i, axis)] = int(expr)
                dynamic.append({"input": i, "axis": axis})
                continue
            if isinstance(expr, sympy.Symbol) and expr not in symbols:
                symbols[expr] = (i, axis)
                dynamic.append({"input": i, "axis": axis})
                lo, hi = _range(ep, expr) if not from_env else (None, None)
                if lo is not None and lo > 2:  # torch's own check skips the 0/1-specialisation bound of 2
                    add(_dim(i, axis), "ge", lo, f"{text} >= {lo}", "the capture's range for this dim")
                if hi is not None:
                    add(_dim(i, axis), "le", hi, f"{text} <= {hi}", "the capture's range for this dim")
            else:
                derived.append((i, axis, expr))

    for i, axis, expr in derived:
        text = f"{names[i]}.size({axis})"
        source = str(expr)
        for symbol, (j, k) in symbols.items():
            source = re.sub(rf"\b{re.escape(symbol.name)}\b", f"d_{j}_{k}", source)
        try:
            translator = _Translator({f"d_{j}_{k}": (j, k) for j, k in symbols.values()}, ranks)
            rhs = translator.expr(ast.parse(source, mode="eval").body)
            if translator.side:  # exact only under side conditions this path cannot check
                raise Untranslatable(source)
            add(_dim(i, axis), "eq", rhs, f"{text} == {expr}", "the capture tied this dim to other input dims")
            dynamic.append({"input": i, "axis": axis})
        except (Untranslatable, SyntaxError):
            add(_dim(i, axis), "eq", hints[(i, axis)], f"{text} == {hints[(i, axis)]}",
                f"the capture tied this dim to others by {expr}, which Porter checks as static")

    sources = _shape_env_sources(ep, symbols)
    if any(m.group(0).replace(".stride()", ".size()") not in sources
           for guard, *_ in guards for m in _SOURCE.finditer(guard)):
        # a source the shape env does not name (a dim specialised to an int, or a loaded program): locate the
        # inputs through torch's own paths (ep.module() costs a graph copy, hence only when needed)
        for i, prefix in enumerate(_input_paths(ep)):
            for axis in range(ranks[i] if i < len(ranks) else 0):
                sources.setdefault(f"{prefix}.size()[{axis}]", (i, axis))
                sources.setdefault(f"L['flat_args'][{i}].size()[{axis}]", (i, axis))
    _add_named_sources(guards, sources, names, ranks)
    static: dict = {}  # (input, axis) or "*" -> the guard that forces it static
    literals = _graph_literals(ep)
    for guard, origin, where in guards:
        _translate_guard(guard, origin, literals, sources, names, ranks, add, static, hints, where)
    if "*" in static:  # a guard on a dim Porter cannot locate: nothing stays dynamic
        static = {key: static["*"] for key in hints}
    for (i, axis), why in sorted(static.items()):
        if hints.get((i, axis)) is None:
            raise NotImplementedError(f"a shape guard of the capture reads {names[i]}.size({axis}), whose example "
                                      "size is unknown; convert with dynamic='static'")
        add(_dim(i, axis), "eq", hints[(i, axis)], f"{names[i]}.size({axis}) == {hints[(i, axis)]}",
            f"the capture's guard {why} is outside the check format, so this dim is checked as static")
    pinned = {tuple(c["lhs"]["dim"]) for c in checks
              if c["cmp"] == "eq" and isinstance(c["lhs"], dict) and "dim" in c["lhs"] and isinstance(c["rhs"], int)}
    dynamic = [d for d in dynamic if (d["input"], d["axis"]) not in set(static) | pinned]
    return checks, dynamic


def _guards(ep) -> tuple:
    """``([(python text, origin)], from shape env)`` for every guard torch.export keeps (see ``_origin``)."""
    try:
        from torch._dynamo.source import ConstantSource
        from torch.export.exported_program import _get_shape_env
        from torch.fx.experimental.symbolic_shapes import ShapeGuardPythonPrinter

        env = _get_shape_env(ep.graph_module)
        if env is None or not env.var_to_sources:
            raise LookupError
    except Exception:  # noqa: BLE001  (a program loaded from a file keeps only the guards' text: all checked)
        return [(g, "unknown", "") for g in getattr(ep, "_guards_code", []) or []], False
    # the same selection and printing as torch's own ExportedProgram._guards_code
    local = {v for v, srcs in env.var_to_sources.items() if all(not isinstance(s, ConstantSource) for s in srcs)}
    printer = ShapeGuardPythonPrinter(env.var_to_sources, lambda s: s.name, env.var_to_sources)
    out = []
    for guard in env.guards:
        if not guard.expr.free_symbols.issubset(local):
            continue
        text = printer.doprint(guard.expr)
        if "L['self']" not in text:  # parameter sizes: constants of the port
            origin = _origin(guard)
            out.append((text, origin, _model_line(guard) if origin == "model" else ""))
    return out, True


def _model_line(guard) -> str:
    """`` (at file.py:157 in f: code)``: the model's line a guard was made at, for its refusal; a ``len()`` there
    is named as the cause (Python's ``len`` must return an int, so the capture fixed that dim: DiT's
    ``forward_with_cfg`` pinned the batch with ``x[: len(x) // 2]``)."""
    import linecache

    loc = getattr(getattr(guard, "sloc", None), "framework_loc", None)
    filename, lineno, function = getattr(loc, "filename", None), getattr(loc, "lineno", None), getattr(loc, "name", "")
    if not filename or not isinstance(lineno, int):
        return ""
    code = " ".join(linecache.getline(filename, lineno).split())
    out = f" (at {os.path.basename(filename)}:{lineno} in {function}" + (f": {code[:160]}" if code else "") + ")"
    if re.search(r"(?<![\w.])len\(", code):
        out += ("; Python's len() of a tensor returns a plain int, so the capture fixed that dim to the example's "
                "size: x.shape[0] or x.size(0) keeps it symbolic")
    elif re.search(r"(?<![\w.])int\(", code):  # SAM's get_rel_pos: int(2 * max(q_size, k_size) - 1)
        out += ("; Python's int() of a size computed from the input returns a plain int, so the capture fixed the "
                "sizes it was computed from to the example's")
    return out


_KERNEL_CODE = ("_subclasses/", "_prims_common/", "_prims/", "_refs/", "_decomp/", "_meta_registrations.py",
                "_ops.py", "fx/experimental/", "_higher_order_ops/", "_library/")


def _origin(guard) -> str:
    """Where a guard was made: "model" (the model's code, or torch's Python API such as ``F.interpolate``:
    it decides what the graph computes), "kernel-call" (a C++ kernel run on fake tensors fixed a size while
    working out its output's shape), "kernel" (inside one op's fake/meta implementation: torch working out
    that op's output size) or "layout" (torch deciding strides and contiguity, which a port does not have)."""
    loc = getattr(getattr(guard, "sloc", None), "framework_loc", None)
    filename, function = getattr(loc, "filename", None), getattr(loc, "name", "") or ""
    if filename is None and isinstance(loc, str):  # "file.py:123 in function"
        filename, _, function = loc.partition(" in ")
    if not filename:
        return "unknown"
    torch_dir = os.path.dirname(torch.__file__) + os.sep
    path = os.path.abspath(filename)
    if not path.startswith(torch_dir):
        return "model"
    rel = path[len(torch_dir):].replace(os.sep, "/")
    if rel == "_ops.py" or (rel == "_export/non_strict_utils.py" and function == "__torch_function__"):
        # a C++ kernel run on fake tensors to learn its output's shape: through the op overload, or called straight
        # from the non-strict export's function mode (a ``view(-1, ...)``'s C++ size inference and stride
        # computation guarded DaViT's window count, ``Wp // (Wp // 4) != 1``, refusing one-window maps torch runs)
        return "kernel-call"
    if re.search(r"contiguous|stride|non_overlapping|memory_format|channels_last|collapse_view|reshape_view|"
                 r"should_swap", function):  # strides, and whether a reshape can be a view (else a copy)
        return "layout"
    if _deciding_memory_format(path, getattr(loc, "lineno", None)):
        # a statement choosing the output's memory format (the fake conv's ``_conv_determine_backend_memory_format``
        # guarded ``ceil(H / 32) > 1`` on SegFormer's last stage, refusing a one-row map torch runs)
        return "layout"
    if rel == "_prims_common/__init__.py" and function == "__lt__":
        # the (size, stride) key ``_is_non_overlapping_and_dense_or_false`` sorts a tensor's dims by: a stride
        # comparison (SegFormer's ``reshape(b, c, -1).permute(0, 2, 1)`` of its reduced keys guarded ``w < h * w``
        # through it, so a one-row map was refused)
        return "layout"
    return "kernel" if rel.startswith(_KERNEL_CODE) else "model"


def _deciding_memory_format(path: str, lineno) -> bool:
    """Whether the statement at ``path:lineno`` (the guard's line and the two before it, where a call that spans
    lines starts) decides a memory format."""
    import linecache

    if not isinstance(lineno, int):
        return False
    text = "".join(linecache.getline(path, n) for n in range(max(lineno - 2, 1), lineno + 1))
    return "memory_format" in text


_SIZE_OPS = ("view", "reshape", "_unsafe_view", "expand", "repeat", "new_zeros", "new_ones", "new_empty",
             "new_full", "zeros", "ones", "empty", "full", "arange", "unflatten", "split_with_sizes", "randn", "rand")


def _graph_literals(ep) -> set:
    """Every int literal in the graph's call arguments (where a size fixed during capture could be baked in);
    with ``"sizes"`` added when some op takes a literal size list (a view or a new tensor of fixed shape)."""
    out: set = set()

    def walk(value):
        if isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        elif type(value) is int:
            out.add(value)

    for tensor in list(ep.state_dict.values()) + list(getattr(ep, "constants", {}).values()):
        if isinstance(tensor, torch.Tensor):
            out.update(("param", int(n)) for n in tensor.shape)
    for node in ep.graph.nodes:
        if node.op == "call_function":
            walk(list(node.args) + list(node.kwargs.values()))
            name = getattr(getattr(node.target, "_schema", None), "name", "").split("::")[-1]
            if name in _SIZE_OPS and any(isinstance(a, (list, tuple)) and any(type(v) is int and v > 1 for v in a)
                                         for a in node.args):
                out.add("sizes")
    return out


def _needed(origin, cmp, lhs, rhs, literals) -> bool:
    """Whether a guard constrains the port. Porter converts each ATen op whole, with kernels exact at any size
    the op accepts, so torch's reasoning inside an op (strides; a C++ kernel fixing a size while computing its
    own output's shape) does not bind it; size limits (``>=``) do, and so does a size fixed to a value that
    appears as a literal in the graph (it may have been baked into a view or an expand). An equality of two
    size expressions inside an op's shape rule is a requirement of the op (``cat`` of a skip and an upsampled
    map: ``ceil(H / 16) == 2 * ceil(H / 32)``): the port's op would fail on it too, deep inside the graph, so it
    is checked up front, where the error can name the input and the sizes that pass."""
    if origin in ("model", "unknown"):
        return True
    if origin == "layout":
        return False
    if cmp in ("lt", "le", "gt", "ge"):
        return True
    if origin == "kernel-call" and cmp == "ne":
        return False  # a C++ kernel's path choice (view or copy, broadcast or not): it pins no size to bake in
    if origin == "kernel-call" and "sizes" in literals:
        return True  # a C++ kernel fixed a size and the graph builds shapes from literals: it may be baked in
    if origin == "kernel" and cmp == "eq" and any(isinstance(a, dict) and "dim" in a and isinstance(b, int) and ("param", b) in literals
                                                  for a, b in ((lhs, rhs), (rhs, lhs))):
        return True  # an input dim a parameter's shape fixes (channels of a conv or norm weight)
    if origin == "kernel" and cmp == "eq" and not isinstance(lhs, int) and not isinstance(rhs, int):
        return True  # two sizes an op's shape rule needs equal (cat's other dims, a broadcast): torch fails too
    constants = [e for e in (lhs, rhs) if isinstance(e, int)]
    return any(c > 1 and c in literals for c in constants)


def _message(origin, cmp, lhs, rhs, literals=frozenset()) -> str:
    if origin == "kernel" and cmp == "eq" and not isinstance(lhs, int) and not isinstance(rhs, int):
        return _MESSAGES["kernel-equal"]
    if origin in ("kernel", "kernel-call") and cmp == "eq" and any(
            type(c) is int and c > 1 and ("param", c) in literals for c in (lhs, rhs)):
        return _MESSAGES["parameter"]  # SAM's absolute position embedding fixed its grid: (H // 16) == 64
    return _MESSAGES[origin]


def _needed_untranslated(origin, node, literals) -> bool:
    """``_needed`` for a guard outside the format, judged on its top comparison (== / != with a constant)."""
    if origin not in ("kernel", "kernel-call") or not (isinstance(node, ast.Compare) and len(node.ops) == 1
                                  and isinstance(node.ops[0], (ast.Eq, ast.NotEq))):
        return True
    if origin == "kernel-call" and isinstance(node.ops[0], ast.NotEq):
        return False  # as in _needed: an excluded value pins no size
    if origin == "kernel-call" and "sizes" in literals:
        return True
    constants = [c.value for c in (node.left, node.comparators[0])
                 if isinstance(c, ast.Constant) and type(c.value) is int]
    return any(c > 1 and c in literals for c in constants)


def _translate_guard(guard, origin, literals, sources, names, ranks, add, static, hints=None, where=""):
    dims, unknown = {}, []

    def name_of(match):
        kind, text = match.group(1), match.group(0)
        prefix_text = text.replace(".stride()", ".size()")
        if prefix_text not in sources:
            unknown.append(text)
            return "unknown"
        i, axis = sources[prefix_text]
        dims[f"d_{i}_{axis}"] = (i, axis)
        return f"{'d' if kind == 'size' else 'stride'}_{i}_{axis}"

    code = _SOURCE.sub(name_of, guard)
    readable = _SOURCE.sub(lambda m: _readable(m, sources, names), guard)
    if origin == "layout":
        _add_layout_specialisations(code, unknown, dims, ranks, readable, add)
        return
    if unknown:
        static["*"] = guard
        return
    try:
        tree = ast.parse(code, mode="eval")
        parsed = _Translator(dims, ranks, hints).checks(tree)
    except SyntaxError:
        static.update({key: readable + where for key in dims.values()})
        return
    except Untranslatable:
        if not _needed_untranslated(origin, tree.body, literals):
            return
        static.update({key: readable + where for key in dims.values()})
        return
    for lhs, cmp, rhs in parsed:
        if _needed(origin, cmp, lhs, rhs, literals):
            add(lhs, cmp, rhs, readable, _message(origin, cmp, lhs, rhs, literals) + where)


def _add_layout_specialisations(code, unknown, dims, ranks, readable, add):
    """Layout guards (strides, contiguity) do not bind a port, except one that pins a dim to a number: torch then
    replaces that size by the number everywhere after it, so the graph may be built with it (a ``view`` to
    ``[8, B * heads, 8]``); it is checked like any size the capture fixed."""
    if unknown:
        return
    try:
        parsed = _Translator(dims, ranks).checks(ast.parse(code, mode="eval"))
    except (SyntaxError, Untranslatable):
        return
    for lhs, cmp, rhs in parsed:
        pinned = any(isinstance(a, dict) and "dim" in a and type(b) is int for a, b in ((lhs, rhs), (rhs, lhs)))
        if cmp == "eq" and pinned:
            add(lhs, cmp, rhs, readable, _MESSAGES["layout"])


def _readable(match, sources, names):
    text = match.group(0).replace(".stride()", ".size()")
    if text not in sources:
        return match.group(0)
    i, axis = sources[text]
    return f"{names[i]}.{match.group(1)}({axis})"


_MESSAGES = {
    "layout": "torch fixed this size while working out a memory layout during capture, and built the graph with it",
    "model": "the model took a shape-dependent path during capture (a branch on a size, or a size-derived "
             "value) that is only right under it",
    "unknown": "torch.export recorded it as a condition of the captured program",
    "kernel": "torch fixed this size while capturing an op, and the graph may depend on it",
    "kernel-call": "torch fixed this size while capturing an op, and the graph may depend on it",
    "parameter": "torch fixed this size while capturing an op, to a size a parameter of the model has (a weight or "
                 "embedding built for one input size, such as an absolute position embedding added to the feature "
                 "map, where torch's own forward fails at other sizes too)",
    "kernel-equal": "an op's shape rule needs these sizes equal (e.g. the tensors a concatenation joins; torch's own "
                    "forward fails at this size too)",
}


def _hint(size):
    try:
        node = size.node
        return int(node.hint) if node.has_hint() else None
    except Exception:  # noqa: BLE001
        return None


def _range(ep, symbol):
    vr = (getattr(ep, "range_constraints", None) or {}).get(symbol)
    if vr is None:
        return None, None
    lo, hi = vr.lower, vr.upper
    lo = int(lo) if getattr(lo, "is_finite", True) and lo.is_integer else None
    hi = int(hi) if getattr(hi, "is_finite", True) and hi.is_integer and hi < 2**62 else None
    return lo, hi
