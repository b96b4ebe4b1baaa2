"""Example inputs for a torch model: from given shapes, from the file (``torch.export`` records them), or inferred
from the model's first weight; always checked by running the model on them once.

Shapes are torch's layout (``(N, C, H, W)``) and are refused before anything is allocated when they would not fit
in memory (:mod:`.budget`).
"""

import keyword
import re

from .budget import check_input_shapes
from .errors import CheckpointError, torch_error_line

# Input sizes used when no shape is given, by the rank of the first weight (conv1d/2d/3d; linear takes (1, in)).
GUESS_SPATIAL = {3: (128,), 4: (224, 224), 5: (16, 112, 112)}
GUESS_TOKENS = 32  # sequence length guessed for a model whose first weight is an embedding table

# dtypes an input may be given (``--input-shape 1,32:int64``); integer inputs are token ids / indices
INPUT_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "bool")


class InputShape(tuple):
    """A torch-layout input shape (a tuple of ints, usable wherever a shape is), its input's dtype name
    (``"float32"`` unless given: ``"1,32:int64"`` is a batch of 32 token ids) and the keyword it is given as
    (``None``: positional; ``"token_type_ids=1,32:int64"``)."""

    def __new__(cls, dims, dtype: str = "float32", name=None):
        shape = super().__new__(cls, dims)
        shape.dtype = dtype
        shape.name = name
        return shape


class ExampleInputs(tuple):
    """Example tensors in a port's input order: the positional ones, then the keyword ones in the order given
    (torch.export's flattening), with the keyword each is given as (``names``; ``None``: positional). ``args`` and
    ``kwargs`` are the call (``model(*ex.args, **ex.kwargs)``; ``porter.convert(model, ex.args,
    example_kwargs=ex.kwargs)``)."""

    def __new__(cls, tensors, names=None):
        names = list(names) if names is not None else [None] * len(tensors)
        pairs = [p for p in zip(tensors, names) if p[1] is None] + [p for p in zip(tensors, names) if p[1] is not None]
        self = super().__new__(cls, [t for t, _ in pairs])
        self.names = [n for _, n in pairs]
        return self

    @property
    def args(self) -> tuple:
        return tuple(t for t, n in zip(self, self.names) if n is None)

    @property
    def kwargs(self) -> dict:
        """The keyword arguments; inputs named with indices (``past[1][0]``) nested into tuples by them
        (``past=((t00, t01), (t10, t11))``; :func:`parse_input_shapes` checked each level is complete)."""
        out, trees = {}, {}
        for t, n in zip(self, self.names):
            if n is None:
                continue
            base, path = split_input_name(n)
            if not path:
                out[base] = t
                continue
            node = trees.setdefault(base, {})
            for k in path[:-1]:
                node = node.setdefault(k, {})
            node[path[-1]] = t
            out.setdefault(base, None)
        for base, tree in trees.items():
            out[base] = _as_tuples(tree)
        return out


_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)((?:\[[0-9]{1,4}\])*)")
MAX_NESTING = 8


def split_input_name(name: str) -> tuple:
    """``"past[1][0]"`` -> ``("past", (1, 0))``; ``"mask"`` -> ``("mask", ())``."""
    match = _NAME.fullmatch(name)
    return match.group(1), tuple(int(k) for k in re.findall(r"[0-9]+", match.group(2)))


def _as_tuples(tree):
    if not isinstance(tree, dict):
        return tree
    return tuple(_as_tuples(tree[k]) for k in range(len(tree)))


