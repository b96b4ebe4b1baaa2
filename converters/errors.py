"""Errors of the conversion itself that callers catch by type (torch-free: importable without torch)."""


class CaptureError(RuntimeError):
    """torch.export could not capture the model's forward at all (not even with static shapes); the torch
    exception is chained as ``__cause__``."""


class UnusedArraysWarning(UserWarning):
    """``porter.load``: the weights carry arrays outside every mapped layer that no node of the graph reads (an
    unused head torch kept in its ``state_dict``, or bytes smuggled beside the model); ``.names`` lists them,
    ``.path`` is the weights file. They are loaded and never used (``PortedModel.unused_params``)."""

    def __init__(self, message: str, path: str = "", names=()):
        super().__init__(message)
        self.path, self.names = path, list(names)
