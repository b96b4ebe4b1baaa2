"""Frontend 1: capture with ``torch.export`` (imports torch; used only for conversion).

Why torch.export rather than torch.fx symbolic tracing: export runs the real forward (data-dependent Python such as
``x.shape``-driven reshapes and ``if self.training`` is resolved by the actual values), returns ATen ops that are not
decomposed (``aten.conv2d``, ``aten.max_pool2d``, ``aten.linear``, ``aten.flatten``), records for every node the
module it ran in (``nn_module_stack``, hence torch ``state_dict`` names and per-module reports), maps placeholders to
state_dict names through its graph signature, and supports dynamic shapes (``Dim.AUTO``), so sizes stay symbolic
and the converted model is not specialised to the example's batch or spatial size. fx tracing gives module calls
and torch functions whose shapes are not known and cannot trace shape-dependent code.
"""

from __future__ import annotations

import numpy as np
import torch

from . import capture_fold
from .capture_fold import ConstantStore
from .capture_fold_export import ExportFolder, constant_inputs
from .capture_guards import input_checks
from .capture_regions import Inliner
from .errors import CaptureError
from .ir import Graph, Node, Ref, ValueMeta, iter_refs
from . import output_tree


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _static_or_symbol(size):
    """An int for a static size (including a SymInt export specialised), else the symbol's expression."""
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    return int(size) if isinstance(size, int) or is_concrete_int(size) else str(size)


def _number(value):
    """An int, or a symbolic int's value at the example (None when it has none)."""
    return int(value) if isinstance(value, int) else _hint(value)


def _hint(size):
    node = getattr(size, "node", None)
    try:
        return int(node.hint) if node is not None and node.has_hint() else None
    except Exception:  # noqa: BLE001  (no example value for this size)
        return None


