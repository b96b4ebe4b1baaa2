"""What in a ``torch.export`` program (``.pt2``) would be unpickled when torch loads it, refused by name.

Reads the archive's JSON configs and tries its sample inputs with torch's weights-only unpickler, so that
``torch.export.load`` runs only on archives where nothing needs a code-running unpickler.
"""

import zipfile
import zlib

from .errors import CheckpointError, first_line

_PT2_CONFIG_LIMIT = 64 << 20


def refuse_pickled_entries(path: str) -> None:
    """Refuse a ``.pt2`` whose loading would unpickle something (without ``--trust-pickle``), naming the entry.

    ``torch.export.load`` unpickles weights and constants marked ``use_pickle`` (tensor subclasses), custom and
    opaque objects, legacy ``.pt`` weight files, and falls back to a full unpickler for ``sample_inputs`` that a
    weights-only load refuses. This reads the archive's JSON configs and tries the sample inputs with a weights-only
    unpickler first, so ``torch.export.load`` runs only on archives where none of that happens.
    """
    import io
    import json

    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            root = names[0].split("/", 1)[0] + "/" if names and "/" in names[0] else ""
            inner = {n[len(root):]: n for n in names if n.startswith(root)}
            models = [n[len("models/"):-len(".json")] for n in inner
                      if n.startswith("models/") and n.endswith(".json") and "/" not in n[len("models/"):]]

            def read(name, limit=_PT2_CONFIG_LIMIT):
                info = archive.getinfo(inner[name])
                if info.file_size > limit:
                    raise CheckpointError(f"Input file '{path}': entry '{name}' is {info.file_size} bytes, larger than "
                                          "a torch.export config can be.", "Save the program again.")
                return archive.read(inner[name])

            for model in models:
                for legacy in (f"data/weights/{model}.pt", f"data/constants/{model}.pt"):
                    if legacy in inner:
                        _refuse_pickle(path, legacy, "a legacy pickled weight file")
                for config_name in (f"data/weights/{model}_weights_config.json",
                                    f"data/constants/{model}_constants_config.json"):
                    if config_name not in inner:
                        continue
                    try:
                        config = json.loads(read(config_name)).get("config", {})
                        entries = list(config.items())
                    except (ValueError, AttributeError, RecursionError):
                        raise CheckpointError(f"Input file '{path}': '{config_name}' is not a valid torch.export "
                                              "config.", "Save the program again.") from None
                    for fqn, meta in entries:
                        file = str(meta.get("path_name", "")) if isinstance(meta, dict) else ""
                        if not isinstance(meta, dict) or meta.get("use_pickle"):
                            _refuse_pickle(path, f"{config_name}: {str(fqn)[:80]}", "a pickled tensor")
                        if file.startswith(("custom_obj_", "opaque_obj_")):
                            _refuse_pickle(path, f"{config_name}: {str(fqn)[:80]}", "a pickled Python object")
                sample = f"data/sample_inputs/{model}.pt"
                if sample in inner:
                    data = read(sample, 1 << 34)
                    if data:
                        _weights_only(path, sample, data, io)
    except (zipfile.BadZipFile, OSError, EOFError, KeyError, zlib.error) as exc:
        raise CheckpointError(f"Input file '{path}' is a damaged torch.export archive ({first_line(exc)}).",
                              "Save or copy it again.")


def _weights_only(path, entry, data, io):
    import torch

    try:
        torch.load(io.BytesIO(data), weights_only=True)
    except Exception:  # noqa: BLE001  (UnpicklingError for other objects, anything for damaged bytes)
        _refuse_pickle(path, entry, "sample inputs that only a full (code-running) unpickler can read")


def _refuse_pickle(path, entry, what):
    raise CheckpointError(f"Input file '{path}' holds {what} ('{entry}'): reading it would unpickle Python objects, "
                          "which runs code chosen by whoever wrote the file.",
                          "If you wrote this file yourself or trust its source, re-run with --trust-pickle; otherwise "
                          "ask for a program exported from plain tensors (torch.export.save of a model without tensor "
                          "subclasses or custom objects).")
