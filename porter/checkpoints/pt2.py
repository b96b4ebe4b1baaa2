"""What in a ``torch.export`` program (``.pt2``) would be unpickled when torch loads it, refused by name.

Reads the archive's JSON configs and tries its sample inputs with torch's weights-only unpickler, so that
``torch.export.load`` runs only on archives where nothing needs a code-running unpickler. The archive is read the
way torch's reader (``PyTorchFileReader``, miniz) reads it, not the way Python's ``zipfile`` does:

* records are the entries under the first entry's top-level folder;
* every record under ``models/`` is a model (``models/a/b.json`` is the model ``a/b``, not only ``models/x.json``);
* a record is looked up case-insensitively (miniz's default), so ``DATA/sample_inputs/model.pt`` is what torch
  reads for ``data/sample_inputs/model.pt``;
* names that collide (duplicates, or names equal but for case) are refused by ``detect.check_zip_names``: torch
  and ``zipfile`` would each pick a different one, and the one checked here need not be the one torch loads.

:func:`no_unpickling` then guards ``torch.export.load`` itself: any unpickling that is not weights-only raises
instead of running, whatever path inside torch asks for it.
"""

import zipfile
import zlib
from contextlib import contextmanager

from .errors import CheckpointError, first_line

_PT2_CONFIG_LIMIT = 64 << 20
_MODELS = "models/"


def refuse_pickled_entries(path: str) -> None:
    """Refuse a ``.pt2`` whose loading would unpickle something (without ``--trust-pickle``), naming the entry.

    ``torch.export.load`` unpickles weights and constants marked ``use_pickle`` (tensor subclasses), custom and
    opaque objects, legacy ``.pt`` weight files, and falls back to a full unpickler for ``sample_inputs`` that a
    weights-only load refuses. This reads the archive's JSON configs and tries the sample inputs with a weights-only
    unpickler first, so ``torch.export.load`` runs only on archives where none of that happens.
    """
    import io
    import json

    from .detect import check_zip_names

    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            check_zip_names(path, names)
            root = names[0].split("/", 1)[0] + "/" if names and "/" in names[0] else ""
            records = [n[len(root):] for n in names if n.startswith(root)]
            by_lower = {n[len(root):].lower(): n for n in names if n.startswith(root)}  # torch finds any case
            # torch's _load_exported_programs: every record under models/, the name between it and ".json"
            models = [n[len(_MODELS):-len(".json")] for n in records if n.startswith(_MODELS)]

            def find(name):
                return by_lower.get(name.lower())

            def read(name, limit=_PT2_CONFIG_LIMIT):
                info = archive.getinfo(find(name))
                if info.file_size > limit:
                    raise CheckpointError(f"Input file '{path}': entry '{name}' is {info.file_size} bytes, larger than "
                                          "a torch.export config can be.", "Save the program again.")
                return archive.read(info)

            for model in models:
                for legacy in (f"data/weights/{model}.pt", f"data/constants/{model}.pt"):
                    if find(legacy):
                        _refuse_pickle(path, legacy, "a legacy pickled weight file")
                for config_name in (f"data/weights/{model}_weights_config.json",
                                    f"data/constants/{model}_constants_config.json"):
                    if not find(config_name):
                        continue  # torch refuses the archive without it (nothing unpickled)
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
                if find(sample):
                    data = read(sample, 1 << 34)
                    if data:
                        _weights_only(path, sample, data, io)
    except (zipfile.BadZipFile, OSError, EOFError, KeyError, zlib.error) as exc:
        raise CheckpointError(f"Input file '{path}' is a damaged torch.export archive ({first_line(exc)}).",
                              "Save or copy it again.")


@contextmanager
def no_unpickling(path: str):
    """While the block runs (``torch.export.load`` of ``path``), every unpickling torch attempts is weights-only:
    ``torch.load(weights_only=False)``, ``pickle.loads`` in torch's pt2 reader and ``torch._C._pickle_load_obj``
    raise :class:`CheckpointError` instead of running. A second line behind :func:`refuse_pickled_entries`, for
    whatever path inside torch that check did not foresee."""
    import torch
    from torch.export.pt2_archive import _package

    real_load, real_obj, real_pickle = torch.load, torch._C._pickle_load_obj, _package.pickle

    def refuse(*_args, **_kwargs):
        _refuse_pickle(path, "an entry torch.export.load unpickles", "Python objects")

    def weights_only_load(f, *args, weights_only=None, **kwargs):
        if weights_only is False:
            refuse()
        return real_load(f, *args, weights_only=True, **kwargs)

    class _NoPickle:
        loads = load = staticmethod(refuse)

        def __getattr__(self, name):
            return getattr(real_pickle, name)

    torch.load, torch._C._pickle_load_obj, _package.pickle = weights_only_load, refuse, _NoPickle()
    try:
        yield
    finally:
        torch.load, torch._C._pickle_load_obj, _package.pickle = real_load, real_obj, real_pickle


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
