"""What every command shares: --quiet/--json/--debug, progress on a terminal, errors as one paragraph.

Human output goes to stdout; progress goes to stderr and only when stderr is a terminal (never when piped, with
--quiet or with --json). With --json, stdout holds exactly one JSON document, also for errors.
"""

import functools
import json
import sys
import threading
import time
from contextlib import contextmanager

import click

from porter.checkpoints import CheckpointError
from porter.converters.safe_text import printable

from .errors import EXIT_INTERNAL, EXIT_INTERRUPTED, InputError, ValidationFailed, first_line


class UI:
    """Output settings of one command run."""

    def __init__(self, quiet=False, json_output=False, debug=False, command="porter"):
        self.quiet = quiet
        self.json = json_output
        self.debug = debug
        self.command = command
        self._progress = None

    def echo(self, text="", **kwargs):
        """Human-readable output (stdout); silent with --json."""
        if not self.json:
            click.echo(text, **kwargs)

    def info(self, text):
        """Side remarks (stderr); silent with --quiet or --json."""
        if not (self.quiet or self.json):
            # on a terminal, wipe the progress line first so the remark does not land in the middle of it
            click.echo(("\r\033[K" if self.show_progress else "") + text, err=True)

    def emit_json(self, payload):
        if self.json:
            click.echo(json.dumps(payload, indent=2, default=_json_default))

    @property
    def show_progress(self):
        return not (self.quiet or self.json) and _isatty(sys.stderr)

    def progress(self, labels):
        """A progress bar over named steps: ``with ui.progress([...]) as p: with p.step("converting"): ...``."""
        return Progress(labels, enabled=self.show_progress)


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _json_default(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return str(value)


class Progress:
    """A one-line progress bar on stderr, redrawn every 0.2 s so long steps show their elapsed time."""

    WIDTH = 24

    def __init__(self, labels, enabled):
        self.labels = list(labels)
        self.enabled = enabled
        self.done = 0
        self.current = ""
        self.started = time.monotonic()
        self.step_started = self.started
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = None

    def __enter__(self):
        if self.enabled:
            self._thread = threading.Thread(target=self._tick, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            with self._lock:
                click.echo("\r\033[K", err=True, nl=False)
        return False

    @contextmanager
    def step(self, label):
        with self._lock:
            self.current = label
            self.step_started = time.monotonic()
        yield
        with self._lock:
            self.done += 1

    def _tick(self):
        while not self._stop.wait(0.2):
            with self._lock:
                total = max(len(self.labels), 1)
                filled = int(self.WIDTH * min(self.done, total) / total)
                bar = "#" * filled + "-" * (self.WIDTH - filled)
                elapsed = time.monotonic() - self.step_started
                click.echo(f"\r\033[K[{bar}] {min(self.done + 1, total)}/{total} {self.current} "
                           f"({elapsed:.1f} s)", err=True, nl=False)


#: ``--seed``: any non-negative int (numpy's and torch's generators refuse negative seeds).
SEED = click.IntRange(0, (1 << 63) - 1)


class Tolerance(click.ParamType):
    """``--rtol``/``--atol``: a finite number >= 0 (``nan`` would fail every comparison, ``inf`` pass every one)."""

    name = "tolerance"

    def convert(self, value, param, ctx):
        import math

        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number (e.g. 1e-4).", param, ctx)
        if not math.isfinite(number) or number < 0:
            self.fail(f"{value!r} must be a finite number >= 0 (e.g. 1e-4).", param, ctx)
        return number


def common_options(json_flag=True, quiet_short=True):
    """--quiet (also -q unless ``quiet_short`` is False: convert's -q is --quantize, as in mlx-lm's convert), --json
    (a flag; validate defines its own --json PATH) and --debug, passed as ``ui``."""
    quiet_names = ("-q", "--quiet") if quiet_short else ("--quiet",)

    def decorate(func):
        @click.option("--debug", is_flag=True, help="Show the full traceback when something fails.")
        @click.option(*quiet_names, "quiet", is_flag=True, help="No progress or remarks; results and errors only.")
        @functools.wraps(func)
        def wrapper(*args, quiet, debug, **kwargs):
            json_output = kwargs.pop("json_output", False) if json_flag else bool(kwargs.get("json_report"))
            json_to_stdout = json_output if json_flag else kwargs.get("json_report") == "-"
            ctx = click.get_current_context()
            ui = UI(quiet=quiet, json_output=json_to_stdout, debug=debug, command=ctx.command_path)
            with library_noise(debug):
                return run_reporting_errors(ui, lambda: func(ui, *args, **kwargs))

        if json_flag:
            wrapper = click.option("--json", "json_output", is_flag=True,
                                   help="Print one machine-readable JSON document on stdout instead of text.")(
                wrapper)
        return wrapper

    return decorate


@contextmanager
def library_noise(debug: bool):
    """Hide torch's (and other libraries') warnings and log records unless --debug: a failing input must end in
    Porter's one paragraph, not a library traceback printed before it."""
    if debug:
        yield
        return
    import logging
    import warnings

    previous = logging.root.manager.disable
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.filterwarnings("default", module=r"porter(\.|$)")  # Porter's own hints (build the kernels) stay
        logging.disable(logging.CRITICAL)
        try:
            yield
        finally:
            logging.disable(previous)


def run_reporting_errors(ui, run):
    """Call ``run()``; turn every failure into one paragraph and the right exit status (traceback with --debug)."""
    try:
        return run()
    except (InputError, ValidationFailed) as exc:
        if not getattr(exc, "already_reported", False):
            ui.emit_json(exc.to_dict())
        raise
    except CheckpointError as exc:  # porter.checkpoints' errors are input errors: same paragraph, exit 2
        converted = InputError.from_checkpoint_error(exc)
        ui.emit_json(converted.to_dict())
        raise converted from exc
    except (click.exceptions.Exit, click.Abort, click.UsageError):
        raise
    except KeyboardInterrupt:
        # the atomic output has already removed anything half-written on its way out
        click.echo("\nInterrupted: nothing was written.", err=True)
        raise click.exceptions.Exit(EXIT_INTERRUPTED)
    except Exception as exc:
        converted = _known_library_error(exc)
        if converted is not None:
            ui.emit_json(converted.to_dict())
            if ui.debug:
                raise converted from exc
            raise converted
        if ui.debug:
            raise
        message = (f"{ui.command} failed unexpectedly with {type(exc).__name__}: {printable(first_line(exc))}. "
                   "This is a bug in Porter, not in your input: re-run with --debug for the traceback and report it.")
        ui.emit_json({"ok": False, "exit_code": EXIT_INTERNAL, "error": message})
        error = click.ClickException(message)
        error.exit_code = EXIT_INTERNAL
        raise error


def _known_library_error(exc):
    """Errors from porter's library that are about the user's model, reported as input errors (exit 2)."""
    if type(exc).__name__ == "UnsupportedOpsError":
        ops = list(getattr(exc, "ops", []) or [])
        return InputError(f"The model uses {len(ops)} operation(s) Porter cannot convert yet (all listed below).",
                          "Replace them in the model, or open an issue naming them.",
                          [str(op) for op in ops] or [first_line(exc)])
    return None