def _check_nesting(names, option: str) -> None:
    """The indexed names of each keyword form whole tuples: at every level the indices are 0..n-1, and no name is
    both a leaf and a tuple (``past`` with ``past[0]``, ``past[0]`` with ``past[0][1]``)."""
    groups = {}
    for name in names:
        base, path = split_input_name(name)
        groups.setdefault(base, []).append(path)
    for base, paths in groups.items():
        if len(paths) == 1 and paths[0] == ():
            continue
        spelled = lambda path: base + "".join(f"[{k}]" for k in path)  # noqa: E731
        for path in paths:
            for other in paths:
                if other != path and other[:len(path)] == path:
                    raise CheckpointError(f"{option} gives both {spelled(path)!r} and {spelled(other)!r}: an input is "
                                          "either one tensor or a tuple of them.", f"Give the tensors inside "
                                          f"{spelled(path)!r} each by its index, e.g. {spelled(path + (0,))}=1,12,7,64.")
        prefixes = {}
        for path in paths:
            for depth in range(len(path)):
                prefixes.setdefault(path[:depth], set()).add(path[depth])
        for prefix, indices in sorted(prefixes.items()):
            missing = [k for k in range(max(indices) + 1) if k not in indices]
            if missing:
                raise CheckpointError(f"{option} gives {spelled(prefix + (max(indices),))!r} but not "
                                      f"{spelled(prefix + (missing[0],))!r}: a tuple argument needs every index from 0.",
                                      f"Give {spelled(prefix + (missing[0],))}=SHAPE too (every element of the "
                                      f"tuple {base!r} is an input).")


def parse_input_shapes(values, option: str = "--input-shape") -> list:
    """Input shapes, one per model input, as int tuples.

    Args:
        values (iterable): each a tuple of ints or text ``"1,3,224,224"`` (``--input-shape``, repeatable).
        option (str, optional): where they came from, named in errors. Default: ``"--input-shape"``.
    Raises:
        CheckpointError: a shape that is not positive integers, or inputs that would not fit in memory.
    """
    shapes, names = [], set()
    for value in values or ():
        dtype, name = getattr(value, "dtype", "float32"), getattr(value, "name", None)
        if isinstance(value, (tuple, list)):
            shape = tuple(value) if all(isinstance(d, int) and not isinstance(d, bool) for d in value) else ()
        else:
            text = str(value)
            if "=" in text:  # a keyword input: name=1,32:int64
                name, _, text = text.partition("=")
                name = name.strip()
                match = _NAME.fullmatch(name) if len(name) <= 160 else None
                base = match.group(1) if match else ""
                if (match is None or not base.isidentifier() or keyword.iskeyword(base) or len(base) > 128
                        or name.count("[") > MAX_NESTING):
                    raise CheckpointError(f"{option} '{str(value)[:200]}' names the input {name[:80]!r}, which is "
                                          "not a Python identifier, optionally with up to "
                                          f"{MAX_NESTING} indices into a tuple argument.",
                                          "Use the forward's parameter name, e.g. --input-shape "
                                          "token_type_ids=1,32:int64, or past_key_values[0][1]=1,12,7,64 for the "
                                          "second tensor of the first element of a tuple argument.")
                if name in names:
                    raise CheckpointError(f"{option} gives the input {name!r} twice.", "Give each keyword input once.")
                names.add(name)
            dims, _, dtype = text.partition(":")
            dtype = dtype.strip() or "float32"
            if dtype not in INPUT_DTYPES:
                raise CheckpointError(f"{option} '{text[:200]}' names the dtype {dtype[:40]!r}, which Porter does "
                                      "not make inputs of.", f"Use one of {', '.join(INPUT_DTYPES)} after the "
                                      "shape, e.g. --input-shape 1,32:int64 for token ids.")
            try:
                shape = tuple(int(part) for part in dims.split(",")) if len(text) <= 200 else ()
            except ValueError:
                shape = ()
        if not shape or any(d <= 0 for d in shape):
            raise CheckpointError(f"{option} '{_text(value)}' is not a list of positive integers.",
                                  "Give the torch-layout shape of one input, e.g. --input-shape 1,3,224,224 (repeat "
                                  "the option for a model with several inputs; 1,32:int64 for token ids).")
        shapes.append(InputShape(shape, dtype, name))
    _check_nesting([n for n in names], option)
    check_input_shapes(shapes, option)
    return shapes


def _text(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)


