"""Frontend 2: TorchScript (``torch.jit.ScriptModule``, scripted or traced, e.g. loaded with ``torch.jit.load``).

The inlined TorchScript graph is walked as an interpreter on the example inputs: every ATen call is executed with
torch to learn its result's shape and dtype, and recorded as an IR node with the same op names and schema
argument names as the ``torch.export`` frontend, so both feed one conversion. Constant control flow
(``if self.training``, ``if bias is not None``) is folded; a branch on a value computed from the input is taken as
in the example (a warning says so); loops are not supported. Module paths come from each node's module hierarchy.
"""

from __future__ import annotations

import re
import warnings

import torch

from . import capture_fold as F
from .capture_export import _dtype_name, _in_place, _is_norm_statistic, _state_message, host_view
from .capture_fold_script import ScriptFolder
from .ir import Graph, Node, Ref, iter_refs
from .guards import static_checks
from .registry import UnsupportedOpsError
from .capture_script_state import keep_unread_state, not_in_state_dict, tied_names
from .capture_script_values import (dtype_from_code, has_ref, hierarchy, isinstance_of, literal, map_leaves,
                                    meta, output_tree, python_scalar, scalar_type, snapshot)

_INT_OPS = {"add": "add", "sub": "sub", "mul": "mul", "floordiv": "floordiv", "floor_divide": "floordiv",
            "div": "truediv", "remainder": "mod", "neg": "neg", "pow": "pow"}
# overloads of _INT_OPS a trace calls on prim::NumToTensor numbers (size arithmetic)
_NUMBER_OVERLOADS = ("default", "Tensor", "Scalar", "Tensor_Scalar", "Tensor_Tensor")
# Ops on Python values (lists, None, ints) evaluated here: torch.ops cannot take Python values for schemas with type
# variables (aten::len.t, aten::__is__). Their results are structural (list lengths, None checks) or ints.
_PY_OPS = {
    "len": len, "__is__": lambda a, b: a is b, "__isnot__": lambda a, b: a is not b, "__not__": lambda a: not a,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b, "gt": lambda a, b: a > b,
    "le": lambda a, b: a <= b, "ge": lambda a, b: a >= b, "__and__": lambda a, b: a and b,
    "__or__": lambda a, b: a or b, "__contains__": lambda a, b: b in a, "isinstance": None,
    "format": lambda fmt, *args: fmt.format(*args), "warn": lambda *a: None, "list": list,
    "Bool": bool, "Int": int, "Float": float, "str": str, "append": None,
}
_METADATA = {"requires_grad", "is_grad_enabled", "is_autocast_enabled", "is_autocast_cpu_enabled", "is_cuda",
             "is_mps", "is_xpu", "is_meta", "is_sparse", "is_quantized", "is_mkldnn", "is_vulkan", "is_scripting"}
_STRUCTURAL = {"len", "__is__", "__isnot__", "__not__", "__contains__", "format", "warn", "list", "str"}
_PASSTHROUGH = {"prim::unchecked_cast", "aten::Int", "aten::Float", "aten::ScalarImplicit", "prim::NumToTensor",
                "aten::IntImplicit", "aten::FloatImplicit", "prim::Uninitialized"}


