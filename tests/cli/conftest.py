# `--model tests.cli.tinynets:tiny_net` imports the test models: in-process (CliRunner) through the repository root
# that pytest puts on sys.path (tests/ is a package), in subprocesses through `tests.paths.repo_env()`.
import pytest
from click.testing import CliRunner


@pytest.fixture
def runner():
    return CliRunner()
