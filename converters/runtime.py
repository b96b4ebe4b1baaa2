"""PortedModel: an ``mlx.nn.Module`` that runs a converted graph. Never imports torch.

The model is a tree of MLX modules under torch's names (``converters/tree.py``): mapped torch layers are MLX layers
(``ported.layer1[0].conv1`` is a ``porter.layers.Conv2d``), everything else is a container of its parameters. The
forward is the converted program: its ``call_module`` nodes call the layer found at their path *at call time* (so
replacing ``ported.fc`` changes the forward), its other nodes run kernels on values and on parameters read from the
tree.
"""

from __future__ import annotations

from typing import Optional

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten
from porter.layers import exporting

from . import layout as L
from . import output_tree
from . import transforms
from .guards import InputChecks
from .input_binding import Binding
from .limits import check_elements
from .axis_checks import axis_fields, check as check_axes
from .index_errors import IndexRangeError, IndexTypeError, at_node as index_error_at
from .registry import get_kernel, takes_training
from .safe_text import printable
from . import fusion
from .fusion import activation_name, batch_norm_activation_pairs, batch_norm_residual_runs
from . import static_values
from . import train_graph
from . import weight_gate
from .layer_types import Activation
from .graph_budget import GraphBudget
from .tree import TorchNamed, TreeError, build_tree, resolve, unused_arrays

CALL_MODULE = "call_module"

# A plain inference call (no transform, no trace, not exporting) hands MLX every OVERLAP_EVERY-th node's output to
# evaluate while Python builds the rest (mx.async_eval), and drops each value from the walk's table after its last
# reader, so evaluated intermediates are freed as in a single eval. 0: build the whole graph first (the caller's
# eval computes it). Under mx.grad/vmap/compile MLX refuses async_eval and the call builds the graph as before.
# Off: measured on a quiet 2-core AVX-512 machine (batch 1, wall, 15 interleaved rounds, after the session-17 node
# reductions), k=8 against 0: EfficientNetV2-S 0.99, RegNetY-400MF 0.93, ResNet-18 1.00, MobileNetV2 0.99, Swin-T 0.97,
# ResNet-50 1.03 (the Python thread takes a core the kernels' second thread wanted). Too mixed to be the default.
OVERLAP_EVERY = 0


def _mx_array(a) -> mx.array:
    """A numpy array as MLX, float64 kept (``mx.array`` reads float64 numpy as float32)."""
    a = np.asarray(a)
    return mx.array(a, dtype=mx.float64) if a.dtype == np.float64 else mx.array(a)


