"""How a port binds its call's arguments to its graph inputs, as the torch forward would. Never imports torch.

A capture records the torch forward's signature and, for each graph input, the argument it came from
(``capture_signature.py``), as ``graph["signature"]``::

    {"params": [{"name": "input_ids", "kind": "positional_or_keyword"},
                {"name": "attention_mask", "kind": "positional_or_keyword", "default": {"value": null}},
                {"name": "args", "kind": "var_positional"}, {"name": "kwargs", "kind": "var_keyword"}, ...],
     "inputs": [{"param": "input_ids"}, {"param": "args", "index": 0}, {"param": "kwargs", "key": "mask"}, ...],
     "constants": [{"param": "return_dict", "value": false}, ...]}

An input inside a tuple argument (transformers' legacy ``past_key_values``: a tuple of ``(key, value)`` per layer)
has a ``"path"``: its indices in the argument, ``{"param": "past_key_values", "path": [1, 0]}``; an argument's paths
form a whole tree (at every level the indices 0..n-1, no path a prefix of another), and a call must give that
argument as tuples/lists of exactly those lengths.

``kind`` is one of :data:`KINDS` (Python's parameter kinds), ``default`` is present when the forward has one:
``{"value": v}`` for a ``None``/bool/int/float/str default, ``"other"`` for any other (a tensor). ``inputs`` has one
entry per graph input, in order; ``constants`` are non-tensor example arguments the capture baked in.

Binding (:meth:`Binding.bind`) follows Python's rules (``inspect.Signature.bind``: an argument given twice, an unknown
keyword, a missing required one, too many positional ones are a ``TypeError`` naming it), then the capture's:

* an argument the port was captured with must be given (its forward default is not part of the port);
* an argument left out at conversion may only be left out, or given as its default (``attention_mask=None``): any
  other value would take a path the port does not hold, so it is a ``TypeError`` naming the argument;
* a baked-in constant must be given as that value, or left out where the forward's default is that value;
* ``*args``/``**kwargs`` take exactly the extra positional inputs / keys they were captured with.

Every name comes from a file: it is checked (:func:`compile_signature`: identifiers, not keywords, distinct, kinds
in Python's order) and only ever used as a key of the arguments dict, never looked up as an attribute. A graph
without ``signature`` (an older artifact, a program without one) takes its inputs positionally only.
"""

from __future__ import annotations

import inspect
import keyword

KINDS = {
    "positional_only": inspect.Parameter.POSITIONAL_ONLY,
    "positional_or_keyword": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "var_positional": inspect.Parameter.VAR_POSITIONAL,
    "keyword_only": inspect.Parameter.KEYWORD_ONLY,
    "var_keyword": inspect.Parameter.VAR_KEYWORD,
}
KIND_NAMES = {v: k for k, v in KINDS.items()}
MAX_PARAMS = 1024
MAX_NAME = 128
MAX_TEXT = 256  # a recorded str constant or default
MAX_PATH = 8  # nesting of a tuple argument's inputs


class _LeftOut:
    """The default the rebuilt signature gives every parameter that had one: "not given in this call"."""

    def __repr__(self) -> str:
        return "<left out>"


LEFT_OUT = _LeftOut()


def is_scalar(value) -> bool:
    """A value a signature may record (a default or a baked-in constant): ``None``, bool, int, float, short str."""
    if value is None or isinstance(value, (bool, int, float)):
        return True
    return isinstance(value, str) and len(value) <= MAX_TEXT


