"""The typer app every command module registers on; kept apart so modules don't import each other."""

from typing import Any

import typer

from kernelloop import __version__


class _App(typer.Typer):
    """A bad setting found deep in a command (a ConfigError) is still one line and exit 2, never a traceback."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from kernelloop.config.settings import ConfigError  # lazy: --help needs no pydantic-settings

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


def escape_help(typer_app: typer.Typer) -> None:
    """Help text shown as written: Rich would read `kernelloop[ray]` or `[default: 15m]` as markup and drop
    the brackets. Every command's help, epilog and parameter help is escaped once, after registration."""
    import inspect

    from rich.markup import escape

    for command in typer_app.registered_commands:
        if command.callback is None:
            continue
        command.help = escape(command.help or inspect.getdoc(command.callback) or "")
        command.epilog = escape(command.epilog) if command.epilog else None
        for parameter in inspect.signature(command.callback).parameters.values():
            info = parameter.default
            if isinstance(info, typer.models.ParameterInfo) and info.help and not getattr(info, "_escaped", False):
                info.help = escape(info.help)
                info._escaped = True  # type: ignore[attr-defined]  # shared OptionInfo objects: escape once
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            escape_help(group.typer_instance)
