"""Where the repository is, for code that starts another Python process.

pytest puts the repository root on ``sys.path`` (``tests/`` is a package, default ``prepend`` import mode), so in
the test process ``tests.cli.tinynets`` and every ``tests.*`` helper import by their qualified names. A subprocess
does not inherit ``sys.path``: it gets the root through ``PYTHONPATH`` from :func:`repo_env`, never through its
working directory.
"""

from __future__ import annotations

import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def repo_env(env: dict | None = None, **extra: str) -> dict:
    """``env`` (default: ``os.environ``) plus ``extra``, with :data:`REPO_ROOT` first on ``PYTHONPATH``."""
    out = {**(os.environ if env is None else env), **extra}
    out["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, out.get("PYTHONPATH", "")) if p)
    return out
