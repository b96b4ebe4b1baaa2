"""What each ``graph.json`` format version added, and the version a graph needs to hold what it records.

A file says which format it is (``format_version``, 1 to :data:`schema.FORMAT_VERSION` load). One that records
something its version did not have (``dtype_follows`` under a version-5 header, a ``drop_block`` node under version
1) was not written by the Porter it names: ``converters/schema.py`` refuses it, naming the place and the field.
``porter.save`` writes the version its graph needs (:func:`needed_version`), so a model loaded from an older folder
keeps its version until it gains a newer feature (a layer quantized since, say).

Only features whose version is known are listed: a key or kernel not here is taken as present since version 1.
"""

from __future__ import annotations

# top-level keys of graph.json
KEYS = {"modules": 2, "module_types": 2, "compute_dtype": 2, "tied_weights": 2, "output_tree": 2, "signature": 3,
        "train_refusals": 4, "train_state": 4, "dtype_follows": 6, "float32_constants": 6,
        "train_graph": 7}
# a graph input's key (a 0-d value repeated to a 1-d input's size; written by version 2's Porter, as the three keys
# above: added after the bump to 2, with no bump of their own)
INPUT_FIELDS = {"scalar_size": 2}
# runtime kernels of nodes ("call_module": a node calling a layer of the module tree)
KERNELS = {"call_module": 2, "tensor_from_scalars": 4, "broadcast_all": 4, "addbmm": 4, "pdist": 4,
           "batch_norm_batch_stats": 4, "stochastic_depth": 5, "train_dropout": 5, "sdpa_dropout": 5,
           "drop_block": 6}
# a node's attribute, recorded (sdpa's grouped-query flag, written only when set) or null (group_norm over a channel
# count known at run time): both from the session-11 converters that version 4 announced
NODE_ATTRS = {("sdpa", "gqa"): 4}
NULL_ATTRS = {("group_norm", "groups"): 4}
# layer types and a layer config's keys; version 4's came with its training mode (TorchDropout, TorchRReLU, the
# instance norm's running statistics), Embedding's padding_idx after version 5
LAYER_TYPES = {"TorchDropout": 4, "TorchRReLU": 4, "StochasticDepth": 5}
LAYER_FIELDS = {("InstanceNorm", "momentum"): 4, ("InstanceNorm", "track_running_stats"): 4,
                ("Embedding", "padding_idx"): 5, ("BatchNorm", "count_batches"): 6}
PARAM_FIELDS = {"state_dict": 3}  # a params entry's key


def features(graph: dict):
    """``(version, where, field)`` for each recorded feature newer than version 1, in file order. ``graph`` has
    passed the schema's structure checks (``where`` and ``field`` as :class:`schema.ArtifactError` names them)."""
    for key in graph:
        if key in KEYS:
            yield KEYS[key], "the file", key
    for i, entry in enumerate(graph.get("inputs", [])):
        for key in entry:
            if key in INPUT_FIELDS:
                yield INPUT_FIELDS[key], f"input {i} ({entry['name'][:80]!r})", key
    for name, entry in graph.get("params", {}).items():
        for key in entry:
            if key in PARAM_FIELDS:
                yield PARAM_FIELDS[key], f"params[{name[:80]!r}]", key
    for path, entry in graph.get("modules", {}).items():
        where = f"modules[{path[:80]!r}]"
        if entry["type"] in LAYER_TYPES:
            yield LAYER_TYPES[entry["type"]], where, "type"
        for key in entry["config"]:
            if (entry["type"], key) in LAYER_FIELDS:
                yield LAYER_FIELDS[entry["type"], key], where, f"config.{key}"
    for i, node in enumerate(graph.get("nodes", [])):
        where = f"node {i} (kernel {node['kernel'][:40]!r})"
        if node["kernel"] in KERNELS:
            yield KERNELS[node["kernel"]], where, "kernel"
        for key, value in node["attrs"].items():
            if (node["kernel"], key) in NODE_ATTRS:
                yield NODE_ATTRS[node["kernel"], key], where, f"attrs.{key}"
            if value is None and (node["kernel"], key) in NULL_ATTRS:
                yield NULL_ATTRS[node["kernel"], key], where, f"attrs.{key}"


def needed_version(graph: dict) -> int:
    """The oldest format version that holds everything ``graph`` records (1 for none of the listed features)."""
    return max((version for version, _, _ in features(graph)), default=1)
