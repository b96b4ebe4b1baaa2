"""The ``graph.json`` schema (format version 1), checked as a whole before any array is built.

``porter.load`` runs :func:`check_graph` on the parsed file and ``porter.save`` on what it is about to write, so a
crafted artifact and a writer bug fail the same way: one :class:`ArtifactError` naming the file, the place (a node,
a parameter, an input) and the field. What is checked:

* the top-level keys (unknown keys are refused: a newer feature must not be silently ignored), their types;
* every node: its kernel is registered and has a spec (``converters/spec.py``, declared with the kernel), its inputs
  and attrs match that spec and the kernel's signature (required present, nothing unknown), every value it reads is
  a graph input or an earlier node's output (so no cycles) or a recorded parameter, its output name is new;
* graph inputs (names, layouts, recorded shapes/dtypes, bounded), outputs, ``module_outputs``;
* ``params``: transform name and attributes from an allow-list, shapes and dtypes;
* optional ``signature`` (the forward's parameters and each input's argument: ``input_binding.py``; names are
  identifiers, distinct, in Python's order), ``input_checks`` (per-call input shape checks), ``dynamic_dims`` and ``compute_dtype`` (``float16`` or
  ``bfloat16``: a half-precision model, ``converters/precision.py``), ``dtype_follows`` (outputs of nodes with a
  float32 ``dtype`` attribute that a half model computes in its dtype) and ``float32_constants`` (float32 parameters
  a half model keeps in float32; both ``converters/capture_dtypes.py``);
* optional ``train_graph`` (``train_graph.py``): its keys and ``switch`` (distinct module paths), then the
  training-mode graph it makes with the shared inputs, parameters and layers, checked as above;
* sizes: nesting depth, counts and string lengths are bounded; the file size is bounded by the loader.

Nothing here resolves a name from the file to code: kernel names index the registry, every other name is compared
with an explicit allow-list.
"""

from __future__ import annotations

import inspect

from . import spec as S
from .limits import max_elements

FORMAT_VERSION = 7  # 2: the module tree ("modules", "module_types", call_module nodes); 3: the forward's
# "signature" (keyword inputs), params' "state_dict" flag, new kernels and split modes; 4: training mode
# ("train_refusals", "train_state"), kernels tensor_from_scalars, broadcast_all, addbmm, pdist, batch_norm_batch_stats,
# sdpa's "gqa", group_norm's groups=None; 5: stochastic depth and functional dropout in training mode (kernels
# stochastic_depth, train_dropout, sdpa_dropout; layer type StochasticDepth); 6: "dtype_follows" (nodes whose float32
# dtype a half port follows) and "float32_constants" (constants it keeps float32), converters/capture_dtypes.py, and
# timm's DropBlock2d in training mode (kernel drop_block), BatchNorm's "count_batches"; 7: "train_graph" (the forward
# captured with modules whose training branch is deterministic in training mode, converters/train_graph.py); 1 to 6
# still load, holding nothing newer than their version (converters/format_versions.py)
MAX_NODES = 1 << 20
MAX_NAME = 1024
MAX_DEPTH = 32
MAX_CHECKS = 4096