def infer_input_shape(module, source: str = "the model"):
    """A batch-of-one input shape for ``module`` (torch layout), from its first parameter, and that parameter's name.

    A conv weight of rank 3/4/5 gives ``(1, C_in) + GUESS_SPATIAL[rank]`` (e.g. ``(1, 3, 224, 224)``); a linear
    weight ``(1, in_features)``; an ``nn.Embedding`` table ``(1, GUESS_TOKENS)`` token ids (dtype ``int64``).
    ``source`` names the model in the error.

    Raises:
        CheckpointError: the first parameter is of neither kind (or there is none): give the shape instead.
    """
    import torch

    for name, param in module.named_parameters():
        owner = _owner(module, name)
        if isinstance(owner, (torch.nn.Embedding, torch.nn.EmbeddingBag)):
            return InputShape((1, GUESS_TOKENS), "int64"), name
        if param.dim() in GUESS_SPATIAL:
            return InputShape((1, param.shape[1]) + GUESS_SPATIAL[param.dim()]), name
        if param.dim() == 2:
            return InputShape((1, param.shape[1])), name
        break
    raise CheckpointError(f"Porter cannot guess the input shape of the model in '{source}'.",
                          "Pass it with --input-shape, e.g. --input-shape 1,3,224,224 (torch layout; repeat the "
                          "option for several inputs).")


def _owner(module, name: str):
    try:
        return module.get_submodule(name.rpartition(".")[0])
    except Exception:  # noqa: BLE001 - a ScriptModule has no get_submodule (RuntimeError), a bad path AttributeError
        return None


def _index_bound(module) -> int:
    """Integer inputs are drawn from ``[0, bound)``: the smallest embedding table's size (token ids valid for every
    table), else 2 (0/1: valid indices for any non-empty dim)."""
    import torch

    sizes = [m.num_embeddings for m in module.modules() if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag))]
    return max(1, min(sizes)) if sizes else 2


def _random_input(shape, generator, bound: int):
    import torch

    dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
             "int64": torch.int64, "int32": torch.int32, "bool": torch.bool}[getattr(shape, "dtype", "float32")]
    if dtype == torch.bool:
        return torch.randint(0, 2, tuple(shape), generator=generator).bool()
    if not dtype.is_floating_point:
        return torch.randint(0, bound, tuple(shape), generator=generator).to(dtype)
    return torch.randn(tuple(shape), generator=generator).to(dtype)


def example_inputs(module, shapes, recorded=None, *, seed: int = 0, source: str = "the model",
                   shapes_from: str = "from --input-shape"):
    """Inputs ``module`` was checked to accept, and a note when the shape was inferred.

    Seeded inputs of ``shapes`` when given (``randn`` floats; integer inputs drawn from ``[0, smallest embedding
    table)``, else 0/1), else the ``recorded`` inputs, else one input of
    :func:`infer_input_shape`. ``shapes_from`` says where ``shapes`` came from, in errors.

    Returns:
        (ExampleInputs, str or None): the inputs (a tuple in the port's input order; ``.args``/``.kwargs``: the call,
        shapes named ``name=...`` given by keyword) and a note for the user (set when the shape was guessed).
    Raises:
        CheckpointError: the model raises on the inputs; the message quotes torch's error and the shapes tried.
    """
    import torch

    guessed_from = note = None
    if shapes:
        generator, bound = torch.Generator().manual_seed(seed), _index_bound(module)
        inputs = ExampleInputs([_random_input(shape, generator, bound) for shape in shapes],
                               [getattr(shape, "name", None) for shape in shapes])
    elif recorded:
        inputs = recorded if isinstance(recorded, ExampleInputs) else ExampleInputs(recorded)
    else:
        shape, guessed_from = infer_input_shape(module, source)
        inputs = ExampleInputs([_random_input(shape, torch.Generator().manual_seed(seed), _index_bound(module))])
        kind = f" of {shape.dtype} token ids" if getattr(shape, "dtype", "float32") != "float32" else ""
        note = f"input shape {_fmt(shape)}{kind} guessed from '{guessed_from}'; set it with --input-shape"
    try:
        with torch.no_grad():
            module(*inputs.args, **inputs.kwargs)
    except Exception as exc:
        given = ", ".join(_fmt(t.shape) for t in inputs)
        origin = (f"guessed from the first weight '{guessed_from}'" if guessed_from else
                  "recorded in the file" if not shapes else shapes_from)
        raise CheckpointError(f"The model in '{source}' cannot take input of shape {given} ({origin}): torch "
                              f"raised {torch_error_line(exc)}.",
                              "Pass the torch-layout shape the model expects with --input-shape, e.g. --input-shape "
                              "1,3,224,224 (repeat it for several inputs; 1,32:int64 for token ids).")
    return inputs, note


def _fmt(shape) -> str:
    return "(" + ",".join(str(int(d)) for d in shape) + ")"
