"""The vocabulary of runtime-kernel argument specs: what a ``graph.json`` node may hold, declared next to the kernel.

Each kernel is registered with the specs of its inputs and attrs (``@kernel("pool", inputs=[TENSOR],
attrs={"fn": Enum("max_pool2d", ...), "kernel_size": Ints(1, 3, lo=1)})``); :mod:`converters.schema` checks every
node of a loaded artifact against them before any array is built. Which attrs are required and which inputs may be
left out comes from the kernel's signature (a keyword with a default may be absent); the spec says only what a
present value may be.

Vocabulary (small on purpose):

* ``Int(lo, hi)``, ``Float(lo=None, hi=None)`` (finite unless ``allow_inf``; an int is accepted; in ``[lo, hi]`` where
  given; ``PROBABILITY`` is ``Float(0, 1)``), ``Bool()``, ``Enum(*names)``,
  ``Str(max_len, chars)`` (free text limited to a character set, e.g. an einsum equation);
* ``Text(max_len)``: display-only text (module paths, messages), never resolved to anything;
* ``Seq(item, min_len, max_len)`` a list of ``item``; ``Ints(min_len, max_len, lo, hi)`` shorthand for a list of ints;
  ``Obj(fields, required)`` an object with known keys;
* ``Opt(spec)``: ``spec`` or ``null``; ``OneOf(*specs)``: the first that accepts;
* ``DTYPE``: a dtype name from :data:`DTYPES`;
* inputs only: ``Ref()`` a value computed earlier (``{"ref": name}``) or a weight (``{"param": name}``); ``TENSOR`` is
  ``Ref()``; ``SCALAR`` a ref or a number/bool literal; ``SIZES`` a ref or a list of ints/refs/nulls (a shape read at
  run time).
"""

from __future__ import annotations

import math

# dtype names an artifact may use, and what they are at run time (resolved by this table, never by getattr)
DTYPES = ("bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "float16", "bfloat16",
          "float32", "float64", "complex64")
INT_LIMIT = 1 << 62  # any int in an artifact: symbolic sizes, axes, strides; far beyond any real size
MAX_LEN = 64  # any list in a node (shapes, axes, paddings): MLX arrays have far fewer dims


class SpecError(ValueError):
    """A value does not match its spec; ``path`` is where inside the field (``[2]``, ``.kernel_size[1]``)."""

    def __init__(self, message: str, path: str = ""):
        super().__init__(message)
        self.message = message
        self.path = path


