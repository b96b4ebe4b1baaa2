"""Errors the command line reports as one paragraph, and the exit statuses it uses.

Exit statuses (documented in ``porter --help``):
  0  success
  1  validation failed (the converted model is outside tolerance)
  2  usage or input error (bad argument, unreadable or unsupported checkpoint, output not writable)
  3  internal error (a bug in Porter: re-run with --debug and report the traceback)
  130 interrupted (Ctrl-C); nothing was written
"""

import click

from porter.checkpoints import CheckpointError
from porter.checkpoints.errors import first_line, torch_error_line  # noqa: F401  (re-exported for the commands)
from porter.converters.safe_text import printable_lines

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
        # the text may quote a stranger's file (a guard's message in graph.json): no terminal controls reach the screen
        self.what = printable_lines(what)
        self.hint = printable_lines(hint)
        self.details = [printable_lines(line) for line in details or []]
        super().__init__(self.render())

    @classmethod
    def from_checkpoint_error(cls, exc: CheckpointError) -> "InputError":
        """The same paragraph, from ``porter.checkpoints``' error."""
        return cls(exc.what, exc.hint, exc.details)

    render = CheckpointError.render  # one paragraph layout for the library's errors and the command's

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
