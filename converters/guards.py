"""Input checks: the shape conditions a port was built under, checked on every call. Never imports torch.

A capture specialises on its example: ``torch.export`` records guards on the input sizes (a branch taken on
``x.shape[-1] % 2``, ``2*(W//2) == W`` from a reshape), makes some dims static (channels, a size baked into a
view) and ranges others. The producer (``capture_guards.py``) writes every one of them into ``graph.json`` as
``input_checks``; :class:`InputChecks` evaluates them before any kernel runs, so a port never returns numbers at a
size it was not built for: it raises one ``ValueError`` naming the input, the dim, the condition and what to do.

Format (``graph["input_checks"]``, a list)::

    {"lhs": E, "cmp": "eq"|"ne"|"lt"|"le"|"gt"|"ge", "rhs": E, "guard": str, "message": str}

where an expression ``E`` is an int, ``{"dim": [input_index, axis]}`` (``axis``: the input's dim in torch's layout;
the array the port receives may be channels-last, the evaluator maps it through the input's ``perm``), or
``{"op": "add"|"sub"|"mul"|"floordiv"|"mod"|"max"|"min", "args": [E, E]}`` (nesting at most 32).
``graph["dynamic_dims"]`` lists the dims the port keeps symbolic: ``[{"input": i, "axis": torch dim}, ...]``.
"""

from __future__ import annotations

import itertools
import operator

from .safe_text import printable

CMPS = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt,
        "ge": operator.ge}
CMP_TEXT = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": operator.floordiv,
       "mod": operator.mod, "max": max, "min": min}
OP_TEXT = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "mod": "%"}
MAX_DEPTH = 32
_CACHE_SIZE = 64  # input shapes already checked (a model is usually called at a handful of sizes)
_SEARCH = 256  # how far a refusal looks for the nearest sizes that pass
# expression terms a refusal's search may evaluate in all: a graph.json may hold 4096 checks of ~60 terms each on
# one dim, and trying 512 sizes against every one of them took minutes of CPU per refused call (session 13)
_SEARCH_BUDGET = 1 << 18
_MAX_OFF_SEARCH = 8  # dims read by the broken checks: above this, the refusal does not look for the fewest off


def dims_of(expr) -> list:
    """Every ``[input, axis]`` an expression reads, in order, without repeats."""
    out: list = []

    def walk(e):
        if isinstance(e, dict):
            if "dim" in e:
                if list(e["dim"]) not in out:
                    out.append(list(e["dim"]))
            else:
                for a in e["args"]:
                    walk(a)

    walk(expr)
    return out


def to_text(expr, names) -> str:
    """``expr`` as Python-like text, dims spelled ``x.size(2)`` with the input names ``names``."""
    if isinstance(expr, bool) or not isinstance(expr, (int, dict)):
        raise ValueError(f"bad input-check expression {expr!r}")
    if isinstance(expr, int):
        return str(expr)
    if "dim" in expr:
        i, axis = expr["dim"]
        return f"{names[i]}.size({axis})"
    op, (a, b) = expr["op"], expr["args"]
    if op in ("max", "min"):
        return f"{op}({to_text(a, names)}, {to_text(b, names)})"
    return f"({to_text(a, names)} {OP_TEXT[op]} {to_text(b, names)})"


def expr_size(expr) -> int:
    """How many terms (ints, dims and ops) an expression holds: the cost of evaluating it once."""
    if isinstance(expr, dict) and "op" in expr:
        return 1 + sum(expr_size(a) for a in expr["args"])
    return 1


def compile_expr(expr, depth: int = 0):
    """A function ``sizes -> int`` (``sizes[i][axis]``: torch-layout sizes) for a JSON expression."""
    if depth > MAX_DEPTH:
        raise ValueError(f"input-check expression nested deeper than {MAX_DEPTH}")
    if isinstance(expr, bool) or not isinstance(expr, (int, dict)):
        raise ValueError(f"bad input-check expression {expr!r}: expected an int, a dim or an op")
    if isinstance(expr, int):
        return lambda sizes: expr
    if "dim" in expr:
        i, axis = (int(v) for v in expr["dim"])
        return lambda sizes: sizes[i][axis]
    op = expr.get("op")
    if op not in OPS or len(expr.get("args", ())) != 2:
        raise ValueError(f"bad input-check expression {expr!r}: op must be one of {sorted(OPS)} with 2 args")
    fn = OPS[op]
    a, b = (compile_expr(arg, depth + 1) for arg in expr["args"])
    return lambda sizes: fn(a(sizes), b(sizes))