def same_value(a, b) -> bool:
    """``a`` is ``b`` as a recorded constant: same type and value (``True`` is not ``1``; NaN is NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


def check_name(name, what: str) -> str:
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) or len(name) > MAX_NAME:
        raise ValueError(f"{what} must be a Python identifier of at most {MAX_NAME} characters (not a keyword), "
                         f"but got {str(name)[:80]!r}")
    return name


class Binding:
    """The compiled ``graph["signature"]`` (or positional binding when ``record`` is ``None``).

    Attributes:
        num_inputs (int): graph inputs.
        signature (inspect.Signature or None): the forward's signature as the port takes it (every parameter that
            had a default shows :data:`LEFT_OUT`).
    """

    def __init__(self, record, num_inputs: int):
        self.num_inputs = num_inputs
        self.signature = None
        if record is None:
            return
        self.signature, self.params, self.inputs, self.constants, self.paths = compile_signature(record, num_inputs)
        # named parameter -> slot; *args -> [slots]; **kwargs -> {key: slot}. A slot is an input's index, or for a
        # tuple argument a tuple of slots (nested as the argument, its leaves the inputs' indices)
        slots = {}
        for i, (where, path) in enumerate(zip(self.inputs, self.paths)):
            slots.setdefault(where, {})[path] = i
        self.inputs_of, self.var_inputs = {}, {}
        for (param, where), leaves in slots.items():
            slot = _tree(leaves)
            if where is None:
                self.inputs_of[param] = slot
            else:  # *args by index (checked to be 0..n-1), **kwargs by key
                self.var_inputs.setdefault(param, {})[where] = slot
        for param, slots in self.var_inputs.items():
            if self.params[param]["kind"] == "var_positional":
                self.var_inputs[param] = [slots[k] for k in range(len(slots))]
        # the common call, every input positionally in the forward's order, binds without inspect (0.7 us, not 5):
        # the inputs are the leading positional parameters, nothing is baked in, and the rest have defaults
        positional = [n for n, p in self.params.items() if p["kind"] in ("positional_only", "positional_or_keyword")]
        self.fast = not self.constants and not any(self.paths) and \
            [(n, None) for n in positional[:num_inputs]] == self.inputs

    def names(self) -> list:
        """The argument each graph input binds to: ``"input_ids"``, ``"args[0]"``, ``"kwargs['mask']"``."""
        if self.signature is None:
            return [f"input {i}" for i in range(self.num_inputs)]
        return [_spelled(param, where) + "".join(f"[{k}]" for k in path)
                for (param, where), path in zip(self.inputs, self.paths)]

    def describe(self) -> str:
        """The call the port takes, in Python's notation: an input by its name, an argument left out at
        conversion with its default (``attention_mask=None``: that value or nothing), a baked-in constant as
        ``flag=True (fixed)``, e.g. ``(input_ids, attention_mask=None, token_type_ids)``."""
        if self.signature is None:
            return "(" + ", ".join(f"input{i}" for i in range(self.num_inputs)) + ", /)"
        parts, kinds = [], [p["kind"] for p in self.params.values()]
        last_positional_only = max((i for i, k in enumerate(kinds) if k == "positional_only"), default=-1)
        for i, (name, p) in enumerate(self.params.items()):
            kind = p["kind"]
            if kind == "keyword_only" and "var_positional" not in kinds and "*" not in parts:
                parts.append("*")
            if kind == "var_positional":
                parts.append(f"*{name}[{len(self.var_inputs.get(name, []))}]")
            elif kind == "var_keyword":
                keys = list(self.var_inputs.get(name, {})) + [k for (n, k) in self.constants if n == name]
                parts.append(f"**{name}{{{', '.join(keys)}}}")
            elif name in self.inputs_of:
                parts.append(name)
            elif (name, None) in self.constants:
                parts.append(f"{name}={self.constants[(name, None)]!r} (fixed)")
            else:
                default = p.get("default")
                parts.append(f"{name}={default['value']!r}" if isinstance(default, dict) else f"{name}=<default>")
            if i == last_positional_only:
                parts.append("/")
        return "(" + ", ".join(parts) + ")"

    def bind(self, args: tuple, kwargs: dict) -> list:
        """The graph inputs, in order, for a call ``port(*args, **kwargs)``; ``TypeError`` naming the argument."""
        if self.signature is None:
            if kwargs:
                raise TypeError(f"PortedModel got the keyword argument {next(iter(kwargs))!r}, but this port takes "
                                f"its {self.num_inputs} input(s) positionally (it records no forward signature: "
                                "converted from a program without one, or by an older Porter)")
            if len(args) != self.num_inputs:
                raise TypeError(f"PortedModel expects {self.num_inputs} input(s) but got {len(args)}")
            return list(args)
        if self.fast and not kwargs and len(args) == self.num_inputs and all(a is not None for a in args):
            return list(args)
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"PortedModel{self.describe()}: {e}") from None
        given = bound.arguments
        out = [None] * self.num_inputs
        for name, param in self.params.items():
            value = given.get(name, LEFT_OUT)
            if param["kind"] == "var_positional":
                self._bind_var_positional(name, () if value is LEFT_OUT else value, out)
            elif param["kind"] == "var_keyword":
                self._bind_var_keyword(name, {} if value is LEFT_OUT else value, out)
            elif name in self.inputs_of:
                if value is LEFT_OUT:
                    raise TypeError(f"PortedModel{self.describe()}: missing the argument {name!r}: the port was "
                                    "converted with it (its forward's default is not part of the port)")
                _fill(self.inputs_of[name], value, out, repr(name))
            else:
                self._check_constant_or_left_out(name, param, value)
        return out

    def split(self, values: list) -> tuple:
        """``(args, kwargs)`` that bind to ``values`` (the graph inputs, in order): the call a tool that builds
        inputs from ``graph["inputs"]`` (validation, benchmarks) makes. Inputs go positionally while they are the
        forward's leading parameters in order (``args`` is then a prefix of ``values``), the rest by keyword;
        constants are passed as baked in."""
        if self.signature is None:
            return list(values), {}
        if len(values) != self.num_inputs:
            raise TypeError(f"PortedModel has {self.num_inputs} input(s) but got {len(values)} values")
        positional = [(n, p) for n, p in self.params.items() if p["kind"] in ("positional_only",
                                                                               "positional_or_keyword")]

        def value_of(name, key=None):
            if key is None and name in self.inputs_of:
                return _gather(self.inputs_of[name], values)
            return self.constants.get((name, key), LEFT_OUT)

        if any(self.var_inputs.get(n) for n, p in self.params.items() if p["kind"] == "var_positional"):
            count = len(positional)  # extras for *args: every named positional parameter before them, by position
        else:
            count = 1 + max((i for i, (n, p) in enumerate(positional) if p["kind"] == "positional_only"
                             and value_of(n) is not LEFT_OUT), default=-1)
        args, kwargs, by_keyword, flat = [], {}, False, 0  # flat: the graph inputs args holds, in order
        for i, (name, p) in enumerate(positional):
            value = value_of(name)
            if i < count:
                if value is LEFT_OUT:
                    if not isinstance(p.get("default"), dict):
                        raise TypeError(f"the port's inputs cannot be passed as one call: {name!r} was left out at "
                                        "conversion, precedes positional inputs and has no recorded default")
                    value = p["default"]["value"]
                args.append(value)
                flat += len(_leaves(self.inputs_of[name])) if name in self.inputs_of else 1
            elif not by_keyword and name in self.inputs_of and \
                    _leaves(self.inputs_of[name]) == list(range(flat, flat + len(_leaves(self.inputs_of[name])))):
                args.append(value)  # positionally while the inputs run in the forward's order: args = a prefix
                flat += len(_leaves(self.inputs_of[name]))
            else:
                by_keyword = True
                if value is not LEFT_OUT:
                    kwargs[name] = value
        for name, p in self.params.items():
            if p["kind"] == "var_positional":
                args.extend(_gather(slot, values) for slot in self.var_inputs.get(name, []))
            elif p["kind"] == "keyword_only" and value_of(name) is not LEFT_OUT:
                kwargs[name] = value_of(name)
            elif p["kind"] == "var_keyword":
                kwargs.update({key: _gather(slot, values) for key, slot in self.var_inputs.get(name, {}).items()})
                kwargs.update({key: v for (n, key), v in self.constants.items() if n == name})
        return args, kwargs

    def keywords(self) -> dict:
        """``{input index: keyword}`` for the inputs :meth:`split` passes by keyword (the others go positionally,
        in order, before them). An input inside a tuple argument is spelled with its indices in it,
        ``"past_key_values[1][0]"`` (given as ``past_key_values=((k0, v0), (k1, v1))``)."""
        slots = [object() for _ in range(self.num_inputs)]
        try:
            _, kwargs = self.split(slots)
        except TypeError:  # a left-out positional-only parameter without a recorded default: no single call
            return {}
        index, found = {id(s): i for i, s in enumerate(slots)}, {}

        def visit(value, label):
            if id(value) in index:
                found[index[id(value)]] = label
            elif isinstance(value, tuple):  # a nested argument: split built it from the inputs' slots
                for k, item in enumerate(value):
                    visit(item, f"{label}[{k}]")

        for key, value in kwargs.items():
            visit(value, key)
        return dict(sorted(found.items()))

    # ------------------------------------------------------------------------------------------------ helpers
    def _check_constant_or_left_out(self, name, param, value, key=None):
        spelled = repr(name) if key is None else f"{key!r} (in **{name})"
        default = param.get("default")
        constant = self.constants.get((name, key), LEFT_OUT)
        if constant is not LEFT_OUT:
            if value is LEFT_OUT:
                if isinstance(default, dict) and same_value(default["value"], constant):
                    return
                raise TypeError(f"PortedModel{self.describe()}: missing the argument {spelled}: the port was "
                                f"converted with it as {constant!r}, which is not the forward's default")
            if not same_value(value, constant):
                raise TypeError(f"PortedModel: the argument {spelled} was converted as {constant!r} (baked into the "
                                f"port), but got {_short(value)}; convert again with that value to use it")
            return
        if value is LEFT_OUT:
            return
        if key is None and isinstance(default, dict) and same_value(value, default["value"]):
            return  # given as the default it was left out with (attention_mask=None)
        shown = f"the forward's default {default['value']!r}" if isinstance(default, dict) else "the forward's default"
        raise TypeError(f"PortedModel: the argument {spelled} was left out when the model was converted (it took "
                        f"{shown}), so the port cannot take {_short(value)} for it; convert with "
                        f"example_kwargs={{{(key or name)!r}: ...}} to make it an input")

    def _bind_var_positional(self, name, values, out):
        slots = self.var_inputs.get(name, [])
        if len(values) != len(slots):
            raise TypeError(f"PortedModel{self.describe()}: *{name} takes {len(slots)} positional input(s), as it "
                            f"was converted, but got {len(values)}")
        for index, (slot, value) in enumerate(zip(slots, values)):
            _fill(slot, value, out, f"{name}[{index}]")

    def _bind_var_keyword(self, name, values, out):
        slots = self.var_inputs.get(name, {})
        for key, value in values.items():
            if key in slots:
                _fill(slots[key], value, out, f"{key!r} (in **{name})")
            else:
                self._check_constant_or_left_out(name, self.params[name], value, key)
        for key in slots:
            if key not in values:
                raise TypeError(f"PortedModel{self.describe()}: missing the keyword argument {key!r} (in **{name}): "
                                "the port was converted with it")
        for (param, key), constant in self.constants.items():
            if param == name and key not in values:
                raise TypeError(f"PortedModel{self.describe()}: missing the keyword argument {key!r} (in **{name}): "
                                f"the port was converted with it as {constant!r}")


def _tree(leaves: dict):
    """The slot of one argument from ``{path: input index}`` (paths checked to form a whole tree): the index for
    ``{(): i}``, else a tuple of the children's slots."""
    if () in leaves:
        return leaves[()]
    children = {}
    for path, i in leaves.items():
        children.setdefault(path[0], {})[path[1:]] = i
    return tuple(_tree(children[k]) for k in range(len(children)))