def kind_of(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "an object with keys " + ", ".join(repr(k)[:40] for k in list(value)[:5])
    return type(value).__name__


class Spec:
    """Base: ``check(value, on_ref)`` raises :class:`SpecError` or returns; ``on_ref(key, name)`` checks each
    reference (``key`` is "ref" or "param") and raises :class:`SpecError` for an unknown one."""

    def check(self, value, on_ref) -> None:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def fail(self, value, path=""):
        raise SpecError(f"expected {self.describe()} but got {kind_of(value)}", path)


class Int(Spec):
    def __init__(self, lo: int = -INT_LIMIT, hi: int = INT_LIMIT):
        self.lo, self.hi = lo, hi

    def check(self, value, on_ref):
        if isinstance(value, bool) or not isinstance(value, int) or not self.lo <= value <= self.hi:
            self.fail(value)

    def describe(self):
        return f"an int in [{self.lo}, {self.hi}]" if (self.lo, self.hi) != (-INT_LIMIT, INT_LIMIT) else "an int"


class Float(Spec):
    """A number (``lo <= value <= hi`` where given; ``lo < value`` with ``above=True``)."""

    def __init__(self, allow_inf: bool = False, allow_nan: bool = False, lo=None, hi=None, above: bool = False):
        self.allow_inf, self.allow_nan, self.lo, self.hi, self.above = allow_inf, allow_nan, lo, hi, above

    def check(self, value, on_ref):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(value)
        if isinstance(value, int):
            if abs(value) > INT_LIMIT:
                self.fail(value)
        elif (math.isnan(value) and not self.allow_nan) or (math.isinf(value) and not self.allow_inf):
            self.fail(value)
        if (self.lo is not None and not (value > self.lo if self.above else value >= self.lo)) or (
                self.hi is not None and not value <= self.hi):
            self.fail(value)

    def describe(self):
        kind = "a number" if self.allow_inf else "a finite number"
        if self.above and self.hi is None:
            return f"{kind} > {self.lo}"
        if self.lo is not None and self.hi is not None:
            return f"{kind} in [{self.lo}, {self.hi}]"
        if self.lo is not None or self.hi is not None:
            return f"{kind} {'>= ' + str(self.lo) if self.lo is not None else '<= ' + str(self.hi)}"
        return kind


class Bool(Spec):
    def check(self, value, on_ref):
        if not isinstance(value, bool):
            self.fail(value)

    def describe(self):
        return "true or false"


class Enum(Spec):
    def __init__(self, *names: str):
        self.names = tuple(names)

    def check(self, value, on_ref):
        if not isinstance(value, str) or value not in self.names:
            self.fail(value)

    def describe(self):
        shown = ", ".join(repr(n) for n in self.names[:12]) + (", ..." if len(self.names) > 12 else "")
        return f"one of {shown}"


class Str(Spec):
    def __init__(self, max_len: int, chars: str):
        self.max_len, self.chars = max_len, frozenset(chars)

    def check(self, value, on_ref):
        if not isinstance(value, str) or len(value) > self.max_len or not set(value) <= self.chars:
            self.fail(value)

    def describe(self):
        return f"a string of at most {self.max_len} characters from {''.join(sorted(self.chars))!r}"


class Text(Spec):
    """Display-only text (a module path, a message): any characters, bounded length; the runtime never resolves it."""

    def __init__(self, max_len: int):
        self.max_len = max_len

    def check(self, value, on_ref):
        if not isinstance(value, str) or len(value) > self.max_len:
            self.fail(value)

    def describe(self):
        return f"a string of at most {self.max_len} characters"


class Seq(Spec):
    def __init__(self, item: Spec, min_len: int = 0, max_len: int = MAX_LEN):
        self.item, self.min_len, self.max_len = item, min_len, max_len

    def check(self, value, on_ref):
        if not isinstance(value, list) or not self.min_len <= len(value) <= self.max_len:
            self.fail(value)
        for i, item in enumerate(value):
            try:
                self.item.check(item, on_ref)
            except SpecError as e:
                raise SpecError(e.message, f"[{i}]{e.path}") from None

    def describe(self):
        return f"a list of {self.min_len}-{self.max_len} items, each {self.item.describe()}"


class Opt(Spec):
    def __init__(self, spec: Spec):
        self.spec = spec

    def check(self, value, on_ref):
        if value is not None:
            self.spec.check(value, on_ref)

    def describe(self):
        return f"null or {self.spec.describe()}"


class OneOf(Spec):
    def __init__(self, *specs: Spec):
        self.specs = specs

    def check(self, value, on_ref):
        for spec in self.specs:
            try:
                spec.check(value, on_ref)
                return
            except SpecError:
                continue
        self.fail(value)

    def describe(self):
        return " or ".join(s.describe() for s in self.specs)


class Ref(Spec):
    """``{"ref": name}`` (a value computed earlier) or ``{"param": name}`` (a weight); ``on_ref`` checks the name."""

    def check(self, value, on_ref):
        if not isinstance(value, dict) or len(value) != 1:
            self.fail(value)
        ((key, name),) = value.items()
        if key not in ("ref", "param") or not isinstance(name, str):
            self.fail(value)
        on_ref(key, name)

    def describe(self):
        return 'a value reference {"ref": name} or {"param": name}'


class Obj(Spec):
    """A JSON object whose keys are among ``fields`` (each may be absent unless listed in ``required``)."""

    def __init__(self, fields: dict, required=()):
        self.fields, self.required = dict(fields), tuple(required)

    def check(self, value, on_ref):
        if not isinstance(value, dict):
            self.fail(value)
        for key in self.required:
            if key not in value:
                raise SpecError(f"the required key {key!r} is missing", "")
        for key, item in value.items():
            if key not in self.fields:
                raise SpecError(f"unexpected key {str(key)[:40]!r} (allowed: {', '.join(self.fields) or 'none'})")
            try:
                self.fields[key].check(item, on_ref)
            except SpecError as e:
                raise SpecError(e.message, f".{key}{e.path}") from None

    def describe(self):
        return "an object with keys among " + (", ".join(self.fields) or "none")


def Ints(min_len: int = 0, max_len: int = MAX_LEN, lo: int = -INT_LIMIT, hi: int = INT_LIMIT) -> Seq:
    return Seq(Int(lo, hi), min_len, max_len)


class Perm(Seq):
    """A permutation of ``0 .. len - 1`` (a layout, a transpose's axes): each axis exactly once."""

    def __init__(self):
        super().__init__(Int(0, MAX_LEN - 1), 0, MAX_LEN)

    def check(self, value, on_ref):
        super().check(value, on_ref)
        if sorted(value) != list(range(len(value))):
            raise SpecError(f"expected a permutation of 0..{len(value) - 1} but got {value}", "")

    def describe(self):
        return "a permutation of 0..n-1 (each axis once)"


DTYPE = Enum(*DTYPES)
TENSOR = Ref()
INT = Int()
SCALAR = OneOf(Ref(), Float(allow_inf=True, allow_nan=True), Bool())
PROBABILITY = Float(lo=0.0, hi=1.0)  # a drop rate: torch's dropouts refuse any other
INT_OR_REF = OneOf(Int(), Ref())
SIZES = OneOf(Ref(), Seq(Opt(OneOf(Int(), Ref()))))
AXIS = Int(-MAX_LEN, MAX_LEN)
AXES = Ints(0, MAX_LEN, -MAX_LEN, MAX_LEN)
PERM = Perm()
# conv/pool geometry: generous, but bounded so no layer precomputes a table of absurd length
GEOMETRY = 1 << 16


class KernelSpec:
    """What one kernel accepts: ``inputs`` (one spec per positional parameter), ``more`` (each extra positional
    input of a ``*args`` kernel), ``attrs`` (spec per keyword), ``check`` (cross-field rule: ``check(attrs)``
    raises :class:`SpecError`, e.g. which attrs a pool function takes)."""

    def __init__(self, inputs=(), attrs=None, more=None, check=None):
        self.inputs = list(inputs)
        self.attrs = dict(attrs or {})
        self.more = more
        self.check = check
