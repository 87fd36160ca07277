"""The typer app every command module registers on; kept apart so modules don't import each other."""

from typing import Any

import typer

from kernelloop import __version__


class _App(typer.Typer):
    """A bad setting found deep in a command (a ConfigError) is still one line and exit 2, never a traceback."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from kernelloop.settings import ConfigError  # lazy: --help needs no pydantic-settings

        try:
            return super().__call__(*args, **kwargs)
        except ConfigError as exc:
            from kernelloop.cli._common import fail_usage

            try:
                fail_usage(str(exc))
            except typer.Exit as done:
                raise SystemExit(done.exit_code) from None


app = _App(
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
