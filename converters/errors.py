"""Errors of the conversion itself that callers catch by type (torch-free: importable without torch)."""


class CaptureError(RuntimeError):
    """torch.export could not capture the model's forward at all (not even with static shapes); the torch
    exception is chained as ``__cause__``."""