def _leaves(slot) -> list:
    return [slot] if isinstance(slot, int) else [i for s in slot for i in _leaves(s)]


def _gather(slot, values):
    return values[slot] if isinstance(slot, int) else tuple(_gather(s, values) for s in slot)


def _fill(slot, value, out, label: str) -> None:
    """Put ``value``'s tensors into ``out`` at ``slot``'s indices; ``TypeError`` naming the argument (and the
    element) when ``value`` is None or not nested as the port was converted."""
    if isinstance(slot, int):
        if value is None:
            raise TypeError(f"PortedModel: the argument {label} was converted with a tensor, so it cannot be None "
                            "(the forward would take another path; convert without it for that)")
        if isinstance(value, (tuple, list)):
            raise TypeError(f"PortedModel: the argument {label} was converted with a tensor, but got a "
                            f"{type(value).__name__}")
        out[slot] = value
        return
    if not isinstance(value, (tuple, list)) or len(value) != len(slot):
        got = f"a {type(value).__name__} of {len(value)}" if isinstance(value, (tuple, list)) else _short(value)
        raise TypeError(f"PortedModel: the argument {label} was converted as a tuple of {len(slot)} (nested as "
                        f"{_nesting(slot)}), but got {got}")
    for k, (s, v) in enumerate(zip(slot, value)):
        _fill(s, v, out, f"{label}[{k}]")