class _Interpreter:
    def __init__(self, module, inputs):
        self.module = module
        self.nodes: list = []
        self.params: dict = {}
        self.param_values: dict = {}
        self.trainable: set = set()
        self.param_dtypes: dict = {}
        self.names: dict = {}
        self.unsupported: dict = {}
        self.param_names = {id(p): n for n, p in module.named_parameters()}
        self.buffer_names = {id(b): n for n, b in module.named_buffers()}
        self.consts = 0
        self.env: dict = {}
        # input dims something was fixed to the example on (a branch, a size computed from the input), by name
        self.specialised: set = set()
        self.input_names: list = []
        try:  # what the user's state_dict holds: never folded (porter update changes it)
            self.state_keys = set(module.state_dict())
        except Exception:  # noqa: BLE001  (a ScriptModule that cannot list its state: no buffer is a constant)
            self.state_keys = None
        self.folder = ScriptFolder(F.ConstantStore(self.params, self.param_values, self.param_dtypes, set()))

    def name_for(self, base: str) -> str:
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in base) or "v"
        count = self.names.get(base, 0)
        self.names[base] = count + 1
        return base if count == 0 else f"{base}_{count}"

    # ------------------------------------------------------------------------------------------------ values
    def tensor_param(self, tensor, name: str, trainable: bool):
        value_name = f"p_{name.replace('.', '_')}"
        if name not in self.params:
            self.params[name] = host_view(tensor.detach())  # no copy: convert_graph makes the MLX one
            self.param_values[value_name] = name
            self.param_dtypes[name] = _dtype_name(tensor.dtype)
            if trainable:
                self.trainable.add(name)
        copy = tensor.detach().clone()
        if not trainable and self.state_keys is not None and name not in self.state_keys:
            self.folder.add_source(Ref(value_name), name, copy)  # a constant: calls reading only such fold
        return Ref(value_name), copy

    def record(self, ts_node, op: str, args: dict, explicit: list, concrete):
        scopes = hierarchy(ts_node)
        name = self.name_for(op.split(".")[1] if op.startswith(("aten.", "operator.")) else op)
        module, module_type = scopes[-1] if scopes else ("", "")
        args = {k: snapshot(v) for k, v in args.items()}  # lists may be appended to later (aten::append)
        self.nodes.append(Node(name, op, args, explicit, meta(concrete), module, module_type,
                               [(p, p, t) for p, t in scopes]))
        return Ref(name)

    def bind(self, node, ref, concrete, outs) -> None:
        """The TorchScript outputs of a recorded call: the value itself, or one ``getitem`` per output."""
        if len(outs) == 1:
            self.env[outs[0]] = (ref, concrete)
        else:
            for i, o in enumerate(outs):
                self.env[o] = (self.record(node, "operator.getitem", {"a": ref, "b": i}, ["a", "b"], concrete[i]),
                               concrete[i])

    def decomposed(self, node, op, ins, args, kwargs, concrete, outs):
        """The IR of ``op``'s call recorded as torch's decomposition when Porter has no converter for it
        (``capture_script_decompose``), its outputs bound to ``outs``; None to record the call itself."""
        from . import capture_script_decompose as D

        single = isinstance(concrete, torch.Tensor) and len(outs) == 1
        several = isinstance(concrete, (list, tuple)) and len(outs) == len(concrete) > 1
        if not (single or several) or not D.decomposable(op):
            return None
        gm = D.decompose_call(op, args, kwargs)
        if gm is None:
            return None
        out = D.replay(gm, D.tensor_irs(ins), lambda o, a, e, c: self.record(node, o, a, e, c), literal)
        if single and isinstance(out, Ref):
            self.env[outs[0]] = (out, concrete)
            return out
        if several and isinstance(out, list) and len(out) == len(outs):
            for o, ir, value in zip(outs, out, concrete):
                self.env[o] = (ir, value)
            return out[0]
        return None

    def input_dims(self, irs) -> set:
        """``(input name, dim)`` pairs the IR values ``irs`` were computed from through input sizes; ``(name,
        None)`` for an input reached otherwise (its values, or sizes of tensors computed from it)."""
        by_name = {n.name: n for n in self.nodes}
        inputs = set(self.input_names)
        out, seen = set(), set()
        stack = list(iter_refs(irs))
        while stack:
            ref = stack.pop()
            if ref.name in seen:
                continue
            seen.add(ref.name)
            if ref.name in inputs:
                out.add((ref.name, None))
                continue
            node = by_name.get(ref.name)
            if node is None:
                continue
            source = node.args.get("self")
            if node.op == "aten.size.int" and isinstance(source, Ref) and source.name in inputs:
                out.add((source.name, node.args.get("dim")))
                continue
            if node.op == "operator.getitem" and isinstance(node.args.get("a"), Ref):
                shape = by_name.get(node.args["a"].name)
                if shape is not None and shape.op == "aten.size.default" and isinstance(shape.args.get("self"), Ref) \
                        and shape.args["self"].name in inputs:
                    out.add((shape.args["self"].name, node.args.get("b")))
                    continue
            stack.extend(iter_refs(list(node.args.values())))
        return out

    # ------------------------------------------------------------------------------------------------ walking
    def run_block(self, block):
        for node in block.nodes():
            self.run_node(node)
        ret = block.returnNode() if hasattr(block, "returnNode") else block.return_node()
        return [self.env[v] for v in ret.inputs()]

    def run_node(self, node):
        kind = node.kind()
        ins = [self.env[v] for v in node.inputs()]
        outs = list(node.outputs())
        if kind == "prim::Constant":
            value = outs[0].toIValue()
            if isinstance(value, torch.Tensor):
                self.consts += 1
                self.env[outs[0]] = self.tensor_param(value, f"_ts_constant{self.consts}", False)
            else:
                self.env[outs[0]] = (literal(value), value)
        elif kind == "prim::GetAttr":
            ir, obj = ins[0]
            attr = getattr(obj, node.s("name"))
            if isinstance(attr, torch.Tensor):
                if id(attr) in self.param_names:
                    self.env[outs[0]] = self.tensor_param(attr, self.param_names[id(attr)], attr.requires_grad)
                elif id(attr) in self.buffer_names:
                    self.env[outs[0]] = self.tensor_param(attr, self.buffer_names[id(attr)], False)
                else:
                    self.consts += 1
                    self.env[outs[0]] = self.tensor_param(attr, f"_ts_attr{self.consts}", False)
            else:
                self.env[outs[0]] = (literal(attr) if not isinstance(attr, torch.nn.Module) else None, attr)
        elif kind in ("prim::ListConstruct", "prim::TupleConstruct"):
            self.env[outs[0]] = ([i[0] for i in ins], [i[1] for i in ins])
        elif kind == "prim::DictConstruct":  # key, value, key, value, ...: keys are literals (str/int)
            keys = [k for _, k in ins[0::2]]
            self.env[outs[0]] = (dict(zip(keys, [i[0] for i in ins[1::2]])), dict(zip(keys, [i[1] for i in ins[1::2]])))
        elif kind in ("prim::ListUnpack", "prim::TupleUnpack"):
            self.unpack(node, ins[0], outs)
        elif kind in ("prim::TupleIndex", "aten::__getitem__"):
            self.getitem(node, ins[0], ins[1], outs[0])
        elif kind in _PASSTHROUGH:
            ir, value = ins[0] if ins else (None, None)
            if kind in ("aten::Int", "aten::IntImplicit") and isinstance(value, torch.Tensor):
                value = int(value)
            if isinstance(ir, Ref) and self.folder.constant(ir) and isinstance(value, (bool, int, float)):
                ir = value  # a number read from a constant tensor is a literal
            self.env[outs[0]] = (ir, value)
        elif kind == "prim::If":
            self.branch(node, ins[0], outs)
        elif kind in ("prim::device", "prim::dtype", "aten::dim", "prim::layout"):
            value = {"prim::device": lambda t: t.device, "prim::dtype": lambda t: t.dtype,
                     "aten::dim": lambda t: t.dim(), "prim::layout": lambda t: t.layout}[kind](ins[0][1])
            self.env[outs[0]] = (literal(value), value)
        elif kind == "prim::isinstance":
            result = isinstance_of(ins[0][1], [str(t) for t in node.tys("types")])
            self.env[outs[0]] = (result, result)
        elif kind == "aten::append" and isinstance(ins[0][0], list):
            ins[0][0].append(ins[1][0])  # the list lives in the environment: every alias sees the new item
            ins[0][1].append(ins[1][1])
            self.env[outs[0]] = ins[0]
        elif kind == "prim::RaiseException":
            raise RuntimeError(f"the TorchScript model raises on the example input: {ins[0][1]}")
        elif kind in ("prim::Loop", "prim::PythonOp", "prim::CallMethod", "prim::CallFunction"):
            self.unsupported.setdefault(kind, []).extend(p for p, _ in hierarchy(node)[-1:] or [("", "")])
            raise UnsupportedOpsError(self.unsupported)
        elif kind.startswith("aten::") or kind.startswith("prim::"):
            self.call(node, kind, ins, outs)
        else:
            self.unsupported.setdefault(kind, []).append("")
            raise UnsupportedOpsError(self.unsupported)

    def unpack(self, node, source, outs):
        ir, value = source
        if isinstance(ir, list):
            for o, item_ir, item in zip(outs, ir, value):
                self.env[o] = (item_ir, item)
            return
        for i, o in enumerate(outs):
            ref = self.record(node, "operator.getitem", {"a": ir, "b": i}, ["a", "b"], value[i])
            self.env[o] = (ref, value[i])

    def getitem(self, node, source, index, out):
        (ir, value), (index_ir, index_value) = source, index
        item = value[index_value]
        if isinstance(ir, (list, dict)) and not isinstance(index_ir, Ref):
            self.env[out] = (ir[index_value], item)
        elif isinstance(ir, Ref) and not isinstance(index_ir, Ref):
            self.env[out] = (self.record(node, "operator.getitem", {"a": ir, "b": index_value}, ["a", "b"], item),
                             item)
        else:
            raise NotImplementedError("indexing a list with a value computed from the input is not supported")

    def branch(self, node, cond, outs):
        ir, value = cond
        if isinstance(ir, Ref):
            self.specialised |= self.input_dims([ir])
            warnings.warn(
                "TorchScript branch on a value computed from the input: taking the example's branch "
                f"({bool(value)}) for every input",
                stacklevel=4,
            )
        blocks = list(node.blocks())
        results = self.run_block(blocks[0] if value else blocks[1])
        for o, r in zip(outs, results):
            self.env[o] = r

    def number_arithmetic(self, node, base, schema, ins, outs) -> bool:
        """A trace's size arithmetic (``k - q`` of two ``x.size(d)`` is ``aten::sub.Tensor`` of two
        ``prim::NumToTensor``, which the interpreter keeps as numbers, then ``aten::Int``): Python arithmetic on the
        numbers, recorded as ``operator.*`` as the script frontend records it, so a slice bound stays an int. False
        (nothing done) when an operand is not a number or ``alpha`` is not 1."""
        given = {a.name: (ir, value) for a, (ir, value) in zip(schema.arguments, ins)}
        operands = [given[n] for n in ("self", "other", "exponent") if n in given]
        if not operands or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for _, v in operands):
            return False
        if given.get("alpha", (1, 1))[1] != 1:
            return False
        fn = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
              "floordiv": lambda a, b: a // b, "floor_divide": lambda a, b: a // b, "div": lambda a, b: a / b,
              "remainder": lambda a, b: a % b,
              "neg": lambda a: -a, "pow": lambda a, b: a ** b}[base]
        result = fn(*[v for _, v in operands])
        if not any(isinstance(ir, Ref) for ir, _ in operands):
            self.env[outs[0]] = (result, result)
            return True
        names = ["a", "b"][:len(operands)]
        ref = self.record(node, f"operator.{_INT_OPS[base]}", dict(zip(names, [ir for ir, _ in operands])), names,
                          result)
        self.env[outs[0]] = (ref, result)
        return True

    def number_as_tensor(self, node, ir, value):
        """A Python number where the op takes a Tensor: a trace's ``prim::NumToTensor`` (``torch.tensor(x.size(0))``),
        which the interpreter passes through as the number so sizes stay ints, becomes the 0-d tensor TorchScript
        made of it here (int64, float64 or bool, as NumToTensor does): a constant, or ``aten.scalar_tensor`` of the
        graph value."""
        if isinstance(value, torch.Tensor) or not isinstance(value, (bool, int, float)):
            return ir, value
        dtype = torch.bool if isinstance(value, bool) else torch.int64 if isinstance(value, int) else torch.float64
        tensor = torch.tensor(value, dtype=dtype)
        if not isinstance(ir, Ref):
            self.consts += 1
            return self.tensor_param(tensor, f"_ts_constant{self.consts}", False)
        return self.record(node, "aten.scalar_tensor.default", {"s": ir, "dtype": _dtype_name(dtype)}, ["s", "dtype"],
                           tensor), tensor

    def tensor_literal(self, node, schema, ins, outs):
        """``torch.tensor(data, dtype=None, device=None, requires_grad=False)`` (every overload: a list, possibly
        nested, or one scalar). torch.ops cannot take the Python list for ``t[] data``, so the value is built with
        ``torch.tensor`` itself. Data of literals only becomes a constant (``_ts_constant<n>``, like a tensor
        constant in the graph); data holding graph values (a size read from the input, a 0-d tensor passed through
        ``float()``) is recorded as ``aten.tensor.default`` and built at run time. The dtype is honoured (None:
        torch's inference from the Python values, which the example's result records); the device and
        ``requires_grad`` change no value."""
        given = {a.name: value for a, (_, value) in zip(schema.arguments, ins)}
        if "data" not in given and "t" not in given:
            self.unsupported.setdefault(f"aten::tensor.{schema.overload_name}", []).append("")
            raise UnsupportedOpsError(self.unsupported)
        data_ir, data = next((ir, value) for a, (ir, value) in zip(schema.arguments, ins) if a.name in ("data", "t"))
        dtype = given.get("dtype")
        if isinstance(dtype, int):  # TorchScript passes a ScalarType as its number
            dtype = dtype_from_code(dtype)
        concrete = torch.tensor(map_leaves(python_scalar, data), dtype=dtype)
        if not has_ref(data_ir) and not isinstance(data_ir, Ref):
            self.consts += 1
            self.env[outs[0]] = self.tensor_param(concrete, f"_ts_constant{self.consts}", False)
            return
        args = {"data": data_ir, "dtype": literal(dtype), "device": literal(given.get("device")),
                "requires_grad": bool(given.get("requires_grad", False))}
        self.env[outs[0]] = (self.record(node, "aten.tensor.default", args, list(args), concrete), concrete)

    def jit_to(self, node, schema, ins, outs):
        """TorchScript's own placement ops, which torch.ops does not expose: ``aten::cpu`` and the ``aten::to``
        overloads ``prim_Device`` (``t.to(device?, dtype?, non_blocking, copy)``, scripted ``t.to(x.device)``),
        ``prim_dtype`` and ``prim_other``. Without a new dtype or ``copy=True`` the result is the tensor itself (the
        device is a placement; TorchScript returns ``self``, aliasing it); otherwise ``aten._to_copy`` to the dtype
        asked for."""
        given = {a.name: value for a, (_, value) in zip(schema.arguments, ins)}
        self_ir, tensor = ins[0]
        dtype = given.get("dtype")
        if isinstance(dtype, int):  # TorchScript passes a ScalarType as its number
            dtype = dtype_from_code(dtype)
        if (dtype is None or dtype == tensor.dtype) and not given.get("copy", False):
            self.env[outs[0]] = ins[0]
            return
        concrete = tensor.to(dtype or tensor.dtype, copy=True)
        ref = self.record(node, "aten._to_copy.default", {"self": self_ir, "dtype": _dtype_name(concrete.dtype)},
                          ["self", "dtype"], concrete)
        self.env[outs[0]] = (ref, concrete)

    def call(self, node, kind, ins, outs):
        schema = torch._C.parse_schema(node.schema()) if node.schema() != "(no schema)" else None
        if schema is None:
            self.unsupported.setdefault(kind, []).append("")
            raise UnsupportedOpsError(self.unsupported)
        base, overload = schema.name.split("::")[1], schema.overload_name or "default"
        namespace = schema.name.split("::")[0]
        values = [v for _, v in ins]
        tensor_in = any(isinstance(v, torch.Tensor) for v in values)
        any_ref = any(has_ref(r) for r, _ in ins)
        if base in _PY_OPS and _PY_OPS[base] is not None and not tensor_in and (
                base in _STRUCTURAL or not any_ref or base not in _INT_OPS):
            result = _PY_OPS[base](*values)
            if any_ref and base not in _STRUCTURAL:
                self.specialised |= self.input_dims([r for r, _ in ins])
                warnings.warn(f"TorchScript {kind} on a size computed from the input is fixed to the example's "
                              f"result ({result!r})", stacklevel=5)
            self.env[outs[0]] = (literal(result), result)
            return
        if base in ("__is__", "__isnot__"):
            result = (values[0] is values[1]) if base == "__is__" else (values[0] is not values[1])
            self.env[outs[0]] = (result, result)
            return
        if namespace == "aten" and base == "tensor":
            self.tensor_literal(node, schema, ins, outs)
            return
        if namespace == "aten" and (base == "cpu" or base == "to" and overload.startswith("prim_")):
            self.jit_to(node, schema, ins, outs)
            return
        if base in _INT_OPS and not tensor_in and overload in _NUMBER_OVERLOADS \
                and self.number_arithmetic(node, base, schema, ins, outs):
            return
        ins = [self.number_as_tensor(node, ir, value) if str(a.type) == "Tensor" else (ir, value)
               for a, (ir, value) in zip(schema.arguments, ins)] + ins[len(schema.arguments):]
        try:
            op = getattr(getattr(getattr(torch.ops, namespace), base), overload)
        except (AttributeError, RuntimeError):  # a TorchScript-only operator (aten::cpu, aten::to.prim_*)
            self.unsupported.setdefault(f"{schema.name}.{overload} (TorchScript-only)", []).append("")
            raise UnsupportedOpsError(self.unsupported) from None
        args, kwargs, ir_args, explicit = [], {}, {}, []
        dtype_args = set(re.findall(r"ScalarType\??\s+(\w+)", node.schema()))
        for a, (ir, value) in zip(schema.arguments, ins):
            if a.kwarg_only:
                kwargs[a.name] = value
            else:
                args.append(value)
            ir_args[a.name] = scalar_type(a.name, ir, dtype_args)
            explicit.append(a.name)
        for a in schema.arguments[len(ins):]:
            ir_args[a.name] = literal(a.default_value) if a.has_default_value() else None
        if F.ENABLED and f"{namespace}.{base}.{overload}" in F.MASK_OPS and isinstance(ir_args.get("indices"), list):
            given = dict(zip((a.name for a in schema.arguments), (value for _, value in ins)))
            values = given.get("values")
            if not F.keeps_mask(f"{namespace}.{base}.{overload}", given["indices"],
                                values.numel() if isinstance(values, torch.Tensor) else None):
                ir_args["indices"] = self.folder.masks(ir_args["indices"], given["indices"])
        concrete = op(*args, **kwargs)
        if isinstance(concrete, bool):
            # tensor metadata (is_nested, is_floating_point, requires_grad) or a value test: fixed to the example
            if tensor_in and not (base.startswith("is_") or base in _METADATA):
                warnings.warn(f"TorchScript {kind} on a tensor's values is fixed to the example's result "
                              f"({concrete})", stacklevel=5)
            self.env[outs[0]] = (concrete, concrete)
            return
        all_literal = not any(isinstance(r, Ref) or has_ref(r) for r, _ in ins)
        is_tensor_out = isinstance(concrete, torch.Tensor) or (
            isinstance(concrete, (list, tuple)) and any(isinstance(c, torch.Tensor) for c in concrete))
        if all_literal and not is_tensor_out:
            self.env[outs[0]] = (literal(concrete), concrete)  # constant folding (shapes, flags, arithmetic)
            return
        if F.ENABLED and self.folder.fold(op, kwargs, ins, concrete, outs, self.env, base):
            return  # every input a constant: the value is stored (capture_fold.py)
        if F.ENABLED and _in_place(base) and ins:
            self.folder.check_write(ins[0], self.env)
        if base in _INT_OPS and not is_tensor_out and overload in ("int", "default", "Scalar", "float"):
            names = ["a", "b"][: len(ins)]
            ir = self.record(node, f"operator.{_INT_OPS[base]}", dict(zip(names, [r for r, _ in ins])), names,
                             concrete)
            self.env[outs[0]] = (ir, concrete)
            return
        ref = self.decomposed(node, op, ins, args, kwargs, concrete, outs)  # binds outs itself
        if ref is None:
            ref = self.record(node, f"{namespace}.{base}.{overload}", ir_args, explicit, concrete)
            self.bind(node, ref, concrete, outs)
        if _in_place(base) and ins and isinstance(ins[0][0], Ref):

            # in-place: later readers of the written value see the result, under every name it has (a chain
            # k.add_(1).mul_(2) writes k through the first op's output)
            old = ins[0][0]
            written = self.param_values.get(old.name)
            if written is not None and not _is_norm_statistic(written) and written not in self.folder.store.names:
                # a weight or buffer kept between calls (a folded value is built anew by every call)
                raise NotImplementedError(_state_message(written))
            for key, (ir, value) in list(self.env.items()):
                if ir == old:
                    self.env[key] = (ref, concrete)
            self.env[node.inputsAt(0)] = (ref, concrete)


