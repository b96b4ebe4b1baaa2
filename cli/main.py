"""Entry point of the ``porter`` command."""

import click

from porter import __version__

from .bench import bench
from .convert import convert
from .doctor import doctor
from .export import export
from .inspect import inspect
from .kernels import build_kernels
from .update import update
from .validate import validate
from .zoo import zoo

EPILOG = """\b
Start here:  porter convert --example resnet18
Exit status: 0 success, 1 validation failed, 2 usage or input error, 3 internal error (a bug: re-run with
--debug), 130 interrupted.
"""


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EPILOG)
@click.version_option(__version__, prog_name="porter")
@click.option("--max-graph-bytes", type=click.IntRange(min=1), default=None, metavar="N",
              help="Bytes of arrays one call of a loaded port may hold alive at once (a crafted graph.json is refused "
                   "over it). Default: 16 GiB.")
@click.option("--max-graph-macs", type=click.IntRange(min=1), default=None, metavar="N",
              help="Multiply-adds one call of a loaded port may compute. Default: 2**43.")
def main(max_graph_bytes, max_graph_macs) -> None:
    """Port PyTorch models to MLX: convert, validate, inspect, benchmark, export, update weights."""
    if max_graph_bytes is not None or max_graph_macs is not None:  # imports MLX: only when asked
        from porter.converters.graph_budget import set_default_limits

        set_default_limits(max_graph_bytes, max_graph_macs)


main.add_command(convert)
main.add_command(validate)
main.add_command(inspect)
main.add_command(bench)
main.add_command(export)
main.add_command(update)
main.add_command(zoo)
main.add_command(doctor)
main.add_command(build_kernels)

if __name__ == "__main__":
    main()
