"""The typer app every command module registers on; kept apart so modules don't import each other."""

import typer

from kernelloop import __version__

app = typer.Typer(
    name="kernelloop",
    help="Turn PyTorch reference modules into fast, verified GPU kernels.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish, PowerShell
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        print(f"kernelloop {__version__}")
        raise typer.Exit(0)


@app.callback()
def main(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                      help="print the version and exit")) -> None:
    """kernelloop: PyTorch reference in, fast verified GPU kernel out."""