class _Program:
    def __init__(self, graph: dict):
        self.graph = graph
        # fails early on an unknown kernel; a call_module node calls a layer of the tree instead
        self.kernels = [None if n["kernel"] == CALL_MODULE else get_kernel(n["kernel"]) for n in graph["nodes"]]
        # random training-mode kernels (converters/ops/stochastic.py): given their module's mode at each call
        self.mode_nodes = frozenset(i for i, n in enumerate(graph["nodes"])
                                    if n["kernel"] != CALL_MODULE and takes_training(n["kernel"]))
        self.keys: dict = {}  # torch name -> key path in the tree (set by PortedModel)
        self.layer_keys: dict = {}  # mapped layer path -> key path
        self.input_checks = InputChecks(graph)
        self.binding = Binding(graph.get("signature"), len(graph["inputs"]))  # the call's arguments -> inputs
        self.module_outputs: dict = {}
        # modules whose torch training mode the port cannot reproduce: training mode refused (capture_train.py)
        self.train_refusals: dict = dict(graph.get("train_refusals", {}))
        self.set_train_state(graph.get("train_state", []))
        for entry in graph["module_outputs"]:
            self.module_outputs.setdefault(entry["value"], []).append(entry)
        # a float16/bfloat16 model: torch's mixed-precision rules (converters/precision.py)
        self.compute_dtype, self.layer_casts, self.inputs_as_given = None, frozenset(), frozenset()
        if graph.get("compute_dtype"):
            from .precision import DTYPES, inputs_cast_first, node_policies

            self.compute_dtype = DTYPES[graph["compute_dtype"]]
            self.kernels, self.layer_casts = node_policies(graph, self.kernels)
            self.inputs_as_given = inputs_cast_first(graph)  # not cast on entry: the graph casts them itself
        # eval-time batch norm + ReLU/hardswish pairs, decided per call (converters/fusion.py)
        self.fusable = {} if self.compute_dtype is not None else batch_norm_activation_pairs(graph)
        # eval-time batch norm + residual add (+ ReLU) runs, decided per call (converters/fusion.py)
        self.residual = {} if self.compute_dtype is not None else batch_norm_residual_runs(graph)
        # nodes no input reaches (Swin's attention masks, relative-position biases): computed once per weights
        self.static = static_values.StaticValues(graph)
        self.identity = get_kernel("identity")  # run as an alias, no call
        # kernel nodes reading a trainable parameter beside an activation: gated in training (weight_gate.py)
        self.weight_nodes = weight_gate.weight_nodes(graph)
        self.axis_nodes = axis_fields(graph)  # nodes whose axis attributes are checked against their inputs' rank
        self.budget = GraphBudget(graph)  # bytes alive at once and multiply-adds per call (graph_budget.py)
        # the forward captured with some modules in training mode (train_graph.py): run while all of them train
        record = graph.get(train_graph.KEY)
        self.switch = tuple(record["switch"]) if record is not None else ()
        self.train = _Program(train_graph.view(graph)) if record is not None else None

    def programs(self) -> list:
        """This program and its training-mode program, if any (they share the module tree)."""
        return [self] + ([self.train] if self.train is not None else [])

    def set_train_state(self, entries: list) -> None:
        """Spectral norm entries (``train_state.py``) and, per entry, the nodes reading ``u`` and ``v`` (a pair per
        computation of the weight)."""
        from .train_state import readers

        pairs = []
        for entry in entries:
            found = readers(self.graph, entry)
            if found is None:
                raise ValueError(f"train_state: the graph does not read {entry['u']!r} and {entry['v']!r} in pairs, "
                                 "one per computation of the weight")
            pairs.append(found)
        self.train_state, self.train_readers = list(entries), pairs


def _evaluate_ahead(env: dict, node: dict, every: int) -> int:
    """Start evaluating ``node``'s output (when it is still in ``env``: read later); ``every``, or 0 from now on in a
    call MLX is transforming (``async_eval`` refused)."""
    value = env.get(node["outputs"][0])
    if type(value) is not mx.array:
        return every
    try:
        mx.async_eval(value)
    except ValueError:  # inside mx.grad / vmap / compile
        return 0
    return every


def _params_read(graph: dict) -> set:
    """The parameter names the program reads (``{"param": name}`` in a node's inputs or an output, spectral norm's
    ``train_state``)."""
    found: set = set()

    def walk(spec):
        if isinstance(spec, dict) and set(spec) == {"param"}:
            found.add(spec["param"])
        elif isinstance(spec, list):
            for item in spec:
                walk(item)

    for nodes, outputs in train_graph.parameters_read(graph):  # the training-mode graph's too
        for node in nodes:
            walk(node["inputs"])
        for output in outputs:
            walk(output["value"])
    for entry in graph.get("train_state", []):  # spectral norm's weight and vectors, updated between calls
        found.update(entry[k] for k in ("weight", "u", "v"))
    return found


def output_layouts(outputs: list) -> list:
    """Per graph output, its layout in words (``"NCHW->NHWC"``, ``"as-is"``)."""
    return [L.describe(tuple(o["perm"])) if o["perm"] is not None else "as-is" for o in outputs]


def _check_result(result, node) -> None:
    """No node builds an array beyond the element limit (MLX is lazy: the shape is known before any allocation)."""
    for item in result if isinstance(result, (list, tuple)) else (result,):
        if isinstance(item, mx.array) and item.size > 1 << 20:
            where = f" in module {node['module']!r}" if node.get("module") else ""
            check_elements(item.shape, f"kernel {node['kernel']!r}{where}")


class TrainModeError(ValueError):
    """A port asked to run in training mode where torch's training forward differs from the eval forward it was
    captured from, in modules the port cannot train as torch does.

    Attributes:
        refusals (dict): ``{torch module path: reason}``.
    """

    def __init__(self, refusals: dict, converting: bool = False):
        self.refusals = dict(refusals)
        # the reasons may come from a stranger's graph.json (train_refusals): shown with their controls escaped
        listed = "; ".join(f"{path or '<root>'!r}: {printable(why)}" for path, why in list(refusals.items())[:8])
        more = f" (and {len(refusals) - 8} more)" if len(refusals) > 8 else ""
        if converting:
            where = "the torch model is in training mode, and its port cannot run in training mode as torch does"
            exact = "Convert model.eval() for an exact eval-mode port"
        else:
            where, exact = "this port cannot run in training mode as torch does", "Eval mode is exact (ported.eval())"
        super().__init__(f"{where}: {listed}{more}. {exact}; to fine-tune, replace or remove those modules in the "
                         "torch model (or set their rates to 0) and convert again")


