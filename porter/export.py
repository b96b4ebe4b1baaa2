"""``porter.export_function``: a ported model as an ``.mlxfn`` file that runs without Porter (C++, Swift, Python).

MLX's ``mx.export_function`` serializes a traced graph primitive by primitive; what Porter runs that MLX cannot
serialize (its native CPU kernels, custom-VJP wrappers, ``mx.contiguous``, host-side checks) is replaced by
pure-MLX ops with the same values while tracing (``porter.layers.export_mode``), and the report lists each
replacement. The file is written next to its destination under a temporary name, loaded back with
``mx.import_function`` and run on the example inputs; it replaces ``path`` only when its outputs match the model's.
With ``shapeless=True`` it is also run at a second input size (:mod:`porter._export_probe`) and refused, naming the
module and MLX op, when it fails or differs there. Never imports torch.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_map

from porter.converters.files import remove_quietly, umask

SUFFIX = ".mlxfn"


class ExportError(ValueError):
    """The model cannot be exported as asked; the message names the argument, module or MLX op and what to do."""


@dataclass
class ExportReport:
    """What :func:`export_function` wrote and replaced.

    Attributes:
        path (str): the ``.mlxfn`` file written.
        input_shapes (list of tuple): the example input shapes it was traced at (the model's call layout).
        traced_shapes (list of list of tuple): every input-shape set traced into the file (the example first,
            then ``more_examples``); a fixed-shape file runs at exactly these.
        output_names (list of str): the imported function's outputs, in order (``"0"``, or dict keys/positions).
        shapeless (bool): exported with ``shapeless=True``.
        replacements (dict): ``"what -> by what"`` -> count, every op replaced by a serializable one.
        max_abs_diff (float): largest difference between the file's outputs and the model's at the example.
        probe_shapes (list of tuple): shapeless only: the second size the file was checked at.
        notes (list of str): warnings the caller must read (e.g. input checks the file cannot carry).
    """

    path: str
    input_shapes: list
    output_names: list
    shapeless: bool
    replacements: dict
    max_abs_diff: float
    probe_shapes: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    traced_shapes: list = field(default_factory=list)
    input_names: list = field(default_factory=list)
    input_dtypes: list = field(default_factory=list)
    card_paths: list = field(default_factory=list)
    dynamic_axes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"path": self.path, "input_shapes": [list(s) for s in self.input_shapes],
                "input_names": list(self.input_names), "input_dtypes": list(self.input_dtypes),
                "card_paths": list(self.card_paths), "dynamic_axes": [list(a) for a in self.dynamic_axes],
                "output_names": list(self.output_names), "shapeless": self.shapeless,
                "replacements": dict(self.replacements), "max_abs_diff": self.max_abs_diff,
                "probe_shapes": [list(s) for s in self.probe_shapes], "notes": list(self.notes),
                "traced_shapes": [[list(s) for s in shapes] for shapes in self.traced_shapes]}

    def __str__(self) -> str:
        sets = self.traced_shapes or [self.input_shapes]
        shapes = "; ".join(", ".join(str(tuple(s)) for s in shapes) for shapes in sets)
        lines = [f"wrote {self.path} ({'shapeless' if self.shapeless else 'fixed shapes'}; traced at {shapes}; "
                 f"{len(self.output_names)} output(s); max |file - model| = {self.max_abs_diff:.3g})"]
        if self.input_names:
            lines.append("  inputs, positionally: " + ", ".join(
                f"{name} ({dtype})" for name, dtype in zip(self.input_names, self.input_dtypes)))
        if self.card_paths:
            lines.append("  described in " + " and ".join(self.card_paths))
        if self.probe_shapes:
            lines.append("  also checked at " + ", ".join(str(tuple(s)) for s in self.probe_shapes))
        if self.replacements:
            lines.append(f"  replaced for export ({sum(self.replacements.values())} op(s)):")
            lines += [f"    {count:>4} x {what}" for what, count in self.replacements.items()]
        else:
            lines.append("  nothing needed replacing")
        lines += [f"  note: {text}" for text in self.notes]
        return "\n".join(lines)


def flatten_outputs(out, prefix: str = "") -> list:
    """A model's output (an array, or tuples/lists/dicts of them) as ``[(name, array), ...]`` in order. A ``None``
    in the structure (a port's ``output_tree`` keeps torch's: a ``ModelOutput`` field left empty) is no output of
    the file: it is left out, and the names say where the others sit (``"n.0"``, not ``"n.1"``)."""
    if out is None and prefix:
        return []
    if isinstance(out, mx.array):
        return [(prefix or "0", out)]
    if isinstance(out, dict):
        items = out.items()
    elif isinstance(out, (list, tuple)):
        items = ((str(i), v) for i, v in enumerate(out))
    else:
        raise ExportError(f"[export_function] 'model' returned a {type(out).__name__}; an .mlxfn file holds arrays "
                          "only (an array, or tuples, lists and dicts of arrays).")
    flat = []
    for key, value in items:
        flat += flatten_outputs(value, f"{prefix}.{key}" if prefix else str(key))
    return flat


def example_arrays(example_inputs, what: str = "example_inputs", seed: int = 0) -> list:
    """``example_inputs`` as MLX arrays: each item an ``mx.array``, a numpy array, or a shape (a tuple of positive
    ints, read as seeded standard-normal float32 input of that shape in the model's call layout)."""
    if isinstance(example_inputs, (mx.array, np.ndarray)):
        example_inputs = [example_inputs]
    if not isinstance(example_inputs, (list, tuple)) or not example_inputs:
        raise ExportError(f"[export_function] '{what}' must be a non-empty list of arrays or shapes, got "
                          f"{type(example_inputs).__name__}")
    rng = np.random.default_rng(seed)
    arrays = []
    for i, item in enumerate(example_inputs):
        if isinstance(item, mx.array):
            arrays.append(item)
        elif isinstance(item, np.ndarray):
            arrays.append(mx.array(item, dtype=mx.float64) if item.dtype == np.float64 else mx.array(item))
        elif isinstance(item, (list, tuple)) and item and all(
                isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d > 0 for d in item):
            arrays.append(mx.array(rng.standard_normal(tuple(int(d) for d in item)).astype(np.float32)))
        else:
            raise ExportError(f"[export_function] '{what}[{i}]' must be an mx.array, a numpy array or a shape "
                              f"(a tuple of positive ints), got {str(item)[:80]!r}")
    return arrays


def dtype_name(dtype) -> str:
    """``mx.int64`` -> ``"int64"`` (``mx.bool_`` -> ``"bool"``)."""
    return str(dtype).rsplit(".", 1)[-1].rstrip("_")


def _check_path(path) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise ExportError(f"[export_function] 'path' must be a str or os.PathLike, got {type(path).__name__}")
    path = os.fspath(path)
    if not path.endswith(SUFFIX) or os.path.basename(path) == SUFFIX:
        raise ExportError(f"[export_function] 'path' must name a file ending in {SUFFIX} (MLX appends the suffix "
                          f"otherwise), got {path!r}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ExportError(f"[export_function] 'path': the folder {folder!r} does not exist")
    if os.path.isdir(path):
        raise ExportError(f"[export_function] 'path' {path!r} is a directory")
    return path


def _wide(a: mx.array) -> np.ndarray:
    """``a`` as float64 numpy (complex128 for complex; numpy has no bfloat16)."""
    a = np.asarray(a.astype(mx.float32) if a.dtype == mx.bfloat16 else a)
    return a.astype(np.complex128 if np.iscomplexobj(a) else np.float64)


def max_abs_diff(ours: list, reference: list, what: str) -> float:
    """Largest ``|ours - reference|`` over matching outputs; raises :class:`ExportError` on a count, shape or dtype
    mismatch."""
    if len(ours) != len(reference):
        raise ExportError(f"{what}: {len(ours)} output(s), the model gives {len(reference)}")
    worst = 0.0
    for i, (a, (name, b)) in enumerate(zip(ours, reference)):
        if tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
            raise ExportError(f"{what}: output {name!r} is {a.dtype}{tuple(a.shape)}, the model gives "
                              f"{b.dtype}{tuple(b.shape)}")
        if a.size:
            x, y = _wide(a), _wide(b)
            same = (x == y) | (np.isnan(x) & np.isnan(y))  # the same inf, or NaN where the model has NaN, is right
            with np.errstate(invalid="ignore"):  # inf - inf where both are inf: masked by `same`
                diff = np.where(same, 0.0, np.abs(x - y))
            worst = max(worst, float(np.max(np.nan_to_num(diff, nan=np.inf, posinf=np.inf))))
    return worst


# the spacing of 1.0 in the float dtypes coarser than float32's: a check between two computations of a half model
_HALF_EPS = {mx.float16: 2.0 ** -10, mx.bfloat16: 2.0 ** -7}


def default_tolerance(references: list) -> float:
    """The default ``rtol``/``atol`` of the file-against-model check: ``1e-4``, or 4 units of the last place of the
    coarsest half-precision float output in ``references`` (lists of ``(name, array)``) where that is more."""
    eps = max((_HALF_EPS.get(a.dtype, 0.0) for outputs in references for _, a in outputs), default=0.0)
    return max(1e-4, 4 * eps)


def within(diff: float, reference: list, rtol: float, atol: float) -> bool:
    scale = max((float(mx.max(mx.abs(b.astype(mx.float32)))) for _, b in reference
                 if b.size and mx.issubdtype(b.dtype, mx.floating)), default=0.0)
    return diff <= max(rtol * (scale if np.isfinite(scale) else 0.0), atol)


def _traced(model, names_out: list):
    def fn(*args):
        flat = flatten_outputs(model(*args))
        names_out[:] = [name for name, _ in flat]
        return tuple(a for _, a in flat)

    return fn


@contextmanager
def _nothing():
    yield


@contextmanager
def row_contiguous_parameters(model):
    """While the block runs, ``model``'s parameters are row-contiguous arrays (the originals come back after).

    MLX 0.32's ``export_function`` writes a constant's buffer as if it were row-contiguous: a parameter that is an
    evaluated view (``mx.array`` of a transposed numpy array keeps its strides, as does an evaluated ``w.T``) comes
    back from the file with its elements in the wrong places. ``mx.contiguous`` copies only those."""
    if not isinstance(model, nn.Module):
        yield
        return
    original = model.parameters()
    copies = tree_map(mx.contiguous, original)
    mx.eval(copies)
    model.update(copies)
    try:
        yield
    finally:
        model.update(original)


@contextmanager
def linear_without_addmm():
    """While the block runs, ``mlx.nn.Linear`` on a batched (> 2-d) input computes ``x @ W.T + b`` instead of
    ``mx.addmm``: MLX 0.32's addmm folds such an input to 2-d and back with reshapes to the traced sizes, which a
    shapeless file keeps (a second size then fails); the matmul and add give the same values and follow any size.
    Used for shapeless exports only (a ported model's Linear layers are ``porter.layers.Linear``, an
    ``mlx.nn.Linear`` with its own ``__call__``: both are patched)."""
    from porter.layers import Linear as PorterLinear
    from porter.layers import export_note as note

    classes = (nn.Linear, PorterLinear)  # Porter's Linear (converted models' layers) has its own __call__
    originals = {cls: cls.__dict__["__call__"] for cls in classes}

    def patched(original):
        def call(self, x):
            if "bias" in self and x.ndim > 2:
                note("mlx.nn.Linear's addmm (reshapes to the traced sizes) -> matmul + bias")
                return x @ self["weight"].T + self["bias"]
            return original(self, x)

        return call

    for cls in classes:
        cls.__call__ = patched(originals[cls])
    try:
        yield
    finally:
        for cls in classes:
            cls.__call__ = originals[cls]


def write_mlxfn(fn, path: str, input_sets: list, shapeless: bool) -> dict:
    """``fn`` traced at each list of inputs in ``input_sets`` into one file (``mx.exporter``; the imported function
    picks the trace matching its inputs' shapes), in export mode; the replacements made. MLX's refusals become
    :class:`ExportError` naming the primitive."""
    from porter.layers import export_mode

    try:
        with export_mode() as mode, (linear_without_addmm() if shapeless else _nothing()):
            if len(input_sets) == 1:
                mx.export_function(path, fn, *input_sets[0], shapeless=shapeless)
            else:
                with mx.exporter(path, fn, shapeless=shapeless) as exporter:
                    for inputs in input_sets:
                        exporter(*inputs)
    except ExportError:
        raise
    except (ValueError, RuntimeError) as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "Unable to serialize primitive" in text:
            raise ExportError(f"MLX cannot serialize an op this model runs ({text}) and Porter has no serializable "
                              "replacement for it: please report it, naming the model's layers.") from exc
        if "eval" in text and ("transformation" in text or "tracing" in text or "compile" in text):
            raise ExportError("The model reads an array's value on the host while running (a data-dependent "
                              f"shape, branch or check), which a traced .mlxfn function cannot do ({text}).") from exc
        raise ExportError(f"Exporting the model failed: {text}") from exc
    return mode.replacements


class PositionalCall:
    """A ported model called with its graph inputs positionally, in the graph's input order (``graph["inputs"]``,
    the order of ``graph.json``'s ``signature.inputs``): ``call(*values)`` runs ``model(*args, **kwargs)`` as
    ``model.split_inputs(values)`` spells the call, so a port converted with keyword inputs
    (``porter.convert(..., example_kwargs=...)``) takes them by position, as an ``.mlxfn`` file must. ``trace`` is
    wrapped the same way; every other attribute (``dynamic_dims``, ``input_layouts``, ``input_checks``,
    ``training``) is the model's."""

    def __init__(self, model):
        self.model = model

    def __call__(self, *values):
        args, kwargs = self.model.split_inputs(values)
        return self.model(*args, **kwargs)

    def trace(self, *values):
        args, kwargs = self.model.split_inputs(values)
        return self.model.trace(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.model, name)


def positional_call(model):
    """``model`` itself when it takes its inputs positionally in its input order (any callable that is not a
    ported model, a port whose inputs are its forward's leading positional arguments), else a
    :class:`PositionalCall` over it."""
    split, graph = getattr(model, "split_inputs", None), getattr(model, "graph", None)
    if split is None or not isinstance(graph, dict):
        return model
    slots = list(range(len(graph["inputs"])))
    args, kwargs = split(slots)
    return model if not kwargs and args == slots else PositionalCall(model)


def input_names(model, count: int) -> list:
    """The argument each positional input of the file binds to (``"input_ids"``, ``"token_type_ids"``,
    ``"args[0]"``): a ported model's ``input_arguments``; for a port without a recorded signature (TorchScript, an
    older artifact) its graph input's name where that is an identifier (``x``); else ``input0``, ``input1``, ..."""
    names = getattr(model, "input_arguments", None)
    graph = getattr(model, "graph", None)
    if isinstance(graph, dict) and graph.get("signature") is None and len(graph.get("inputs") or []) == count:
        names = [spec.get("name") if isinstance(spec, dict) and isinstance(spec.get("name"), str)
                 and spec["name"].isidentifier() else f"input{i}" for i, spec in enumerate(graph["inputs"])]
    if isinstance(names, list) and len(names) == count and all(isinstance(n, str) for n in names):
        return list(names)
    return [f"input{i}" for i in range(count)]


def export_function(model, path, example_inputs, *, shapeless: bool = False, probe_inputs=None,
                    more_examples=None, rtol=None, atol=None, card=None) -> ExportReport:
    """Write ``model`` as an ``.mlxfn`` file that ``mx.import_function`` runs without torch or Porter.

    Args:
        model (callable): a ported model (``porter.convert`` / ``porter.load``) or any function of MLX arrays
            returning an array or tuples/lists/dicts of arrays.
        path (str or os.PathLike): the file to write, ending in ``.mlxfn``; replaced atomically (nothing is left
            behind when the export fails).
        example_inputs (list): the inputs to trace at, in the model's call layout (channels-last images for a port
            with ``io_layout="mlx"``): ``mx.array``, numpy arrays, or shapes (tuples of ints: seeded random float32).
        shapeless (bool, optional): export with MLX's ``shapeless=True`` so other input sizes run; the file is then
            run at a second size (``probe_inputs``, or the example with its dynamic dims grown) and refused, naming
            the module and MLX op, if it fails or differs from the model there. Default: ``False``.
        probe_inputs (list, optional): shapeless only: the second-size inputs to check at (same forms as
            ``example_inputs``). Default: derived from the model's dynamic dims.
        more_examples (list of lists, optional): fixed shapes only: more input sets (e.g. other batch sizes) traced
            into the same file, each checked like the example; the file runs at exactly the traced sizes.
        rtol, atol (float, optional): the check ``max|file - model| <= max(rtol * max|model|, atol)``.
            Default: ``1e-4``, or 4 units of the last place of the model's lowest-precision float output where
            that is more (float16 ``3.9e-3``, bfloat16 ``3.1e-2``: a half port's pure-MLX replacements round
            differently from its native kernels).
        card (bool, optional): also write ``PATH.json`` (the inputs' order, argument names, shapes, dtypes,
            layouts and dynamic axes, the outputs' names) and ``PATH.md`` (a card with a usage snippet), next to
            the file (:mod:`porter.export_card`). Default: ``None``, for a ported model only.

    Returns:
        ExportReport: the path, shapes, outputs, every replacement made (``report.replacements``) and the check.

    The outputs are flattened in order (a dict's keys as names: ``report.output_names``); the function takes the
    inputs positionally, in the port's input order (``graph["inputs"]``): a port converted with keyword inputs
    (``example_kwargs``) takes them there by position too (``report.input_names``: ``["input_ids",
    "token_type_ids"]``), and ``example_inputs`` are given in that order. The model's per-call input checks cannot
    travel in the file: a fixed-shape file refuses
    other shapes itself; a shapeless one runs whatever it is given (``report.notes`` says so).

    Example:
        >>> report = porter.export_function(ported, "model.mlxfn", [(1, 224, 224, 3)])
        >>> fn = mx.import_function("model.mlxfn"); (y,) = fn(x)      # in any process, no Porter needed
    """
    if not callable(model):
        raise ExportError(f"[export_function] 'model' must be callable (a ported model), got {type(model).__name__}")
    if not isinstance(shapeless, bool):
        raise ExportError(f"[export_function] 'shapeless' must be a bool, got {shapeless!r}")
    if card is not None and not isinstance(card, bool):
        raise ExportError(f"[export_function] 'card' must be a bool or None, got {card!r}")
    if card is None:
        card = isinstance(getattr(model, "graph", None), dict) and hasattr(model, "input_arguments")
    call = positional_call(model)
    if probe_inputs is not None and not shapeless:
        raise ExportError("[export_function] 'probe_inputs' is only used with shapeless=True")
    if more_examples is not None and shapeless:
        raise ExportError("[export_function] 'more_examples' is for fixed-shape files: a shapeless one is checked "
                          "at a second size through 'probe_inputs'")
    if more_examples is not None and not isinstance(more_examples, (list, tuple)):
        raise ExportError(f"[export_function] 'more_examples' must be a list of input lists, got "
                          f"{type(more_examples).__name__}")
    path = _check_path(path)
    if card:
        from .export_card import card_paths

        for extra in card_paths(path):
            if os.path.isdir(extra):
                raise ExportError(f"[export_function] 'path': its card {extra!r} (written with the file; card=False "
                                  "for none) is a directory")
    input_sets = [example_arrays(example_inputs)]
    input_sets += [example_arrays(more, f"more_examples[{k}]", seed=k + 1)
                   for k, more in enumerate(more_examples or ())]
    inputs = input_sets[0]
    references = []
    for k, args in enumerate(input_sets):
        what = "example_inputs" if k == 0 else f"more_examples[{k - 1}]"
        if len(args) != len(inputs):
            raise ExportError(f"[export_function] '{what}' has {len(args)} input(s), 'example_inputs' {len(inputs)}")
        try:
            out = call(*args)
        except (ValueError, TypeError) as exc:
            raise ExportError(f"[export_function] '{what}' {[tuple(a.shape) for a in args]}: the model refuses "
                              f"them: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc
        references.append(flatten_outputs(out))
        mx.eval([a for _, a in references[-1]])
    reference = references[0]
    rtol, atol = (default_tolerance(references) if value is None else value for value in (rtol, atol))
    folder = os.path.dirname(os.path.abspath(path))
    try:
        handle, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.tmp-", suffix=SUFFIX, dir=folder)
        os.close(handle)
    except OSError as exc:
        raise ExportError(f"[export_function] 'path': cannot write in {folder!r} ({exc.strerror})") from exc
    staged: list = []
    try:
        names: list = []
        with row_contiguous_parameters(model):
            replacements = write_mlxfn(_traced(call, names), tmp, input_sets, shapeless)
        imported = mx.import_function(tmp)
        try:
            outputs = imported(*inputs)
            mx.eval(outputs)
        except Exception as exc:  # MLX's own refusal, e.g. "[Primitive::output_shapes] Pad cannot infer ..."
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if not shapeless:
                raise ExportError(f"The exported file fails to run ({text}): please report it.") from exc
            from ._export_probe import locate

            where = locate(call, inputs, inputs) or f"MLX: {text} "
            raise ExportError("A shapeless export of this model cannot run, even at the example's size. "
                              f"{where}Export with fixed shapes instead (without shapeless; one file per input "
                              "size).") from exc
        diffs = [max_abs_diff(outputs, reference, "the exported file")]
        diffs += [max_abs_diff(imported(*args), expected, f"at {[tuple(a.shape) for a in args]}, the exported file")
                  for args, expected in zip(input_sets[1:], references[1:])]
        diff = max(diffs)
        if not all(within(d, expected, rtol, atol) for d, expected in zip(diffs, references)):
            causes = ["dropout in training mode: call model.eval() first"] if getattr(model, "training", False) else []
            causes.append("fractional max pooling")
            raise ExportError(f"The exported file's outputs differ from the model's by up to {diff:.3g} (rtol={rtol}, "
                              f"atol={atol}). If the model draws random numbers on every call ({'; '.join(causes)}), "
                              "a file cannot reproduce them; otherwise a replacement made for export is wrong: please "
                              f"report it (replacements: {', '.join(replacements) or 'none'}).")
        report = ExportReport(path=path, input_shapes=[tuple(a.shape) for a in inputs], output_names=names,
                              shapeless=shapeless, replacements=replacements, max_abs_diff=diff,
                              traced_shapes=[[tuple(a.shape) for a in args] for args in input_sets],
                              input_names=input_names(model, len(inputs)),
                              input_dtypes=[dtype_name(a.dtype) for a in inputs])
        if shapeless:
            from ._export_probe import check_shapeless, dynamic_axes

            check_shapeless(call, imported, inputs, probe_inputs, report, rtol=rtol, atol=atol)
            report.dynamic_axes = [sorted(axes) for axes in dynamic_axes(call, inputs)]
        os.chmod(tmp, 0o666 & ~umask())  # mkstemp makes it 0600; a normal file is what users expect
        if card:
            from .export_card import card_paths, stage_card

            staged = stage_card(model, report)  # PATH.json and PATH.md under temporary names, renamed in below
            report.card_paths = list(card_paths(path))
        for staged_tmp, final in staged:
            os.replace(staged_tmp, final)
        os.replace(tmp, path)
    except BaseException:
        for staged_tmp, _ in staged:
            remove_quietly(staged_tmp)
        remove_quietly(tmp)
        raise
    return report