_SYMBOLIC = S.Str(512, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_ +-*/%().,<>=!")
_NAME = S.Text(MAX_NAME)
_FLOATING = ("float64", "float32", "float16", "bfloat16")  # the dtypes precision.astype casts
_LAYOUT = S.Opt(S.PERM)
_VALUE = S.Opt(S.OneOf(S.SCALAR, S.Seq(S.Opt(S.SCALAR), 0, 1 << 16)))
_CMP = ("eq", "ne", "lt", "le", "gt", "ge")
_EXPR_OPS = ("add", "sub", "mul", "floordiv", "mod", "max", "min")
_REQUIRED = ("format_version", "io_layout", "inputs", "outputs", "output_structure", "nodes", "params",
             "module_outputs", "num_transposes")
_OPTIONAL = ("source_class", "frontend", "metadata", "input_layouts", "output_layouts", "input_checks",
             "dynamic_dims", "modules", "module_types", "compute_dtype", "tied_weights", "output_tree", "signature",
             "train_refusals", "train_state", "dtype_follows", "float32_constants", "train_graph")
_CALL_MODULE = "call_module"  # a node that calls the mapped layer at attrs.module (converters/runtime.py)


class ArtifactError(ValueError):
    """A converted model directory that is not a valid Porter artifact.

    Attributes:
        file (str): the file at fault (``.../graph.json`` or ``.../model.safetensors``).
        where (str): the place in it (``node 12 (kernel 'pool', module 'layer1.0')``, ``params['fc.weight']``).
        field (str): the field (``attrs.kernel_size[1]``), or ``""`` for the place as a whole.
    """

    def __init__(self, file: str, where: str, field: str, problem: str):
        self.file, self.where, self.field, self.problem = file, where, field, problem
        place = where + (f", field {field!r}" if field else "")
        super().__init__(f"{file!r} is not a valid Porter artifact: {place}: {problem}")


class _Checker:
    def __init__(self, graph, file: str):
        self.graph = graph
        self.file = file
        self.defined: set = set()
        self.params: set = set()
        self.ranks: list = []
        self.modules: dict = {}  # layer path -> type

    def fail(self, where, field, problem):
        raise ArtifactError(self.file, where, field, problem)

    def match(self, spec, value, where, field, on_ref=None):
        try:
            spec.check(value, on_ref or self.on_ref)
        except S.SpecError as e:
            self.fail(where, field + e.path, e.message)

    def on_ref(self, key, name):
        if key == "ref" and name not in self.defined:
            raise S.SpecError(f"reads the value {name[:80]!r}, which no graph input or earlier node defines")
        if key == "param" and name not in self.params:
            raise S.SpecError(f"reads the parameter {name[:80]!r}, which 'params' does not record")

    # ------------------------------------------------------------------------------------------------ top level
    def run(self):
        g = self.graph
        if not isinstance(g, dict):
            self.fail("the file", "", f"expected a JSON object but got {S.kind_of(g)}")
        version = g.get("format_version")
        if isinstance(version, bool) or not isinstance(version, int):
            self.fail("the file", "format_version", f"expected an int but got {S.kind_of(version)}")
        if version > FORMAT_VERSION:
            self.fail("the file", "format_version", f"format version {version} is newer than this Porter supports "
                      f"({FORMAT_VERSION}); upgrade Porter")
        if version < 1:
            self.fail("the file", "format_version", f"format version {version} is not a Porter format")
        missing = [k for k in _REQUIRED if k not in g]
        if missing:
            self.fail("the file", missing[0], "this required key is missing")
        unknown = [k for k in g if k not in _REQUIRED + _OPTIONAL]
        if unknown:
            self.fail("the file", str(unknown[0])[:80], "unknown key (written by a newer Porter, or not by Porter)")
        self.match(S.Enum("mlx", "torch"), g["io_layout"], "the file", "io_layout")
        self.match(S.Enum("single", "tuple"), g["output_structure"], "the file", "output_structure")
        self.match(S.Int(0, 1 << 30), g["num_transposes"], "the file", "num_transposes")
        for key in ("source_class", "frontend"):
            if key in g:
                self.match(_NAME, g[key], "the file", key)
        if "compute_dtype" in g:  # a half-precision model (converters/precision.py)
            self.match(S.Enum("float16", "bfloat16"), g["compute_dtype"], "the file", "compute_dtype")
        for key in ("input_layouts", "output_layouts"):
            if key in g:
                self.match(S.Seq(S.Text(64), 0, 1 << 16), g[key], "the file", key)
        if "metadata" in g:
            if not isinstance(g["metadata"], dict):
                self.fail("the file", "metadata", f"expected an object but got {S.kind_of(g['metadata'])}")
            self.depth(g["metadata"], "metadata")
        self.check_params(g["params"])
        self.check_modules(g.get("modules", {}), g.get("module_types", {}))
        if "tied_weights" in g:
            self.check_tied_weights(g["tied_weights"])
        if "train_refusals" in g:  # modules whose training mode the port refuses (capture_train.py)
            self.check_train_refusals(g["train_refusals"])
        self.check_inputs(g["inputs"])
        self.check_nodes(g["nodes"])
        if "dtype_follows" in g:  # float32 dtypes a half port follows (converters/capture_dtypes.py)
            self.check_dtype_follows(g["dtype_follows"], g["nodes"])
        if "float32_constants" in g:  # constants a half port keeps in float32
            self.match(S.Seq(_NAME, 0, MAX_NODES), g["float32_constants"], "the file", "float32_constants")
            for i, name in enumerate(g["float32_constants"]):
                if g["params"].get(name, {}).get("dtype") != "float32":
                    self.fail("the file", f"float32_constants[{i}]", f"{name[:80]!r} is not a float32 parameter")
            self.distinct(g["float32_constants"], "float32_constants")
        if "compute_dtype" in g:
            self.check_half_params(g["params"], g["compute_dtype"], set(g.get("float32_constants", ())))
        self.check_outputs(g["outputs"], g["output_structure"])
        self.check_module_outputs(g["module_outputs"])
        if "train_state" in g:  # spectral norm's power iteration in training mode (train_state.py), over checked nodes
            self.check_train_state(g["train_state"])
        if "output_tree" in g:
            from .output_tree import OutputTreeError, check as check_tree

            if g["output_structure"] != "tuple":
                self.fail("the file", "output_tree", "is only recorded with output_structure 'tuple'")
            try:
                check_tree(g["output_tree"], len(g["outputs"]))
            except OutputTreeError as e:
                self.fail("the file", "output_tree", str(e))
        if "signature" in g:  # the forward's parameters and each input's argument (input_binding.py)
            from .input_binding import compile_signature

            self.match(_ANY, g["signature"], "the file", "signature")
            try:
                compile_signature(g["signature"], len(g["inputs"]))
            except ValueError as e:
                self.fail("the file", "signature", str(e))
        if "input_checks" in g:
            self.check_input_checks(g["input_checks"])
        if "dynamic_dims" in g:
            self.check_dynamic_dims(g["dynamic_dims"])
        if "train_graph" in g:  # the forward captured in training mode (train_graph.py)
            self.check_train_graph(g)
        self.check_version_features(version)

    def check_train_graph(self, g):
        """The training-mode graph's own keys and switch, then the graph it makes with the shared inputs,
        parameters and layers (``train_graph.view``), checked as the eval graph is: its failures name
        ``train_graph``."""
        from . import train_graph as T

        record = g[T.KEY]
        if not isinstance(record, dict):
            self.fail("the file", T.KEY, f"expected an object but got {S.kind_of(record)}")
        missing = [k for k in T.REQUIRED if k not in record]
        if missing:
            self.fail("the file", f"{T.KEY}.{missing[0]}", "this required key is missing")
        unknown = [k for k in record if k not in T.REQUIRED + T.PER_GRAPH]
        if unknown:
            self.fail("the file", f"{T.KEY}.{str(unknown[0])[:80]}", "unknown key (written by a newer Porter, or not "
                      "by Porter)")
        self.match(S.Seq(_NAME, 1, T.MAX_SWITCH), record["switch"], "the file", f"{T.KEY}.switch")
        self.distinct(record["switch"], f"{T.KEY}.switch")
        for i, path in enumerate(record["switch"]):
            problem = T.switch_problem(path, self.params)
            if problem:
                self.fail("the file", f"{T.KEY}.switch[{i}]", problem)
        try:
            _Checker(T.view(g), self.file).run()
        except ArtifactError as e:
            raise ArtifactError(self.file, f"{T.KEY}: {e.where}", e.field, e.problem) from None

    def check_version_features(self, version):
        """Nothing newer than the file's own format version (``converters/format_versions.py``)."""
        from .format_versions import features

        for since, where, field in features(self.graph):
            if since > version:
                self.fail(where, field, f"was added in format version {since} but the file says format version "
                          f"{version} (not written by the Porter it names)")

    def depth(self, value, field):
        stack = [(value, 1)]
        while stack:
            item, level = stack.pop()
            if level > MAX_DEPTH:
                self.fail("the file", field, f"nested deeper than {MAX_DEPTH} levels")
            if isinstance(item, dict):
                stack.extend((v, level + 1) for v in item.values())
            elif isinstance(item, list):
                stack.extend((v, level + 1) for v in item)

    # ------------------------------------------------------------------------------------------------ params
    def check_params(self, params):
        from .ops.conv import TRANSFORM_ATTRS

        if not isinstance(params, dict) or len(params) > MAX_NODES:
            self.fail("the file", "params", f"expected an object of at most {MAX_NODES} entries")
        record = S.Obj({"transform": S.Enum(*TRANSFORM_ATTRS), "attrs": S.Obj({"perm": S.PERM, "groups": S.Int()}),
                        "trainable": S.Bool(), "torch_shape": S.Ints(0, S.MAX_LEN, 0, (1 << 31) - 1),
                        "dtype": S.DTYPE, "state_dict": S.Bool()}, ["transform", "attrs", "trainable", "torch_shape"])
        for name, entry in params.items():
            where = f"params[{name[:80]!r}]"
            self.match(_NAME, name, where, "")
            self.match(record, entry, where, "")
            self.match(TRANSFORM_ATTRS[entry["transform"]], entry["attrs"], where, "attrs")
            try:
                from .transforms import mlx_shape

                mlx_shape(entry["transform"], entry["attrs"], entry["torch_shape"])
            except ValueError as e:
                self.fail(where, "torch_shape", str(e))
            self.params.add(name)

    # ------------------------------------------------------------------------------------------------ modules
    def check_modules(self, modules, types):
        from .layer_types import LAYER_TYPES
        from .ops.elementwise import _check_unary

        for key, value in (("modules", modules), ("module_types", types)):
            if not isinstance(value, dict) or len(value) > MAX_NODES:
                self.fail("the file", key, f"expected an object of at most {MAX_NODES} entries")
        for path, name in types.items():
            self.match(_NAME, path, f"module_types[{path[:80]!r}]", "")
            self.match(S.Text(128), name, f"module_types[{path[:80]!r}]", "")
        record = S.Obj({"type": S.Enum(*LAYER_TYPES), "config": _ANY}, ["type", "config"])
        for path, entry in modules.items():
            where = f"modules[{path[:80]!r}]"
            self.match(_NAME, path, where, "")
            if not path or "" in path.split("."):
                self.fail(where, "", "a layer path must be a non-empty dotted name without empty segments")
            self.match(record, entry, where, "")
            self.match(LAYER_TYPES[entry["type"]].config, entry["config"], where, "config")
            if entry["type"] == "Pool":
                from .layer_types import POOL_FAMILY_ARGS, pool_family

                extra = sorted(set(entry["config"]["args"]) - POOL_FAMILY_ARGS[pool_family(entry["config"]["fn"])])
                if extra:
                    self.fail(where, "config.args", f"{entry['config']['fn']} takes no argument(s) {extra}")
            if entry["type"] == "Activation":
                try:
                    _check_unary([], {"fn": entry["config"]["fn"], **entry["config"]["attrs"]})
                except S.SpecError as e:
                    self.fail(where, "config.attrs", e.message)
        self.modules = {path: entry["type"] for path, entry in modules.items()}
        for name in self.params:  # a name both an array and a layer cannot form a tree
            if name in self.modules:
                self.fail(f"modules[{name[:80]!r}]", "", "is also the name of a parameter")

    def check_train_refusals(self, refusals):
        """``{torch module path: reason}`` (texts; the runtime only shows them)."""
        if not isinstance(refusals, dict) or len(refusals) > MAX_NODES:
            self.fail("the file", "train_refusals", f"expected an object of at most {MAX_NODES} entries")
        for path, reason in refusals.items():
            where = f"train_refusals[{str(path)[:80]!r}]"
            self.match(_NAME, path, where, "")
            self.match(_NAME, reason, where, "reason")

    def check_train_state(self, entries):
        """Spectral norm entries (``train_state.py``): parameters the file records, a bounded iteration count."""
        from .train_state import FORMS, MAX_ITERATIONS, readers

        if not isinstance(entries, list) or len(entries) > MAX_NODES:
            self.fail("the file", "train_state", f"expected a list of at most {MAX_NODES} entries")
        spec = S.Obj({"kind": S.Enum("spectral_norm"), "form": S.Enum(*FORMS), "module": _NAME, "weight": _NAME,
                      "u": _NAME, "v": _NAME, "dim": S.Int(0, S.MAX_LEN - 1),
                      "n_power_iterations": S.Int(1, MAX_ITERATIONS), "eps": S.Float()},
                     ["kind", "form", "module", "weight", "u", "v", "dim", "n_power_iterations", "eps"])
        for i, entry in enumerate(entries):
            self.match(spec, entry, f"train_state[{i}]", "")
            for key in ("weight", "u", "v"):
                if entry[key] not in self.params:
                    self.fail(f"train_state[{i}]", key, f"names {entry[key][:80]!r}, which 'params' does not record")
            if readers(self.graph, entry) is None:
                self.fail(f"train_state[{i}]", "", "the graph does not read its u and v in pairs, one per computation "
                          "of the weight")

    def check_tied_weights(self, tied):
        """``{state_dict name: the recorded parameter it is}``: names torch gives a tensor already in ``params``."""
        if not isinstance(tied, dict) or len(tied) > MAX_NODES:
            self.fail("the file", "tied_weights", f"expected an object of at most {MAX_NODES} entries")
        for alias, name in tied.items():
            where = f"tied_weights[{alias[:80]!r}]"
            self.match(_NAME, alias, where, "")
            self.match(_NAME, name, where, "")
            if alias in self.params or alias in self.modules:
                self.fail(where, "", "is also the name of a parameter or layer")
            if name not in self.params:
                self.fail(where, "", f"names {name[:80]!r}, which 'params' does not record")

    # ------------------------------------------------------------------------------------------------ inputs
    def meta(self, value, where, field, level=0):
        if level > MAX_DEPTH:
            self.fail(where, field, f"nested deeper than {MAX_DEPTH} levels")
        spec = S.Obj({"kind": S.Enum("tensor", "int", "float", "bool", "list", "none"),
                      "shape": S.Seq(S.OneOf(S.Int(0, S.INT_LIMIT), _SYMBOLIC)), "dtype": S.DTYPE,
                      "hint": S.Ints(0, S.MAX_LEN, 0, S.INT_LIMIT), "items": S.Seq(_ANY, 0, 1 << 16)}, ["kind"])
        self.match(spec, value, where, field)
        for i, item in enumerate(value.get("items") or []):
            self.meta(item, where, f"{field}.items[{i}]", level + 1)

    def check_inputs(self, inputs):
        entry = S.Obj({"name": _NAME, "perm": _LAYOUT, "meta": _ANY, "scalar_size": _AnyValue(2 * MAX_DEPTH + 2)},
                      ["name", "perm", "meta"])
        self.match(S.Seq(entry, 0, 1 << 10), inputs, "the file", "inputs")
        for i, entry in enumerate(inputs):
            where = f"input {i} ({entry['name'][:80]!r})"
            self.meta(entry["meta"], where, "meta")
            meta = entry["meta"]
            if entry["name"] in self.defined:
                self.fail(where, "name", "defined twice")
            if meta["kind"] == "tensor":
                shape = meta.get("shape")
                if shape is None or entry["perm"] is None:
                    self.fail(where, "meta.shape", "a tensor input needs a recorded shape and layout")
                if sorted(entry["perm"]) != list(range(len(shape))):
                    self.fail(where, "perm", f"{entry['perm']} is not a permutation of the input's {len(shape)} dims")
                if meta.get("hint") is not None and len(meta["hint"]) != len(shape):  # sizes per dim, read by the
                    # refusals' nearest-size search and porter.load's graph bound: another rank indexes past it
                    self.fail(where, "meta.hint", f"records {len(meta['hint'])} sizes for an input of {len(shape)} dims")
                hint = meta.get("hint") or [s for s in shape if isinstance(s, int)]
                count = 1
                for s in hint:
                    count *= s
                if count > max_elements():
                    self.fail(where, "meta.hint", f"a recorded example of {count} elements exceeds the limit of "
                              f"{max_elements()} elements")
                self.ranks.append(len(shape))
            else:
                self.ranks.append(None)
            self.defined.add(entry["name"])
        for i, entry in enumerate(inputs):  # after every rank is known: the length may read any input's dims
            if "scalar_size" in entry:
                where = f"input {i} ({entry['name'][:80]!r})"
                if entry["perm"] != [0]:
                    self.fail(where, "scalar_size", "only a 1-d input may be given 0-d")
                self.expr(entry["scalar_size"], where, "scalar_size")

    # ------------------------------------------------------------------------------------------------ nodes
    def check_nodes(self, nodes):
        from .registry import _KERNELS, get_kernel_spec, kernel_names

        kernel_names()  # loads the op families

        if not isinstance(nodes, list) or len(nodes) > MAX_NODES:
            self.fail("the file", "nodes", f"expected a list of at most {MAX_NODES} nodes but got {S.kind_of(nodes)}")
        node_spec = S.Obj({"kernel": S.Text(128), "inputs": S.Seq(_ANY, 0, 1 << 16), "attrs": _ATTRS,
                           "outputs": S.Seq(_NAME, 1, 1), "layout": _LAYOUT, "op": _NAME, "module": _NAME,
                           "module_type": _NAME}, ["kernel", "inputs", "attrs", "outputs"])
        for i, node in enumerate(nodes):
            self.match(node_spec, node, f"node {i}", "", on_ref=_no_refs)
            kernel = node["kernel"]
            where = f"node {i} (kernel {kernel[:40]!r}" + (f", module {node['module'][:80]!r})"
                                                           if node.get("module") else ")")
            if kernel == _CALL_MODULE:
                self.check_call_module(node, where)
                (name,) = node["outputs"]
                if name in self.defined:
                    self.fail(where, "outputs[0]", f"the value {name[:80]!r} is defined twice")
                self.defined.add(name)
                continue
            if kernel not in _KERNELS:
                self.fail(where, "kernel", "no runtime kernel has this name")
            spec = get_kernel_spec(kernel)
            if spec is None:
                self.fail(where, "kernel", "this kernel has no argument spec, so it cannot be loaded from a file")
            self.check_call(spec, _signature(_KERNELS[kernel]), node["inputs"], node["attrs"], where)
            (name,) = node["outputs"]
            if name in self.defined:
                self.fail(where, "outputs[0]", f"the value {name[:80]!r} is defined twice")
            self.defined.add(name)

    def check_dtype_follows(self, names, nodes):
        self.match(S.Seq(_NAME, 0, MAX_NODES), names, "the file", "dtype_follows")
        typed = {node["outputs"][0] for node in nodes if node["attrs"].get("dtype") == "float32"}
        for i, name in enumerate(names):
            if name not in typed:
                self.fail("the file", f"dtype_follows[{i}]",
                          f"{name[:80]!r} is not the output of a node with a float32 'dtype' attribute")
        self.distinct(names, "dtype_follows")

    def check_half_params(self, params, dtype, kept):
        """A half port holds every floating parameter in its dtype, as torch's ``model.half()`` does, except the
        float32 constants it lists (``precision.astype`` writes no other). A float32 (or float64) one besides them
        ran the ops reading it in float32 (a mixed-precision model torch never computes): refused, not guessed."""
        for name, entry in params.items():
            recorded = entry.get("dtype")
            if recorded in _FLOATING and recorded != dtype and name not in kept:
                self.fail(f"params[{name[:80]!r}]", "dtype", f"a {dtype} port (compute_dtype) records this "
                          f"parameter as {recorded}: a half port holds its floating parameters in {dtype}, except "
                          "the float32 constants listed in 'float32_constants'")

    def distinct(self, names, field):
        """A list of names a writer produces from a set: each name once."""
        seen = set()
        for i, name in enumerate(names):
            if name in seen:
                self.fail("the file", f"{field}[{i}]", f"{name[:80]!r} is listed twice")
            seen.add(name)

    def check_call_module(self, node, where):
        self.match(S.Obj({"module": _NAME}, ["module"]), node["attrs"], where, "attrs")
        path = node["attrs"]["module"]
        if path not in self.modules:
            self.fail(where, "attrs.module", f"{path[:80]!r} is not a layer recorded in 'modules'")
        most = 3 if self.modules[path] == "MultiheadAttention" else 1  # query, key, value
        self.match(S.Seq(S.Opt(S.TENSOR), 1, most), node["inputs"], where, "inputs")

    def check_call(self, spec, sig, inputs, attrs, where):
        positional, required, has_varargs, kwonly, kw_required, has_varkw = sig
        if len(inputs) < required or (len(inputs) > len(positional) and not has_varargs):
            most = "any number" if has_varargs else len(positional)
            self.fail(where, "inputs", f"the kernel takes {required} to {most} inputs but the node gives {len(inputs)}")
        for j, value in enumerate(inputs):
            item = spec.inputs[j] if j < len(spec.inputs) else spec.more
            self.match(item, value, where, f"inputs[{j}]")
        for key in kw_required:
            if key not in attrs:
                self.fail(where, f"attrs.{key}", "this required attribute is missing")
        for key, value in attrs.items():
            if key not in spec.attrs or (key not in kwonly and not has_varkw):
                self.fail(where, f"attrs.{str(key)[:40]}", "the kernel takes no such attribute")
            self.match(spec.attrs[key], value, where, f"attrs.{key}")
        if spec.check is not None:
            try:
                spec.check(inputs, attrs)
            except S.SpecError as e:
                self.fail(where, "attrs" + e.path, e.message)

    # ------------------------------------------------------------------------------------------------ outputs
    def check_outputs(self, outputs, structure):
        self.match(S.Seq(S.Obj({"value": _VALUE, "perm": _LAYOUT}, ["value", "perm"]), 0, 1 << 16), outputs,
                   "the file", "outputs")
        if structure == "single" and len(outputs) != 1:
            self.fail("the file", "outputs", f"output_structure 'single' needs one output but there are {len(outputs)}")

    def check_module_outputs(self, entries):
        def known(key, name):
            self.on_ref("ref", name)

        entry = S.Obj({"value": _NAME, "module": _NAME, "type": _NAME, "perm": S.PERM}, ["value", "module", "perm"])
        self.match(S.Seq(entry, 0, MAX_NODES), entries, "the file", "module_outputs")
        for i, e in enumerate(entries):
            self.match(S.Ref(), {"ref": e["value"]}, f"module_outputs[{i}]", "value", on_ref=known)

    # ------------------------------------------------------------------------------------------------ guards
    def expr(self, e, where, field, level=0):
        if level > MAX_DEPTH:
            self.fail(where, field, f"expression nested deeper than {MAX_DEPTH} levels")
        if isinstance(e, int) and not isinstance(e, bool):
            self.match(S.Int(), e, where, field)
            return
        if isinstance(e, dict) and set(e) == {"dim"}:
            self.match(S.Ints(2, 2), e["dim"], where, field + ".dim")
            index, axis = e["dim"]
            if not 0 <= index < len(self.ranks) or self.ranks[index] is None:
                self.fail(where, field + ".dim[0]", f"{index} is not the index of a tensor input")
            if not -self.ranks[index] <= axis < self.ranks[index]:
                self.fail(where, field + ".dim[1]", f"axis {axis} is out of range for input {index} of rank "
                          f"{self.ranks[index]}")
            return
        if isinstance(e, dict) and set(e) == {"op", "args"}:
            self.match(S.Enum(*_EXPR_OPS), e["op"], where, field + ".op")
            if not isinstance(e["args"], list) or len(e["args"]) != 2:
                self.fail(where, field + ".args", f"expected a list of 2 expressions but got {S.kind_of(e['args'])}")
            for k, arg in enumerate(e["args"]):
                self.expr(arg, where, f"{field}.args[{k}]", level + 1)
            return
        self.fail(where, field, 'expected an int, {"dim": [input, axis]} or {"op": ..., "args": [E, E]} but got '
                  + S.kind_of(e))

    def check_input_checks(self, checks):
        if not isinstance(checks, list) or len(checks) > MAX_CHECKS:
            self.fail("the file", "input_checks", f"expected a list of at most {MAX_CHECKS} checks")
        expression = _AnyValue(2 * MAX_DEPTH + 2)  # {"op", "args": [...]}: two JSON levels per expression level
        entry = S.Obj({"lhs": expression, "cmp": S.Enum(*_CMP), "rhs": expression, "guard": S.Text(1024),
                       "message": S.Text(4096)}, ["lhs", "cmp", "rhs", "guard", "message"])
        for i, check in enumerate(checks):
            where = f"input_checks[{i}]"
            self.match(entry, check, where, "", on_ref=_no_refs)
            self.expr(check["lhs"], where, "lhs")
            self.expr(check["rhs"], where, "rhs")

    def check_dynamic_dims(self, dims):
        self.match(S.Seq(S.Obj({"input": S.Int(0, 1 << 10), "axis": S.AXIS}, ["input", "axis"]), 0, 1 << 12),
                   dims, "the file", "dynamic_dims")
        for i, d in enumerate(dims):
            self.expr({"dim": [d["input"], d["axis"]]}, f"dynamic_dims[{i}]", "")


class _AnyValue(S.Spec):
    """Structure checked elsewhere (per kernel, per expression); bounded in JSON depth here."""

    def __init__(self, limit: int = MAX_DEPTH):
        self.limit = limit

    def check(self, value, on_ref):
        stack = [(value, 0)]
        while stack:
            item, level = stack.pop()
            if level > self.limit:
                raise S.SpecError(f"nested deeper than {self.limit} levels")
            if isinstance(item, dict):
                stack.extend((v, level + 1) for v in item.values())
            elif isinstance(item, list):
                stack.extend((v, level + 1) for v in item)

    def describe(self):
        return "a JSON value"


class _Attrs(_AnyValue):
    """A node's attrs: an object with short string keys; each value is checked against the kernel's spec later."""

    def check(self, value, on_ref):
        if not isinstance(value, dict) or len(value) > 256:
            self.fail(value)
        super().check(value, on_ref)

    def describe(self):
        return "an object of at most 256 attributes"


_ANY = _AnyValue()
_ATTRS = _Attrs()


def _no_refs(key, name):
    return None


_SIGNATURES: dict = {}


def _signature(fn):
    """(positional names, required count, *args?, keyword-only names, required keywords, **kwargs?)."""
    if fn not in _SIGNATURES:
        params = inspect.signature(fn).parameters.values()
        positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        required = sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                       and p.default is p.empty)
        kwonly = {p.name for p in params if p.kind == p.KEYWORD_ONLY}
        kw_required = sorted(p.name for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty)
        _SIGNATURES[fn] = (positional, required, any(p.kind == p.VAR_POSITIONAL for p in params), kwonly,
                           kw_required, any(p.kind == p.VAR_KEYWORD for p in params))
    return _SIGNATURES[fn]


def check_graph(graph, file: str = "graph.json") -> None:
    """Check a parsed ``graph.json`` as a whole; raise :class:`ArtifactError` naming ``file``, place and field."""
    _Checker(graph, file).run()