_LONG_CONDITION = 300  # characters: a longer translated condition is shown as torch's guard text


class InputChecks:
    """The compiled ``input_checks`` of a runtime graph; ``check(inputs)`` raises on the first broken one."""

    def __init__(self, graph: dict):
        self.names = [spec["name"] for spec in graph["inputs"]]
        # torch dim d of input i sits at array axis perm.index(d)
        self.axes = [None if spec["perm"] is None else [list(spec["perm"]).index(d) for d in range(len(spec["perm"]))]
                     for spec in graph["inputs"]]
        # the example's torch-layout sizes (the capture's: sizes every check holds for), where the graph has them
        self.example = [_example_sizes(spec) for spec in graph["inputs"]]
        self.checks = []
        for entry in graph.get("input_checks", []) or []:
            cmp = entry["cmp"]
            if cmp not in CMPS:
                raise ValueError(f"bad input check {entry!r}: 'cmp' must be one of {sorted(CMPS)}")
            # the texts are only shown, in refusals: a stranger's terminal controls escaped (safe_text.py)
            entry = {**entry, "guard": printable(entry["guard"]), "message": printable(entry["message"])}
            self.checks.append((compile_expr(entry["lhs"]), CMPS[cmp], compile_expr(entry["rhs"]), entry))
        # per check: the dims it reads and its cost, computed once (a refusal's search asks for them per size tried)
        self._dims = [dims_of(e["lhs"]) + dims_of(e["rhs"]) for *_, e in self.checks]
        self._sizes = [expr_size(e["lhs"]) + expr_size(e["rhs"]) for *_, e in self.checks]
        self._passed: set = set()

    def repeat_scalar(self, x, size_expr, inputs, name: str):
        """A 0-d input repeated to the 1-d length ``size_expr`` (an int, or other inputs' torch-layout dims)
        gives: the port of a 1-d input that torch showed, at conversion, takes a 0-d value as that value repeated
        (``capture_scalars.py``)."""
        import mlx.core as mx

        sizes = [[tuple(x_.shape)[a] for a in axes] if axes is not None and len(getattr(x_, "shape", ())) == len(axes)
                 else [] for x_, axes in zip(inputs, self.axes)]
        try:
            n = compile_expr(size_expr)(sizes)
        except (IndexError, ZeroDivisionError):
            n = None
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"input {name!r} was given 0-d, and the other inputs' shapes {[list(s) for s in sizes]} "
                             f"give no length ({to_text(size_expr, self.names)}) to repeat it to")
        return mx.broadcast_to(mx.reshape(x, (1,)), (n,))

    def __len__(self) -> int:
        return len(self.checks)

    def check(self, inputs) -> None:
        """Raise ``ValueError`` unless every check holds for ``inputs`` (arrays in the port's layouts)."""
        if not self.checks:
            return
        shapes = tuple(tuple(x.shape) if axes is not None else () for x, axes in zip(inputs, self.axes))
        if shapes in self._passed:
            return
        self.check_sizes([[shape[a] for a in axes] if axes is not None else []
                          for shape, axes in zip(shapes, self.axes)])
        if len(self._passed) >= _CACHE_SIZE:
            self._passed.clear()
        self._passed.add(shapes)

    def refusal(self, torch_shapes):
        """The error message the port would raise for inputs of these torch-layout shapes, or None."""
        try:
            self.check_sizes([list(s) for s in torch_shapes])
        except ValueError as e:
            return str(e)
        return None

    def check_sizes(self, sizes) -> None:
        """Raise ``ValueError`` unless every check holds; ``sizes[i][d]``: torch dim ``d`` of input ``i``. The
        message names every dim that is off (:meth:`explain_all`), not only the first broken check's."""
        failed = []
        for lhs, cmp, rhs, entry in self.checks:
            try:
                ok = cmp(lhs(sizes), rhs(sizes))
            except ZeroDivisionError:
                ok = False
            except IndexError:
                raise ValueError(f"input check {entry['guard']!r} reads a dim the inputs do not have "
                                 f"(sizes {sizes})") from None
            if not ok:
                failed.append(entry)
        if failed:
            raise ValueError(self.explain_all(failed, sizes))

    def explain_all(self, failed, sizes) -> str:
        """The refusal for the broken checks ``failed``: one check on one dim as :meth:`explain`; otherwise the
        dims that are off (the fewest dims which, set to the example's sizes, make every broken check hold) and,
        for each, the nearest sizes the port accepts with the other off dims at the example's sizes."""
        dims = []
        for entry in failed:
            for d in dims_of(entry["lhs"]) + dims_of(entry["rhs"]):
                if d not in dims:
                    dims.append(d)
        if len(dims) <= 1:  # every broken check reads the one dim: its nearest passing sizes say it all
            return self.explain(failed[0], sizes)
        off = self._off_dims(dims, sizes)
        if off is None:
            return self.explain(failed[0], sizes)
        conditions = "; ".join(self._condition(entry) for entry in failed)
        messages = "; ".join(dict.fromkeys(entry["message"] for entry in failed))
        where = " and ".join(f"input {self.names[i]!r} (input {i}) has size {sizes[i][axis]} in dim {axis}"
                             for i, axis in off)
        accepted = " ".join(self._accepted_with(off, d, sizes) for d in off)
        count = "the condition" if len(failed) == 1 else "the conditions"
        return (
            f"{where} (torch layout), which breaks {count} {conditions} that this port was built under: "
            f"{messages}. {len(off)} dim{'s' if len(off) > 1 else ''} must change: {accepted} Running anyway could "
            f"give wrong numbers, so the port refuses. To run at these sizes, convert the model again with an "
            f"example input of this size (a separate port for sizes that break the condition)."
        )

    def _condition(self, entry) -> str:
        condition = f"{to_text(entry['lhs'], self.names)} {CMP_TEXT[entry['cmp']]} {to_text(entry['rhs'], self.names)}"
        if len(condition) > _LONG_CONDITION:
            return f"{entry['guard']} (torch's guard)"
        return condition

    def _off_dims(self, dims, sizes):
        """The fewest of ``dims`` which, set to the example's sizes, make every check on ``dims`` hold (the
        first such set in ``dims``' order), or None (no example sizes, too many dims, or none works)."""
        if len(dims) > _MAX_OFF_SEARCH or any(self.example[i] is None for i, _ in dims):
            return None
        if (1 << len(dims)) * sum(self._cost(d) for d in dims) > _SEARCH_BUDGET:  # a crafted graph's many checks
            return None
        for count in range(1, len(dims) + 1):
            for subset in itertools.combinations(dims, count):
                trial = [list(s) for s in sizes]
                for i, axis in subset:
                    trial[i][axis] = self.example[i][axis]
                if all(self._passes(trial, d) for d in dims):
                    return sorted(subset)
        return None

    def _accepted_with(self, off, dim, sizes) -> str:
        """Dim ``dim``'s nearest sizes, below and above, that pass every check reading it, the other ``off`` dims
        at the example's sizes."""
        i, axis = dim
        base = [list(s) for s in sizes]
        for j, other in off:
            if [j, other] != list(dim):
                base[j][other] = self.example[j][other]
        given = sizes[i][axis]
        search = self._search_length(dim)
        found = self._nearest(base, dim, search)
        label = f"dim {axis} of {self.names[i]!r}"
        if not found:
            return f"{label}: no size within {search} of {given} passes the checks on it (the example had " \
                   f"{self.example[i][axis]})."
        return f"{label}: {given} -> {' or '.join(map(str, found))} (nearest that pass; the example had " \
               f"{self.example[i][axis]})."

    def explain(self, entry, sizes) -> str:
        dims = dims_of(entry["lhs"]) + [d for d in dims_of(entry["rhs"]) if d not in dims_of(entry["lhs"])]
        where = " and ".join(
            f"input {self.names[i]!r} (input {i}) has size {sizes[i][axis]} in dim {axis} (torch layout)"
            for i, axis in dims
        ) or "the inputs"
        condition = f"{to_text(entry['lhs'], self.names)} {CMP_TEXT[entry['cmp']]} {to_text(entry['rhs'], self.names)}"
        guard = f" (torch's guard: {entry['guard']})" if entry["guard"].replace(" ", "") != condition.replace(" ", "") \
            else ""
        if guard and len(condition) > _LONG_CONDITION:  # an exact integer form of a float guard: torch's text reads
            condition, guard = entry["guard"], " (torch's guard, checked exactly in integers)"
        return (
            f"{where}, which breaks the condition {condition}{guard} that this port was built under: "
            f"{entry['message']}.{self._accepted(dims, sizes)} Running anyway could give wrong numbers, so the port "
            f"refuses. To run at this size, convert the model again with an example input of this size (a separate "
            f"port for sizes that break the condition)."
        )

    def _accepted(self, dims, sizes) -> str:
        """For a broken check on one dim: the nearest sizes of that dim, below and above, that pass every check
        reading it (the other dims as given), searched up to ``_SEARCH`` away, fewer when the checks reading it are
        so many or so long that the search would evaluate more than ``_SEARCH_BUDGET`` terms; '' when the check
        reads several."""
        if len(dims) != 1:
            return ""
        i, axis = dims[0]
        given = sizes[i][axis]
        search = self._search_length(dims[0])
        if search < 1:
            return ""
        found = self._nearest([list(s) for s in sizes], dims[0], search)
        if not found:
            return f" No size of dim {axis} within {search} of {given} passes the checks on it."
        return f" Nearest sizes of dim {axis} that pass the checks on it: {' and '.join(map(str, found))}."

    def _nearest(self, sizes, dim, search) -> list:
        """Dim ``dim``'s nearest sizes below and above its size in ``sizes`` (at most ``search`` away) that pass every
        check reading it, the other dims as in ``sizes`` (a copy the search writes into)."""
        i, axis = dim
        given, found = sizes[i][axis], []
        for step in (-1, 1):
            for distance in range(1, search + 1):
                size = given + step * distance
                if size < 1:
                    break
                sizes[i][axis] = size
                if self._passes(sizes, [i, axis]):
                    found.append(size)
                    break
        sizes[i][axis] = given
        return found

    def _cost(self, dim) -> int:
        """Expression terms evaluated to test every check that reads ``dim`` once."""
        return sum(n for n, d in zip(self._sizes, self._dims) if list(dim) in d)

    def _search_length(self, dim) -> int:
        """How far a refusal looks for ``dim``'s nearest passing sizes: ``_SEARCH``, fewer when the checks reading it
        are so many or so long that both directions would evaluate more than ``_SEARCH_BUDGET`` terms."""
        return min(_SEARCH, _SEARCH_BUDGET // (2 * max(self._cost(dim), 1)))

    def _passes(self, sizes, dim) -> bool:
        """Whether every check that reads ``dim`` holds (the others may fail for other dims)."""
        for (lhs, cmp, rhs, _), dims in zip(self.checks, self._dims):
            if dim not in dims:
                continue
            try:
                if not cmp(lhs(sizes), rhs(sizes)):
                    return False
            except (ZeroDivisionError, IndexError):
                return False
        return True

def _example_sizes(spec):
    """The example's torch-layout sizes of one graph input (``meta.hint``), or None when not recorded."""
    hint = (spec.get("meta") or {}).get("hint") if isinstance(spec.get("meta"), dict) else None
    if isinstance(hint, list) and all(isinstance(n, int) and not isinstance(n, bool) for n in hint):
        return list(hint)
    return None


def static_checks(names, shapes, message: str) -> list:
    """Checks pinning every dim of every tensor input to its example size (``shapes[i]``: None for a non-tensor)."""
    out = []
    for i, shape in enumerate(shapes):
        for axis, size in enumerate(shape or []):
            out.append({"lhs": {"dim": [i, axis]}, "cmp": "eq", "rhs": int(size),
                        "guard": f"{names[i]}.size({axis}) == {int(size)}", "message": message})
    return out