def storage_order(val: torch.Tensor):
    """The dims of ``val`` (a FakeTensor of the capture, or a real tensor), outermost first, in which its storage
    starts with exactly its elements: storage offset 0 and the strides dense in that order (``val.permute(order)``
    contiguous), proven for every size the capture allows (symbolic sizes compared without adding guards; the order
    itself read from the example's strides); and the storage no larger than the elements, proven or, where the
    solver cannot (``s//(s//4)`` forms of a ``view``), at the example. At another size a larger storage could only
    matter to a read past the elements, which the ``as_strided`` kernel refuses at run time. None when not shown:
    a slice, an expand, a view at an offset or of a larger storage; their flattened values are not their storage."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    try:
        if val.layout != torch.strided or val.is_quantized:
            return None
        if not statically_known_true(val.storage_offset() == 0):
            return None
        strides = list(val.stride())
        hints = [_number(st) for st in strides]
        if None in hints:
            return None
        order = sorted(range(val.dim()), key=lambda d: -hints[d])  # stable: ties keep torch's dim order
        expected = 1  # the dense stride of the next dim out; built from the strides once proven equal, since the
        for d in reversed(order):  # solver proves more of those forms than of products of sizes
            size = val.shape[d]
            if statically_known_true(size == 1):
                continue
            if not statically_known_true(strides[d] == expected):
                return None
            expected = strides[d] * size
        nbytes, needed = val.untyped_storage().nbytes(), expected * val.element_size()
        at_example = _number(needed)
        if not (statically_known_true(nbytes == needed) or (at_example is not None and _number(nbytes) == at_example)):
            return None  # a view of a larger storage at the example
        return order
    except (RuntimeError, NotImplementedError):  # a tensor without storage (sparse, functional wrappers)
        return None


def value_meta(val, order: bool = True) -> ValueMeta:
    """ValueMeta of an example value (FakeTensor, SymInt, list...); ``order=False`` leaves ``storage_order`` out
    (None: a value no ``as_strided`` reads, see :func:`_order_read`)."""
    if isinstance(val, torch.Tensor):
        shape = [_static_or_symbol(s) for s in val.shape]
        hint = [int(s) if isinstance(s, int) else _hint(s) for s in val.shape]
        return ValueMeta("tensor", shape, _dtype_name(val.dtype), hint=hint,
                         storage_order=storage_order(val) if order else None)
    if isinstance(val, bool):
        return ValueMeta("bool")
    if isinstance(val, (int, torch.SymInt)):
        return ValueMeta("int")
    if isinstance(val, (float, torch.SymFloat)):
        return ValueMeta("float")
    if isinstance(val, (list, tuple)):
        return ValueMeta("list", items=[value_meta(v, order) for v in val])
    if val is None:
        return ValueMeta("none")
    return ValueMeta("other")


def literal(value, resolve):
    """An argument value as a torch-free literal; graph nodes become :class:`Ref` via ``resolve``."""
    if isinstance(value, torch.fx.Node):
        return resolve(value)
    if isinstance(value, (list, tuple)):
        return [literal(v, resolve) for v in value]
    if isinstance(value, torch.dtype):
        return _dtype_name(value)
    if isinstance(value, (torch.device, torch.memory_format, torch.layout)):
        return str(value)
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    raise NotImplementedError(f"cannot capture argument value {value!r} of type {type(value).__name__}")


def op_name(target) -> str:
    if isinstance(target, torch._ops.OpOverload):
        namespace = target.namespace
        return f"{namespace}.{target._schema.name.split('::')[-1]}.{target._overloadname}"
    if getattr(target, "__module__", None) in ("_operator", "operator"):
        return f"operator.{target.__name__}"
    name = getattr(target, "__name__", str(target))
    module = getattr(target, "__module__", "") or ""
    return f"{module}.{name}" if module else name


def normalise_args(target, args, kwargs, resolve):
    """Arguments by schema name with defaults filled in; returns (args dict, explicit names)."""
    if isinstance(target, torch._ops.OpOverload):
        out, explicit = {}, []
        for i, a in enumerate(target._schema.arguments):
            if i < len(args) and not a.kwarg_only:
                out[a.name] = literal(args[i], resolve)
                explicit.append(a.name)
            elif a.name in kwargs:
                out[a.name] = literal(kwargs[a.name], resolve)
                explicit.append(a.name)
            elif a.has_default_value():
                out[a.name] = literal(a.default_value, resolve)
            else:
                raise NotImplementedError(f"{op_name(target)}: required argument {a.name!r} missing")
        return out, explicit
    if kwargs:
        raise NotImplementedError(f"{op_name(target)}: keyword arguments are not supported")
    names = ["a", "b", "c", "d"][: len(args)]
    return {n: literal(v, resolve) for n, v in zip(names, args)}, names


def _scopes(meta) -> list:
    stack = meta.get("nn_module_stack") or {}
    scopes = []
    for key, (path, type_) in stack.items():
        if key.startswith("_empty_nn_module_stack"):
            continue
        type_name = type_.__name__ if isinstance(type_, type) else str(type_).rsplit(".", 1)[-1]
        scopes.append((key, _clean_path(path), type_name))
    return scopes


def _clean_path(path: str) -> str:
    # export spells some paths as L['self'].layer1[0]; normalise to state_dict style "layer1.0"
    path = path.replace("L['self'].", "").replace("L['self']", "")
    path = path.replace("[", ".").replace("]", "").replace("'", "")
    return path.strip(".")


def _in_place(base: str) -> bool:
    """``relu_``, ``__iand__`` update their first argument; ``__and__`` (``x & y``) does not."""
    if base.startswith("__") and base.endswith("__"):
        return base.startswith("__i")
    return base.endswith("_")


def _make_node(fx_node, name: str, resolve) -> Node:
    """The IR node of one exported call, named ``name``."""
    args, explicit = normalise_args(fx_node.target, fx_node.args, fx_node.kwargs, resolve)
    scopes = _scopes(fx_node.meta)
    module, module_type = (scopes[-1][1], scopes[-1][2]) if scopes else ("", "")
    return Node(name, op_name(fx_node.target), args, explicit, value_meta(fx_node.meta.get("val"), _order_read(fx_node)),
                module, module_type, scopes)


def _order_read(fx_node) -> bool:
    """Whether a value's ``storage_order`` may be read: an ``as_strided`` call uses it, or a user that is not an
    ATen op (a region call, a ``getitem`` of a multi-output op) may pass it on to one. Proving the order costs
    sympy work on every symbolic stride: 3% of a capture with every dim dynamic (DaViT's window views), for the few
    values an ``as_strided`` reads."""
    for user in fx_node.users:
        target = user.target
        if not isinstance(target, torch._ops.OpOverload) or target.name().startswith("aten::as_strided"):
            return True
    return False


def host_view(t: "torch.Tensor"):
    """A read-only numpy view of a CPU tensor's memory, no copy (bfloat16 as its bits, ``uint16``).

    ``convert_graph`` makes the port's one MLX copy of each weight from it, a tensor at a time, so conversion does
    not hold a second copy of the model's weights; read-only, so nothing in the conversion can write into the
    torch model through it."""
    if t.dtype == torch.bfloat16:
        view = t.view(torch.int16).numpy().view(np.uint16)
    else:
        view = t.numpy()
    view.flags.writeable = False
    return view


def _identity(t) -> tuple:
    """What makes two state_dict entries one tensor: same memory, shape, strides and dtype."""
    return (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)


def leaf_locations(ep) -> "tuple | None":
    """Where each flat user input of ``ep`` came from, ``("arg", i)`` or ``("kw", key)``, followed by its index path
    inside a tuple/list argument (``("kw", "past_key_values", (1, 0))``: layer 1's key), and the keyword inputs
    given as ``None`` (no leaf in torch's flattening); None when an input nests otherwise (a dict of tensors, a
    ``None`` inside a tuple)."""
    spec = getattr(getattr(ep, "call_spec", None), "in_spec", None)
    if spec is None:
        return None
    try:
        args, kwargs = torch.utils._pytree.tree_unflatten(list(range(spec.num_leaves)), spec)
    except (TypeError, ValueError):
        return None
    if not isinstance(args, tuple) or not isinstance(kwargs, dict):
        return None
    locations, nones = [None] * spec.num_leaves, []

    def place(leaf, location, path) -> bool:
        if isinstance(leaf, int) and not isinstance(leaf, bool):
            locations[leaf] = location + ((path,) if path else ())
            return True
        if isinstance(leaf, (tuple, list)) and leaf:
            return all(place(x, location, path + (i,)) for i, x in enumerate(leaf))
        return False

    for where, items in (("arg", enumerate(args)), ("kw", kwargs.items())):
        for what, leaf in items:
            if leaf is None and where == "kw":
                nones.append(("kw", what))
            elif not place(leaf, (where, what), ()):
                return None
    return locations, nones


def capture_exported(ep: "torch.export.ExportedProgram", source_class: str = "", flow=None) -> Graph:
    """``ep`` as an IR graph; ``flow``: what the float64 probe told (``capture_dtypes.DtypeFlow``), recorded as
    ``graph.dtype_follows`` and ``graph.float32_constants``."""
    from .capture_dtypes import DtypeFlow

    flow = flow or DtypeFlow()
    from torch.export.graph_signature import ConstantArgument, InputKind, OutputKind

    sig = ep.graph_signature
    placeholder_target = {}
    params, param_values, trainable, param_dtypes = {}, {}, set(), {}
    not_in_state_dict = set()  # non-persistent buffers and lifted constants: absent from torch's state_dict()
    first_name, aliases = {}, {}  # tensor identity -> its first state_dict name; tied name -> that name
    user_inputs, constants = [], []
    frozen = {}  # lifted constants with an autograd history: Graph.frozen_constants
    found = leaf_locations(ep)
    locations = found[0] if found else None
    input_locations = [] if found else None  # per graph input: ("arg", i) or ("kw", key)
    unused = {n.name for n in ep.graph.nodes if n.op == "placeholder" and not n.users}
    foldable, lifted = constant_inputs(ep)  # placeholder -> tensor of the constants folding may read
    for spec in sig.input_specs:
        name = spec.arg.name
        if spec.kind == InputKind.USER_INPUT:
            location = locations[len(user_inputs) + len(constants)] if locations else None
            if location is not None and isinstance(spec.arg, ConstantArgument) and name in unused:
                constants.append((location, spec.arg.value))  # a non-tensor example argument: baked in
                continue
            user_inputs.append(name)
            if input_locations is not None:
                input_locations.append(location)
            continue
        target = spec.target
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            tensor = ep.state_dict[target] if target in ep.state_dict else ep.constants[target]
        elif spec.kind in (InputKind.CONSTANT_TENSOR,):
            tensor = ep.constants[target]
        else:
            raise CaptureError(
                f"the forward uses a Python object torch.export lifts as an input of kind {spec.kind.name} "
                f"({name!r}: a torch.Generator passed to a random op, or a TorchScript class object); Porter converts "
                "tensors, parameters and constants only: create random numbers outside the forward and pass them in")
        t = tensor.detach()
        shared = first_name.setdefault(_identity(t), target) if t.numel() else target
        if shared != target:  # a tied weight (one tensor under two names): read through its first name
            aliases[target] = shared
            param_values[name] = placeholder_target[name] = shared
            continue
        if spec.kind == InputKind.PARAMETER:
            if tensor.requires_grad:  # a frozen parameter (Whisper's sinusoids) is a buffer of the port
                trainable.add(target)
        elif spec.kind == InputKind.CONSTANT_TENSOR or not spec.persistent or target not in ep.state_dict:
            not_in_state_dict.add(target)
        if spec.kind == InputKind.CONSTANT_TENSOR and tensor.grad_fn is not None:
            frozen[target] = type(tensor.grad_fn).__name__  # computed from parameters outside this capture
        params[target] = host_view(t)
        param_dtypes[target] = _dtype_name(t.dtype)
        param_values[name] = target
        placeholder_target[name] = target

    nodes, input_meta, outputs, metas = [], {}, [], {}
    env: dict = {}  # fx node name -> value name (in-place ops and inlined regions rename values)

    def resolve(node):
        return Ref(env.get(node.name, node.name))

    store = ConstantStore(params, param_values, param_dtypes, not_in_state_dict, metas)
    folder = ExportFolder(ep, foldable, store) if capture_fold.ENABLED else None
    inliner = Inliner(_make_node, _scopes, nodes, metas, _in_place, folder, flow.follow, flow.literal)
    store.literal_keys = inliner.literal_keys  # folded values float32 whatever the model's dtype
    for fx_node in ep.graph.nodes:
        if fx_node.op == "placeholder":
            input_meta[fx_node.name] = metas[fx_node.name] = value_meta(fx_node.meta.get("val"), _order_read(fx_node))
            if fx_node.name in placeholder_target:
                continue
        elif fx_node.op == "get_attr":
            if not isinstance(getattr(ep.graph_module, fx_node.target, None), torch.fx.GraphModule):
                raise NotImplementedError(f"unsupported exported node kind get_attr ({fx_node.name})")
            continue  # the body of a no_grad/autocast region: inlined where the region is called
        elif fx_node.op == "call_function":
            inliner.call(fx_node, ep.graph_module, env)
        elif fx_node.op == "output":
            results = fx_node.args[0]
            for spec, value in zip(sig.output_specs, results):
                if spec.kind == OutputKind.USER_OUTPUT:
                    value = literal(value, resolve)
                    value = folder.substitute(value) if folder is not None else value
                    for ref in iter_refs([value]):
                        inliner.check_readable(ref.name, "the model's output")
                    outputs.append(value)
                elif spec.kind == OutputKind.BUFFER_MUTATION:
                    if not _is_norm_statistic(spec.target):  # a state the next call would read: not dropped
                        raise NotImplementedError(_state_message(spec.target))
                    continue  # running statistics of a program exported in training mode: the port's norm layers
                else:
                    raise NotImplementedError(f"unsupported exported output kind {spec.kind}")
        else:
            raise NotImplementedError(f"unsupported exported node kind {fx_node.op} ({fx_node.name})")
    for name, target in placeholder_target.items():  # an in-place write (copy_, add_, x[i] = ...) into a buffer
        if name in inliner.written and not _is_norm_statistic(target):
            raise NotImplementedError(_state_message(target))
    if folder is not None:
        _drop_unread_constants(nodes, outputs, store, lifted, param_values)
        folder.resolve_sizes([n.meta for n in nodes])

    graph = Graph(
        inputs=user_inputs,
        input_meta=[input_meta[n] for n in user_inputs],
        nodes=nodes,
        outputs=outputs,
        params=params,
        param_values=param_values,
        trainable=trainable,
        source_class=source_class,
        frontend="torch.export",
        param_dtypes=param_dtypes,
        not_in_state_dict=not_in_state_dict,
        aliases=aliases,
        dtype_follows=inliner.followed,
        float32_constants={name for name in store.float32_constants | (flow.literal & not_in_state_dict)
                           if name in params},
    )
    graph.output_structure = _output_structure(ep, len(outputs))
    try:
        graph.output_tree = output_tree.from_spec(ep.call_spec.out_spec) if ep.call_spec.out_spec else None
    except (output_tree.OutputTreeError, AttributeError) as e:
        graph.capture_note = f"the outputs are returned as a flat tuple ({e})"
    graph.input_checks, graph.dynamic_dims = input_checks(ep, user_inputs)
    graph.frozen_constants = frozen
    if found is not None:
        graph.input_locations, graph.input_constants = input_locations, constants + [(n, None) for n in found[1]]
    return graph


def _drop_unread_constants(nodes, outputs, store, lifted: set, param_values: dict) -> None:
    """Folded constants and lifted constants that no graph call reads any more (every reader was folded)."""
    read = {r.name for n in nodes for r in iter_refs(list(n.args.values()))} | {r.name for r in iter_refs(outputs)}
    store.prune(read)
    for name in lifted - read:
        target = param_values.pop(name, None)
        if target is not None and target not in param_values.values():
            store.params.pop(target, None)
            store.param_dtypes.pop(target, None)
            store.not_in_state_dict.discard(target)


_NORM_STATISTICS = ("running_mean", "running_var", "num_batches_tracked")


def _is_norm_statistic(buffer: str) -> bool:
    return buffer.rsplit(".", 1)[-1] in _NORM_STATISTICS


def _state_message(buffer: str) -> str:
    return (f"the forward writes {buffer!r} in place, a buffer or weight the next call reads (state carried from "
            f"one call to the next: a streaming cache, a counter): a port runs without state between calls, so its "
            f"second call would differ from torch's. Pass the state as an input and return the new state as an "
            f"output instead; if the forward writes it only on its first call (a one-time setup, such as "
            f"transformers' RWKV dividing its weights in the first eval forward), run the model once in this "
            f"mode before converting")


def _output_structure(ep, count: int) -> str:
    try:
        spec = ep.call_spec.out_spec
        if spec is not None and spec.is_leaf():
            return "single"
    except AttributeError:
        pass
    return "tuple" if count != 1 else "tuple"