def _nesting(slot) -> str:
    return "tensor" if isinstance(slot, int) else "(" + ", ".join(_nesting(s) for s in slot[:4]) + (
        ", ...)" if len(slot) > 4 else ")")


def _spelled(param, where) -> str:
    if where is None:
        return param
    return f"{param}[{where}]" if isinstance(where, int) else f"{param}[{where!r}]"


def _short(value) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None:
        return f"an array of shape {tuple(shape)}"
    text = repr(value)
    return text if len(text) <= 60 else f"a {type(value).__name__}"


def compile_signature(record, num_inputs: int):
    """Check a ``graph["signature"]`` record (hostile input) and compile it; ``ValueError`` saying what is wrong.

    Returns ``(inspect.Signature, {name: param record}, [(param, None | index | key)] per input,
    {(param, None | key): constant}, [path tuple] per input)`` (``()`` for an input that is a whole argument).
    """
    if not isinstance(record, dict) or not set(record) <= {"params", "inputs", "constants"}:
        raise ValueError("'signature' must be an object with 'params', 'inputs' and optionally 'constants'")
    params_in, inputs_in = record.get("params"), record.get("inputs")
    constants_in = record.get("constants", [])
    for field, value in (("params", params_in), ("inputs", inputs_in), ("constants", constants_in)):
        if not isinstance(value, list) or len(value) > MAX_PARAMS:
            raise ValueError(f"'signature.{field}' must be a list of at most {MAX_PARAMS} entries")
    params, parameters = {}, []
    for i, p in enumerate(params_in):
        if not isinstance(p, dict) or not set(p) <= {"name", "kind", "default"} or not {"name", "kind"} <= set(p):
            raise ValueError(f"'signature.params[{i}]' must be an object with 'name', 'kind' and optionally 'default'")
        name = check_name(p["name"], f"'signature.params[{i}].name'")
        if name in params:
            raise ValueError(f"'signature.params' names {name!r} twice")
        if not isinstance(p["kind"], str) or p["kind"] not in KINDS:  # a list or object is no kind (unhashable)
            raise ValueError(f"'signature.params[{i}].kind' must be one of {sorted(KINDS)}, but got "
                             f"{str(p['kind'])[:40]!r}")
        default = p.get("default")
        if "default" in p:
            if p["kind"] in ("var_positional", "var_keyword"):
                raise ValueError(f"'signature.params[{i}]' ({name!r}): *args/**kwargs have no default")
            if not (default == "other" or (isinstance(default, dict) and set(default) == {"value"}
                                           and is_scalar(default["value"]))):
                raise ValueError(f"'signature.params[{i}].default' must be \"other\" or {{\"value\": a None, bool, "
                                 "number or short string}")
        params[name] = p
        parameters.append(inspect.Parameter(name, KINDS[p["kind"]],
                                            default=LEFT_OUT if "default" in p else inspect.Parameter.empty))
    try:
        signature = inspect.Signature(parameters)
    except (TypeError, ValueError) as e:  # kinds out of Python's order, a required after a default, ...
        raise ValueError(f"'signature.params' do not form a Python signature: {e}") from None
    kwargs_names = {n for n, p in params.items() if p["kind"] in ("positional_or_keyword", "keyword_only")}

    def place(entry, field):
        if not isinstance(entry, dict) or "param" not in entry or \
                not set(entry) <= {"param", "index", "key", "value", "path"}:
            raise ValueError(f"'{field}' must be an object with 'param' and optionally 'index', 'key' or 'path'")
        name = entry["param"]
        if not isinstance(name, str) or name not in params:
            raise ValueError(f"'{field}.param' names {str(name)[:80]!r}, which 'signature.params' does not list")
        kind = params[name]["kind"]
        if kind == "var_positional":
            index = entry.get("index")
            if "key" in entry or isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < MAX_PARAMS:
                raise ValueError(f"'{field}': an input of *{name} needs an 'index' (0 <= index < {MAX_PARAMS})")
            return name, index
        if kind == "var_keyword":
            key = entry.get("key")
            if "index" in entry:
                raise ValueError(f"'{field}': an input of **{name} needs a 'key', not an 'index'")
            check_name(key, f"'{field}.key'")
            if key in kwargs_names:
                raise ValueError(f"'{field}.key' {key!r} is a named parameter: Python binds it there, not to **{name}")
            return name, key
        if "index" in entry or "key" in entry:
            raise ValueError(f"'{field}': 'index'/'key' belong to *args/**kwargs inputs only ({name!r} is {kind})")
        return name, None

    inputs, paths, seen, trees = [], [], set(), {}
    if len(inputs_in) != num_inputs:
        raise ValueError(f"'signature.inputs' lists {len(inputs_in)} entries for {num_inputs} graph input(s)")
    for i, entry in enumerate(inputs_in):
        if isinstance(entry, dict) and "value" in entry:
            raise ValueError(f"'signature.inputs[{i}]' has a 'value': constants belong in 'signature.constants'")
        where = place(entry, f"signature.inputs[{i}]")
        path = _check_path(entry.get("path", []), f"signature.inputs[{i}].path")
        if path in trees.setdefault(where, set()):  # a prefix of another path: _check_tree below
            raise ValueError(f"'signature.inputs[{i}]' binds {_spelled(*where)!r} a second time")
        trees[where].add(path)
        seen.add(where)
        inputs.append(where)
        paths.append(path)
    for where, leaves in trees.items():
        _check_tree(leaves, _spelled(*where))
    for name in params:  # *args inputs are 0..n-1, each once, so a call's extras map one to one
        indices = sorted(w for p, w in inputs if p == name and isinstance(w, int))
        if indices != list(range(len(indices))):
            raise ValueError(f"'signature.inputs' gives *{name} the indices {indices[:8]}, not 0..n-1")
    constants = {}
    for i, entry in enumerate(constants_in):
        if not isinstance(entry, dict) or "value" not in entry or not is_scalar(entry["value"]):
            raise ValueError(f"'signature.constants[{i}]' must have a 'value': None, a bool, a number or a short "
                             "string")
        where = place(entry, f"signature.constants[{i}]")
        if "path" in entry:
            raise ValueError(f"'signature.constants[{i}]': a value inside a tuple argument cannot be a constant")
        if isinstance(where[1], int):
            raise ValueError(f"'signature.constants[{i}]': a *args entry cannot be a baked-in constant")
        if where in seen:
            raise ValueError(f"'signature.constants[{i}]' binds {_spelled(*where)!r} a second time")
        seen.add(where)
        constants[where] = entry["value"]
    for name, p in params.items():
        if p["kind"] not in ("var_positional", "var_keyword") and "default" not in p and (name, None) not in seen:
            raise ValueError(f"'signature.params': the required argument {name!r} is neither a graph input nor a "
                             "constant")
    return signature, params, inputs, constants, paths


def _check_path(path, field: str) -> tuple:
    if not isinstance(path, list) or len(path) > MAX_PATH or any(
            isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < MAX_PARAMS for k in path):
        raise ValueError(f"'{field}' must be a list of at most {MAX_PATH} indices (0 <= index < {MAX_PARAMS})")
    return tuple(path)


def _check_tree(paths: set, name: str) -> None:
    """One argument's input paths form a whole tree: ``{()}`` (the argument is one tensor), or at every level the
    indices 0..n-1 with no path a prefix of another (so a call's tuple maps to the inputs one to one)."""
    if paths == {()}:
        return
    if () in paths:
        raise ValueError(f"'signature.inputs' binds {name!r} both whole and by 'path'")
    children = {}
    for path in paths:
        children.setdefault(path[0], set()).add(path[1:])
    if sorted(children) != list(range(len(children))):
        raise ValueError(f"'signature.inputs' gives {name!r} the indices {sorted(children)[:8]} at one level, "
                         "not 0..n-1")
    for k, rest in children.items():
        _check_tree(rest, f"{name}[{k}]")
