import os
import sys

# `--model tinynets:tiny_net` must import the test models, in-process (CliRunner) and in subprocesses.
HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import pytest  # noqa: E402
from click.testing import CliRunner  # noqa: E402


@pytest.fixture
def runner():
    return CliRunner()
