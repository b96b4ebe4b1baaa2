"""Errors the command line reports as one paragraph, and the exit statuses it uses.

Exit statuses (documented in ``porter --help``):
  0  success
  1  validation failed (the converted model is outside tolerance)
  2  usage or input error (bad argument, unreadable or unsupported checkpoint, output not writable)
  3  internal error (a bug in Porter: re-run with --debug and report the traceback)
  130 interrupted (Ctrl-C); nothing was written
"""

import click

EXIT_OK = 0
EXIT_VALIDATION = 1
EXIT_INPUT = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130


class InputError(click.ClickException):
    """A problem with what the user gave us: says what, which file/argument, and what to do.

    Args:
        what (str): what went wrong, naming the file or argument.
        hint (str, optional): what to do about it.
        details (list[str], optional): items listed below the paragraph (e.g. every missing key).
    """

    exit_code = EXIT_INPUT

    def __init__(self, what: str, hint: str = "", details=None):
        self.what = what
        self.hint = hint
        self.details = list(details or [])
        super().__init__(self.render())

    def render(self) -> str:
        text = self.what.rstrip()
        if self.hint:
            text += " " + self.hint.rstrip()
        for line in self.details:
            text += "\n  - " + line
        return text

    def to_dict(self) -> dict:
        return {"ok": False, "exit_code": self.exit_code, "error": self.what, "hint": self.hint,
                "details": self.details}


class ValidationFailed(click.ClickException):
    """The converted model does not match torch within tolerance (exit status 1)."""

    exit_code = EXIT_VALIDATION

    def __init__(self, message: str, report=None):
        super().__init__(message)
        self.report = report

    def to_dict(self) -> dict:
        report = self.report.to_dict() if self.report is not None else None
        return {"ok": False, "exit_code": self.exit_code, "error": self.message, "validation": report}


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