def _walk(root, path: str) -> tuple:
    """``(the module at torch path path or None, the nearest module the tree holds on the way)``: a module without
    parameters has no place of its own in the tree; a list (torch's Sequential) has no mode."""
    node, nearest = root, root
    for seg in (path.split(".") if path else []):
        if isinstance(node, list) and seg.isdigit() and int(seg) < len(node):
            node = node[int(seg)]
        elif isinstance(node, nn.Module) and seg in node and isinstance(node[seg], (nn.Module, list)):
            node = node[seg]
        else:
            return None, nearest
        if isinstance(node, nn.Module):
            nearest = node
    return (node if isinstance(node, nn.Module) else None), nearest


def _module_at(root, path: str):
    return _walk(root, path)[0]


def _nearest_module(root, path: str):
    return _walk(root, path)[1]


class PortedModel(TorchNamed):
    """A converted torch model.

    Call it with mx arrays (``ported(x)``). With ``io_layout="mlx"`` image-like inputs/outputs are channels-last
    (``(N, H, W, C)``); with ``"torch"`` they use torch's layout exactly. Parameters are MLX arrays in MLX layouts,
    keyed by their torch ``state_dict`` names in :attr:`params` (trainable) and :attr:`buffers` (frozen). A
    float16/bfloat16 model (:meth:`astype`) casts float inputs to its :attr:`dtype` (integer inputs untouched).

    Attributes:
        io_layout (str): ``"mlx"`` or ``"torch"``.
        num_transposes (int): transposes the layout pass inserted (ones that reorder data).
        input_layouts / output_layouts (list of str): per tensor, e.g. ``"NCHW->NHWC"`` or ``"as-is"``.
    """

    def __init__(self, graph: dict, weights: dict):
        super().__init__()
        # Held in a plain object: mlx.nn.Module would take a dict or list attribute for part of the parameter tree.
        self._program = _Program(graph)
        arrays = {}
        for name, spec in graph["params"].items():
            if name not in weights:
                raise ValueError(f"the weights have no entry for parameter {name!r}")
            array = weights[name] if isinstance(weights[name], mx.array) else _mx_array(weights[name])
            if spec.get("dtype") == "bfloat16" and array.dtype != mx.bfloat16:
                array = array.astype(mx.bfloat16)  # numpy carried it as float32 (exact)
            arrays[name] = array
        read = _params_read(graph)
        try:
            keys, layer_keys = build_tree(self, graph["params"], arrays, graph.get("modules", {}),
                                          graph.get("module_types", {}), read)
        except TreeError as e:
            raise ValueError(f"the converted graph's names do not form a module tree: {e}") from None
        for program in self._program.programs():
            program.keys, program.layer_keys = keys, layer_keys
        self._program.unused = unused_arrays(graph["params"], graph.get("modules", {}), read)
        self.eval()  # a converted model starts in eval mode, as it was captured; .train() switches

    # ------------------------------------------------------------------------------------------------ properties
    @property
    def graph(self) -> dict:
        return self._program.graph

    @property
    def unused_params(self) -> list:
        """The recorded arrays (torch names) outside every mapped layer that no node reads: carried, never used
        (``porter.load`` warns with :class:`UnusedArraysWarning`)."""
        return list(self._program.unused)

    @property
    def io_layout(self) -> str:
        return self._program.graph["io_layout"]

    @property
    def num_transposes(self) -> int:
        return self._program.graph["num_transposes"]

    @property
    def input_layouts(self) -> list:
        return [L.describe(tuple(i["perm"])) if i["perm"] is not None else "as-is" for i in self._program.graph["inputs"]]

    @property
    def output_layouts(self) -> list:
        """Per output of the graph the port runs in its modes now (the training-mode graph's while its modules
        train, ``train_graph.py``)."""
        return output_layouts(self._current_program(strict=False).graph["outputs"])

    @property
    def tied_weights(self) -> dict:
        """Torch names of tied weights, ``{name: the parameter it is}`` (``lm_head.weight`` -> ``embed.weight``):
        torch holds one tensor under both names; the port holds it once, under the name torch's
        ``named_parameters()`` gives it, so training updates it once, as torch does."""
        return dict(self._program.graph.get("tied_weights", {}))

    @property
    def dynamic_dims(self) -> list:
        """The input dims the port keeps symbolic, ``[{"input": i, "axis": torch dim}, ...]``, in the graph it runs
        in its modes now (the training-mode graph's while its modules train, ``train_graph.py``: the eval graph's
        dims that its checks do not pin); every other dim is checked against the example's size on each call
        (see :attr:`input_checks`)."""
        return list(self._current_program(strict=False).graph.get("dynamic_dims", []))

    @property
    def input_checks(self):
        """The shape conditions checked on every call of the graph the port runs in its modes now
        (:class:`porter.converters.guards.InputChecks`; ``.refusal(torch_shapes)`` tells whether inputs of those
        torch-layout shapes would be refused)."""
        return self._current_program(strict=False).input_checks

    @property
    def graph_limits(self) -> dict:
        """``{"max_bytes", "max_macs"}``: the bounds every call is held to (``converters/graph_budget.py``)."""
        budget = self._program.budget
        return {"max_bytes": budget.max_bytes, "max_macs": budget.max_macs}

    def set_graph_limits(self, max_bytes=None, max_macs=None) -> None:
        """Bound each call to ``max_bytes`` of arrays alive at once and ``max_macs`` multiply-adds (``None``: the
        default, ``converters/graph_budget.py``); a call over either raises ``GraphLimitError`` before anything
        of it is evaluated."""
        for program in self._program.programs():
            program.budget.set_limits(max_bytes, max_macs)

    @property
    def source_class(self) -> str:
        return self._program.graph.get("source_class", "")

    @property
    def dtype(self) -> str:
        """The dtype the model computes in: ``"float16"`` or ``"bfloat16"`` after :meth:`astype`, else its
        parameters' floating dtype (``"float32"``, or ``"float64"`` for a float64 torch model)."""
        from .precision import dtype_of

        return dtype_of(self._program.graph)

    def astype(self, dtype) -> "PortedModel":
        """A copy with weights and compute in ``dtype`` (``"float32"``, ``"float16"``, ``"bfloat16"`` or the
        ``mx`` dtype); norm statistics, softmax and reductions stay in float32 as in torch
        (``converters/precision.py``). This model is left as it was."""
        from .precision import astype

        return astype(self, dtype)

    # ------------------------------------------------------------------------------------------------ modes
    @property
    def train_refusals(self) -> dict:
        """``{torch module path: reason}``: the modules whose training mode differs from their eval mode in a way
        the port cannot compute (captured in eval mode: a branch on ``self.training``, ``Dropout2d``, ...). With
        any, :meth:`train` and a call in training mode raise :class:`TrainModeError`; eval is exact."""
        return dict(self._program.train_refusals)

    def train(self, mode: bool = True):
        """Training mode (``mode=True``) as torch's: batch norm's batch statistics and running-statistic updates,
        dropout, spectral norm's power iteration. Raises :class:`TrainModeError` naming the modules whose training
        mode the port cannot compute (:attr:`train_refusals`), leaving the mode as it was."""
        if mode and self._program.train_refusals:
            raise TrainModeError(self._program.train_refusals)
        return super().train(mode)

    def set_torch_modes(self, modes: dict) -> None:
        """Each module of the tree in the mode ``modes`` gives for its torch path (``{path: training}``, parents
        before children, ``""`` the root: a torch model's ``named_modules()`` modes); a module torch does not list
        keeps its parent's. Raises :class:`TrainModeError` (modes unchanged) where a refused module would train."""
        before = {name: m.training for name, m in self.named_modules()}
        super().train(bool(modes.get("", False)))
        for path, training in modes.items():
            module = _module_at(self, path)
            if module is not None and module is not self:
                module.train(bool(training))  # its children follow, until their own paths come
        try:
            self._check_mode()
        except TrainModeError as e:
            for name, m in self.named_modules():
                m._training = before[name]
            raise e from None

    def _check_mode(self) -> None:
        """Refuse a call in training mode where a refused module would train (``.train()`` on a submodule too), or
        where the modules of the training-mode graph's switch are in mixed modes."""
        self._check_refusals()
        self._current_program()

    def _check_refusals(self) -> None:
        for path in self._program.train_refusals:
            if _nearest_module(self, path).training:
                raise TrainModeError(self._program.train_refusals)

    def _current_program(self, strict: bool = True) -> _Program:
        """The graph to run in the modes now: the training-mode graph (``train_graph.py``) when every module of its
        switch trains (its nearest holder in the tree), the eval graph when none does. Mixed modes raise
        :class:`TrainModeError` naming the modules (``strict=False``: the eval graph)."""
        program = self._program
        if program.train is None:
            return program
        modes = {path: _nearest_module(self, path).training for path in program.switch}
        if all(modes.values()):
            return program.train
        if any(modes.values()) and strict:
            training = sorted(path or "<root>" for path, on in modes.items() if on)
            raise TrainModeError({path: f"its training forward was captured together with {training} in training "
                                        "mode; put these modules in one mode" for path, on in modes.items() if not on})
        return program

    def _update_train_state(self, program: _Program) -> dict:
        """Spectral norm's power iteration for each recorded weight whose module trains, before the forward reads
        ``u``/``v`` (``train_state.py``): the port's vectors change as torch's buffers do. Returns ``{node index:
        {parameter: array}}``: the vectors each reading node sees (a module called twice: the second call's nodes
        read the vectors after two rounds)."""
        from .train_state import power_iterate

        keys, overrides = program.keys, {}
        for entry, (u_nodes, v_nodes) in zip(program.train_state, program.train_readers):
            if not _nearest_module(self, entry["module"]).training:
                continue
            weight = self._to_torch(entry["weight"], resolve(self, keys[entry["weight"]]))
            u, v = resolve(self, keys[entry["u"]]), resolve(self, keys[entry["v"]])
            for u_node, v_node in zip(u_nodes, v_nodes):
                u, v = power_iterate(entry, weight, u, v)
                overrides.setdefault(u_node, {})[entry["u"]] = u
                overrides.setdefault(v_node, {})[entry["v"]] = v
            for name, value in ((entry["u"], u), (entry["v"], v)):
                resolve(self, keys[name][:-1])[keys[name][-1]] = value
        return overrides

    # ------------------------------------------------------------------------------------------------ running
    def _resolve(self, spec, env):
        # the graph was checked against the schema on load; this stays strict on its own (a hand-built graph):
        # only references, lists of them and plain number/bool/None literals ever reach a kernel
        if isinstance(spec, dict):
            if set(spec) == {"ref"}:
                return env[spec["ref"]]
            if set(spec) == {"param"}:
                return resolve(self, self._program.keys[spec["param"]])
        elif isinstance(spec, list):
            return [self._resolve(s, env) for s in spec]
        elif spec is None or isinstance(spec, (bool, int, float)):
            return spec
        raise ValueError(f"bad argument spec {str(spec)[:80]!r} in the converted graph")

    def _run(self, inputs, record: Optional[dict], program: Optional[_Program] = None):
        """Build the call's graph (lazily). ``program``: the graph to run (``porter.load``'s size walk of the
        training-mode graph, its layers in their modes now); default the one the modes choose."""
        self._check_refusals()
        if program is None:
            program = self._current_program()  # refuses switch modules in mixed modes
        overrides = self._update_train_state(program) if program.train_state else {}
        specs = program.graph["inputs"]
        if len(inputs) != len(specs):
            raise TypeError(f"PortedModel expects {len(specs)} input(s) but got {len(inputs)}")
        env = {}
        for spec, x in zip(specs, inputs):
            if spec["meta"]["kind"] == "tensor":
                if not isinstance(x, mx.array):
                    x = _mx_array(x) if spec["meta"].get("dtype") == "float64" else mx.array(np.asarray(x))
                if x.ndim == 0 and "scalar_size" in spec:
                    x = program.input_checks.repeat_scalar(x, spec["scalar_size"], inputs, spec["name"])
                if x.ndim != len(spec["perm"]):
                    raise ValueError(
                        f"input {spec['name']!r} must have {len(spec['perm'])} dims "
                        f"({L.describe(tuple(spec['perm']))}) but got shape {tuple(x.shape)}"
                    )
            env[spec["name"]] = x
        program.input_checks.check([env[spec["name"]] for spec in specs])  # sizes it was built for only
        half = program.compute_dtype
        if half is not None:
            from .precision import cast_input, lower

            env.update({spec["name"]: cast_input(env[spec["name"]], half) for spec in specs
                        if spec["name"] not in program.inputs_as_given})
        nodes, fusable, skip = program.graph["nodes"], program.fusable, -1
        static, kept, static_key = self._static_lookup(env, record, overrides, program)
        alias = static_values.ENABLED  # identity nodes as aliases (the switch's old path: called)
        walk = program.budget.walk(env)  # refuses, before anything is evaluated, a call over the bounds
        overlap = OVERLAP_EVERY if record is None and not (static_key is not None and kept is None) \
            and not exporting() else 0
        frees = program.budget.frees
        gate = self.training and not exporting()  # the gradient-order gate on functional weight nodes
        for index, (node, fn) in enumerate(zip(nodes, program.kernels)):
            if index:
                walk.done(index - 1)
                if overlap:
                    args = result = fused = None  # the last node's inputs: MLX may reuse a buffer only it reads
                    for gone in frees.get(index - 1, ()):
                        env.pop(gone, None)
                    if index % overlap == 0:
                        overlap = _evaluate_ahead(env, nodes[index - 1], overlap)
            if index <= skip or (kept is not None and index in static.nodes):
                continue
            args = [self._resolve(s, env) for s in node["inputs"]]
            if gate and index in program.weight_nodes:
                args = self._weights_first(index, args, program)
            if index in program.axis_nodes:  # a crafted axis past the rank (MLX wraps some silently)
                check_axes(index, node, program.axis_nodes[index], args)
            if alias and fn is program.identity and index not in overrides:
                (env[node["outputs"][0]],) = args
                if record is None or node["outputs"][0] not in program.module_outputs:
                    continue
            if index in overrides:  # spectral norm's vectors for this call (train_state.py)
                args = [overrides[index].get(s["param"], a) if isinstance(s, dict) and set(s) == {"param"} else a
                        for s, a in zip(node["inputs"], args)]
            if record is None and (index in fusable or index in program.residual):
                fused = self._fused(index, args[0], env, program)
                if fused is not None:  # the batch norm and the nodes after it in one pass: the last one's output
                    fused, span = fused
                    last = nodes[index + span]
                    _check_result(fused, last)
                    walk.add(index + span, last, args, fused)
                    env[last["outputs"][0]] = fused
                    skip = index + span
                    continue
            if fn is None:  # call_module: the layer now at that path (a user may have replaced it)
                fn = resolve(self, program.layer_keys[node["attrs"]["module"]])
                attrs = {}
                if index in program.layer_casts:
                    args = [lower(a, half) for a in args]
            else:
                attrs = node["attrs"]
                if index in program.mode_nodes:  # its torch module's mode, or its nearest holder's
                    attrs = dict(attrs, training=_nearest_module(self, node["module"]).training)
            try:
                result = fn(*args, **attrs)
            except (IndexTypeError, IndexRangeError) as e:  # names the node and the input the array came through
                raise index_error_at(e, index, node) from e
            except (ValueError, TypeError) as e:
                where = (f" in module {node['module']!r}" if node["module"] else "") + f", node {index}"
                raise type(e)(f"{e} (while running {node['op'] or node['kernel']}{where})") from e
            except (IndexError, KeyError, AttributeError, ArithmeticError) as e:  # a wrong axis or value: not a crash
                where = (f" in module {node['module']!r}" if node["module"] else "") + f", node {index}"
                raise ValueError(f"kernel {node['kernel']!r} failed with {type(e).__name__}: {e} "
                                 f"(while running {node['op'] or node['kernel']}{where})") from e
            _check_result(result, node)
            walk.add(index, node, args, result)
            (name,) = node["outputs"]
            env[name] = result
            if record is not None and name in program.module_outputs:
                for entry in program.module_outputs[name]:
                    perm = tuple(entry["perm"])
                    if len(perm) != result.ndim:  # a crafted graph.json: the schema cannot know the rank
                        raise ValueError(f"module_outputs: the layout {list(perm)} recorded for module "
                                         f"{entry['module']!r} does not fit its {result.ndim}-d output {name!r}")
                    torch_value = result.transpose(L.to_layout_axes(perm, L.identity(len(perm))))
                    record.pop(entry["module"], None)  # a module called again moves to its last call's position
                    record[entry["module"]] = torch_value
        if static_key is not None and kept is None:
            static.store(static_key, env)
        outs = tuple(self._resolve(o["value"], env) for o in program.graph["outputs"])
        if program.graph["output_structure"] == "single":
            return outs[0]
        if "output_tree" in program.graph:
            return output_tree.build(program.graph["output_tree"], outs)
        return outs

    def _weights_first(self, index: int, args: list, program: _Program) -> list:
        """The arguments of functional weight node ``index`` for a training call: its activations and the
        parameters that train now through the gradient-order gate (``weight_gate.py``), so their gradients are
        computed while the node's cotangent is live. Only with the root in training mode (a port trained under a
        root in eval mode computes the same gradients, in MLX's own order)."""
        return weight_gate.weights_first(self, program.keys, program.weight_nodes[index], args)

    def _static_lookup(self, env: dict, record, overrides, program: _Program) -> tuple:
        """``(StaticValues, kept values or None, key or None)`` for this call (``static_values.py``): the values
        of the input-independent nodes put into ``env`` when they were computed from the arrays now in the tree;
        key ``None`` when the cache is not used this call (training mode, export mode, a per-module trace, spectral
        norm's per-call vectors)."""
        static = program.static
        if not (static and static_values.ENABLED) or self.training or record is not None or overrides or exporting():
            return static, None, None
        keys, layer_keys = program.keys, program.layer_keys
        key = [resolve(self, keys[name]) for name in static.params]
        for path in static.modules:  # the layer now at the path, its mode and its arrays
            layer = resolve(self, layer_keys[path])
            if getattr(layer, "training", False):
                return static, None, None
            key.append(layer)
            key.extend(array for _, array in tree_flatten(layer.parameters()))
        kept = static.lookup(key)
        if kept is not None:
            env.update(kept)
        return static, kept, key

    def _fused(self, index: int, x, env: dict, program: _Program):
        """``(output, nodes spanned after it)`` of batch norm node ``index`` run in one pass with the nodes after it,
        or ``None`` (run them): its activation (``fusion.batch_norm_activation_pairs``: ``eval_activation``) or the
        residual add and its ReLU (``fusion.batch_norm_residual_runs``: ``eval_residual``; switch
        ``fusion.RESIDUAL``). Only when the layers now at those paths are still a batch norm with that method and
        the activation the graph names (a user may have replaced either)."""
        nodes = program.graph["nodes"]
        if index in program.fusable:
            position, activation, span = None, program.fusable[index], 1
        elif fusion.RESIDUAL:
            position, activation, span = program.residual[index]
        else:
            return None
        if not isinstance(x, mx.array) or not self._activation_still(nodes[index + span], activation, program):
            return None
        norm = resolve(self, program.layer_keys[nodes[index]["attrs"]["module"]])
        if position is None:
            run = getattr(norm, "eval_activation", None)
            out = run(x, activation) if run is not None else None
        else:
            run = getattr(norm, "eval_residual", None)
            out = run(x, self._resolve(nodes[index + 1]["inputs"][position], env), activation) if run else None
        return None if out is None else (out, span)

    def _activation_still(self, node: dict, activation, program: _Program) -> bool:
        """Whether ``node`` (a fused run's last node) still computes ``activation`` (None: no activation, any
        node): a kernel node always does; a layer node while the layer now at its path is that ``Activation``."""
        if activation is None or node["kernel"] != "call_module":
            return True
        layer = resolve(self, program.layer_keys[node["attrs"]["module"]])
        return type(layer) is Activation and activation_name(layer.fn, layer.attrs) == activation

    def __call__(self, /, *args, **kwargs):
        """Run the forward; arguments bind as they do to the torch forward (``input_binding.py``):
        ``ported(input_ids, token_type_ids=tt)``."""
        return self._run(self._program.binding.bind(args, kwargs), None)

    def trace(self, /, *args, **kwargs):
        """Run the forward and also return every torch submodule's output (torch layout) by qualified name."""
        record: dict = {}
        outputs = self._run(self._program.binding.bind(args, kwargs), record)
        return outputs, record

    @property
    def call_signature(self) -> str:
        """The call the port takes, as the torch forward's (``(input_ids, token_type_ids, attention_mask=<left
        out>)``: an argument left out at conversion may only be left out, or given as its default)."""
        return self._program.binding.describe()

    def split_inputs(self, inputs) -> tuple:
        """``(args, kwargs)`` for inputs in the port's input order (:attr:`input_layouts`, ``graph["inputs"]``):
        ``ported(*args, **kwargs)`` runs them; also how the torch model takes the same values."""
        return self._program.binding.split(list(inputs))

    @property
    def input_keywords(self) -> dict:
        """``{input index: keyword}`` for the inputs :meth:`split_inputs` passes by keyword."""
        return self._program.binding.keywords()

    @property
    def input_arguments(self) -> list:
        """The argument each input (in :attr:`input_layouts` order) binds to: ``"input_ids"``, ``"args[0]"``."""
        return self._program.binding.names()

    # ------------------------------------------------------------------------------------------------ torch view
    def _to_torch(self, name, array):
        spec = self._program.graph["params"][name]
        _, inverse = transforms.get(spec["transform"])
        return inverse(array, **spec["attrs"])

    def named_arrays(self) -> dict:
        """Every parameter and buffer the conversion recorded, by torch ``state_dict`` name, in MLX layout (the
        arrays now in the tree)."""
        return {name: resolve(self, self._program.keys[name]) for name in self._program.graph["params"]}

    @property
    def params(self) -> dict:
        """The trainable parameters by torch name (MLX layout); the tree's own view is ``parameters()``."""
        spec = self._program.graph["params"]
        return {n: a for n, a in self.named_arrays().items() if spec[n]["trainable"]}

    @property
    def buffers(self) -> dict:
        """The buffers (running statistics, constants) by torch name (MLX layout)."""
        spec = self._program.graph["params"]
        return {n: a for n, a in self.named_arrays().items() if not spec[n]["trainable"]}

    def torch_parameters(self) -> dict:
        """Every parameter and buffer by torch state_dict name, in torch layout; a tied weight under each of its
        names (what ``model.load_state_dict`` expects). Non-persistent buffers and lifted constants, which torch's
        ``state_dict()`` leaves out, are left out (``load_state_dict(strict=True)`` would refuse them)."""
        spec = self._program.graph["params"]
        out = {name: self._to_torch(name, array) for name, array in self.named_arrays().items()
               if spec.get(name, {}).get("state_dict", True)}
        for alias, name in self.tied_weights.items():
            if name in out:
                out[alias] = out[name]
        return out

    def load_torch_state_dict(self, state_dict, strict: bool = True):
        """Load a torch ``state_dict`` (torch layouts and names, e.g. the model trained further) into this port, as
        ``torch_model.load_state_dict`` would: each weight through the transform conversion recorded for its op.

        The port keeps its own dtypes (a float16 port stays float16; ``self.astype("float32")`` first for
        another); non-persistent buffers stay; either name of a tied weight loads it. A shape mismatch, two
        different values for one tied tensor, a quantized port or (``strict=True``) any missing or unexpected
        key raises ``WeightsUpdateError`` (a ``ValueError``) and changes nothing.

        Returns:
            LoadResult: ``(missing_keys, unexpected_keys)``, as torch's ``load_state_dict``.

        Example:
            >>> ported = porter.convert(model, x)
            >>> train(model)                                    # more torch training
            >>> ported.load_torch_state_dict(model.state_dict())
            LoadResult(missing_keys=[], unexpected_keys=[])
        """
        from .weights_update import load_torch_state_dict

        return load_torch_state_dict(self, state_dict, strict=strict)

    def torch_parameter_grads(self, grads_tree) -> dict:
        """Turn ``mx.grad``/``nn.value_and_grad`` gradients w.r.t. ``trainable_parameters()`` (a tree, or a flat
        dict by torch name) into ``{torch name: np.ndarray in torch layout}``."""
        from mlx.utils import tree_flatten

        grads = dict(tree_flatten(grads_tree)) if isinstance(grads_tree, (dict, list)) else grads_tree
        out = {}
        for name, g in grads.items():
            if name not in self._program.graph["params"]:
                raise KeyError(f"gradient for unknown parameter {name!r}")
            g = self._to_torch(name, g)
            out[name] = np.array(g.astype(mx.float32) if g.dtype == mx.bfloat16 else g)  # numpy has no bfloat16
        return out

    def _extra_repr(self) -> str:
        return (f"source={self.source_class!r}, nodes={len(self._program.graph['nodes'])}, "
                f"params={len(self._program.graph['params'])}, io_layout={self.io_layout!r}, "
                f"num_transposes={self.num_transposes}")