def capture_script(module: torch.jit.ScriptModule, example_inputs) -> Graph:
    if example_inputs is None:
        raise TypeError("converting a TorchScript model needs example_inputs (its shapes are not stored)")
    graph = module.inlined_graph
    interp = _Interpreter(module, example_inputs)
    graph_inputs = list(graph.inputs())
    interp.env[graph_inputs[0]] = (None, module)
    if len(graph_inputs) - 1 != len(example_inputs):
        raise TypeError(f"the TorchScript model takes {len(graph_inputs) - 1} input(s) but "
                        f"{len(example_inputs)} example input(s) were given")
    names = interp.input_names
    for value, x in zip(graph_inputs[1:], example_inputs):
        name = interp.name_for(value.debugName().split(".")[0] or "x")
        names.append(name)
        interp.env[value] = (Ref(name), x.clone())
    with torch.no_grad():
        results = interp.run_block(graph)
    (out_ir, out_value), = results
    tree = None
    if isinstance(out_value, torch.Tensor):
        outputs, structure = [out_ir], "single"
    elif isinstance(out_ir, (list, dict)):
        outputs, structure = [], "tuple"
        tree = output_tree(out_ir, out_value, outputs)
        if "tuple" in tree and all("leaf" in c for c in tree["tuple"]):
            tree = None  # a flat tuple: output_structure says it all
    else:
        outputs, structure = [out_ir], "single"
    interp.folder.prune({r.name for n in interp.nodes for r in iter_refs(list(n.args.values()))}
                        | {r.name for r in iter_refs(outputs)}, interp.param_values)
    keep_unread_state(module, interp)
    input_meta = [meta(x) for x in example_inputs]
    # every size is read at run time (aten::size), as the TorchScript module itself does, except the dims the
    # interpreter fixed something to the example on: those are checked against the example's sizes
    pinned = set()
    for name, dim in interp.specialised:
        i, rank = names.index(name), input_meta[names.index(name)].rank
        pinned.update((i, d) for d in range(rank)) if not isinstance(dim, int) else pinned.add((i, dim % max(rank, 1)))
    input_checks = [c for c in static_checks(names, [m.hint if m.kind == "tensor" else None for m in input_meta],
                                             "the TorchScript interpreter took the example's path on this size")
                    if tuple(c["lhs"]["dim"]) in pinned]
    dynamic_dims = [{"input": i, "axis": a} for i, m in enumerate(input_meta) if m.kind == "tensor"
                    for a in range(m.rank) if (i, a) not in pinned]
    return Graph(
        input_checks=input_checks,
        dynamic_dims=dynamic_dims,
        inputs=names,
        input_meta=input_meta,
        nodes=interp.nodes,
        outputs=outputs,
        params=interp.params,
        param_values=interp.param_values,
        trainable=interp.trainable,
        source_class=f"torch.jit.ScriptModule({module.original_name})",
        frontend="torchscript",
        output_structure=structure,
        output_tree=tree,
        param_dtypes=interp.param_dtypes,
        aliases=tied_names(module, interp),
        not_in_state_dict=not_in_state_dict(module, interp),
    )
