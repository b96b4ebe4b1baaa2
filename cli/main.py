"""Entry point of the ``porter`` command."""

import click

from porter import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="porter")
def main() -> None:
    """Port PyTorch models to MLX: convert, validate, inspect, benchmark."""


from porter.cli.doctor import doctor  # noqa: E402

main.add_command(doctor)

if __name__ == "__main__":
    main()
