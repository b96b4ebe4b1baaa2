"""The one error ``porter.checkpoints`` raises for a bad checkpoint, architecture or input shape."""


class CheckpointError(ValueError):
    """A problem with a checkpoint file or the arguments describing it: says what, naming the file or argument,
    and what to do.

    Messages name the ``porter`` command's options (``--model``, ``--arch``, ``--input-shape``,
    ``--trust-pickle``); in Python they are the keyword arguments of the same names (``model``, ``arch``,
    ``input_shapes``, ``trust_pickle``). The command line prints the same paragraph and exits with status
    :attr:`exit_code` (2, a usage or input error).

    Args:
        what (str): what went wrong, naming the file or argument.
        hint (str, optional): what to do about it. Default: ``""``.
        details (list[str], optional): items listed below the paragraph (e.g. every missing key). Default: none.
    """

    exit_code = 2

    def __init__(self, what: str, hint: str = "", details=None):
        self.what = what
        self.hint = hint
        self.details = list(details or [])
        super().__init__(self.render())

    def render(self) -> str:
        """The paragraph: what, then the hint, then one ``  - item`` line per detail."""
        text = self.what.rstrip()
        if self.hint:
            text += " " + self.hint.rstrip()
        for line in self.details:
            text += "\n  - " + line
        return text


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first meaningful line of an exception's message, for embedding in our own paragraph."""
    text = str(exc).strip() or type(exc).__name__
    line = text.splitlines()[0].strip().rstrip(".")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def torch_error_line(exc: BaseException) -> str:
    """``Type: message`` of a torch error; TorchScript wraps the real one after an interpreter traceback."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in reversed(lines):
        if "Error: " in line and not line.startswith("File "):
            return line if len(line) <= 300 else line[:297] + "..."
    return f"{type(exc).__name__}: {first_line(exc)}"
