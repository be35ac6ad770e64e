"""The ``hsdiff`` click group: exit codes for every command, ``--debug``, logging."""

from __future__ import annotations

import errno
import importlib
import logging
import sys
import traceback
from typing import Any

import click

from ..errors import HsdiffError
from ..progress import close_all
from . import _config
from ._help import GroupedCommand

EXIT_OK, EXIT_FAIL, EXIT_INPUT, EXIT_BUG = 0, 1, 2, 3
#: OS errors that say something of the machine or the paths given (exit 2), not of hsdiff (exit 3)
_ENVIRONMENT = {
    errno.EACCES,
    errno.EPERM,
    errno.ENOTDIR,
    errno.EISDIR,
    errno.EROFS,
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EMFILE,
    errno.ENFILE,
    errno.ENOENT,
    errno.ELOOP,
    errno.ENAMETOOLONG,
}

#: Each command and the module that registers it, imported when the command is run (or listed by
#: ``--help``): ``hsdiff compare`` never loads what ``audit`` or ``capture`` need.
COMMANDS = {
    "compare": "compare",
    "gate": "gate",
    "check-config": "check_config",
    "ids": "ids",
    "fix-config": "fix_config",
    "request": "request",
    "capture": "capture",
    "audit": "audit",
    "inspect": "inspect",
    "fingerprint": "fingerprint",
    "watch": "watch",
}


#: Library parameters a flag of another name sets (every other ``name_x`` is set by ``--name-x``).
FLAGS = {"fmt": "--format", "target": "--target-model"}


def flag(name: str) -> str:
    """The flag that sets the library parameter ``name``: how an error's options are said here."""
    return FLAGS.get(name, "--" + name.replace("_", "-"))


class _Group(click.Group):
    """Maps library exceptions to exit codes so that a crash is never read as a verdict; loads each
    command's module when the command is asked for."""

    command_class = GroupedCommand

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        super().add_command(verbosity_options(cmd), name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in COMMANDS:
            importlib.import_module(f"{__package__}.{COMMANDS[name]}")
        return super().get_command(ctx, name)

    def load_all(self) -> dict[str, click.Command]:
        """Every command, loaded (for tools and tests that walk them all)."""
        for module in COMMANDS.values():
            importlib.import_module(f"{__package__}.{module}")
        return dict(self.commands)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            try:
                return super().invoke(ctx)
            finally:
                close_all()  # a bar an error cut short: cleared before the error is printed
        except HsdiffError as e:
            click.echo(f"hsdiff: error: {e.in_terms(flag)}", err=True)
            ctx.exit(EXIT_INPUT)
        except click.BadParameter as e:
            if isinstance(e, click.MissingParameter) or not isinstance(getattr(e.param, "type", None), click.Path):
                raise
            # a path click itself refused (unreadable, ...): an input error like any other, on one line
            click.echo(f"hsdiff: error: {e.format_message()} — check the path and its permissions", err=True)
            ctx.exit(EXIT_INPUT)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            click.echo("hsdiff: interrupted", err=True)
            ctx.exit(130)
        except OSError as e:
            if e.errno not in _ENVIRONMENT:
                raise
            # the machine, not hsdiff: a folder it may not write, a full disk, the open-file limit
            hint = (
                "raise the limit (ulimit -n) or compare fewer files at once"
                if e.errno in (errno.EMFILE, errno.ENFILE)
                else "check the path, its permissions and free space"
            )
            where = f": {e.filename}" if e.filename else ""
            click.echo(f"hsdiff: error: {e.strerror}{where} — {hint}", err=True)
            ctx.exit(EXIT_INPUT)
        except MemoryError:
            click.echo("hsdiff: error: out of memory while reading the dumps — compare fewer samples at once", err=True)
            ctx.exit(EXIT_INPUT)
        except Exception as e:  # noqa: BLE001 - the last line of defence
            debug = bool(ctx.obj and ctx.obj.get("debug"))
            if debug:
                traceback.print_exc()
            click.echo(
                f"hsdiff: internal error: {type(e).__name__}: {e}\n"
                "This is a bug in hsdiff, not a verdict. Please report it with the command line"
                + ("" if debug else " and the output of the same command with --debug")
                + ".",
                err=True,
            )
            ctx.exit(EXIT_BUG)


def _flags(ctx: click.Context) -> dict[str, str]:
    """The command line's name of each API parameter of the command run (``hidden_size`` -> ``--hidden-size``)."""
    command = ctx.command.commands.get(ctx.invoked_subcommand or "") if isinstance(ctx.command, click.Group) else None
    return {
        p.name: max(p.opts, key=len)
        for p in (command.params if command else ())
        if isinstance(p, click.Option) and p.name
    }


#: Loggers of the libraries hsdiff runs on whose INFO lines say nothing to a user (a local Dask cluster
#: logs 34 of them per audit): shown from WARNING on, unless --debug.
CHATTY = ("distributed", "dask", "tornado", "asyncio", "bokeh", "fsspec", "urllib3", "matplotlib", "PIL")


class _LogHandler(logging.Handler):
    """Log records as ``hsdiff: message`` on the stderr of the moment (click's test runner swaps it)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("hsdiff: %(message)s"))
        self.debug = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.debug and record.levelno < logging.WARNING and record.name.split(".")[0] in CHATTY:
            return False
        return super().filter(record)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - as logging's own handlers: a log line never fails the command
            self.handleError(record)


def configure_logging(obj: dict) -> None:
    """The root logger as the verbosity flags in ``obj`` ask: ``--debug`` DEBUG (every library's),
    ``-v`` INFO, ``-q`` ERROR, else WARNING. Left alone when something else (a test runner, an
    application embedding hsdiff) already handles the root logger's records."""
    root = logging.getLogger()
    ours = next((h for h in root.handlers if isinstance(h, _LogHandler)), None)
    if ours is None:
        if root.handlers:
            return
        ours = _LogHandler()
        root.addHandler(ours)
    debug = bool(obj.get("debug"))
    ours.debug = debug
    root.setLevel(
        logging.DEBUG
        if debug
        else logging.INFO
        if obj.get("verbose")
        else logging.ERROR
        if obj.get("quiet")
        else logging.WARNING
    )


def _verbosity(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """``--debug``, ``-v`` and ``-q``, before the command or after it: noted for the whole run."""
    if value and param.name:
        obj = ctx.find_root().ensure_object(dict)
        obj[param.name] = True
        configure_logging(obj)
    return value


def verbosity_options(command: click.Command) -> click.Command:
    """``--debug``, ``-v/--verbose`` and ``-q/--quiet`` on ``command`` too (each where it has no option of
    that name): ``hsdiff compare ... --debug`` as ``hsdiff --debug compare ...``. A command's own ``-q``
    keeps its meaning (a shorter report) and counts as the run's ``-q`` as well."""
    for decls, help_text in _VERBOSITY:
        own = next((p for p in command.params if isinstance(p, click.Option) and set(p.opts) & set(decls)), None)
        if own is None:
            command.params.append(
                click.Option(decls, is_flag=True, expose_value=False, callback=_verbosity, help=help_text)
            )
        elif own.callback is None and own.is_flag and own.name == decls[-1].lstrip("-"):
            own.callback = _verbosity
    return command


_VERBOSITY = (
    (("--debug",), "Show tracebacks and debug logging (Dask's too)."),
    (("-v", "--verbose"), "Log what hsdiff does (INFO)."),
    (("-q", "--quiet"), "Print less: errors only in the log, no progress bars."),
)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--debug", is_flag=True, callback=_verbosity, help=_VERBOSITY[0][1])
@click.option("-v", "--verbose", is_flag=True, callback=_verbosity, help=_VERBOSITY[1][1])
@click.option(
    "-q",
    "--quiet",
    is_flag=True,
    callback=_verbosity,
    help="Print less: the short form of each command's report, errors only in the log, no progress bars.",
)
@click.version_option(package_name="hsdiff")
@click.pass_context
def cli(ctx: click.Context, debug: bool, verbose: bool, quiet: bool) -> None:
    """Prove that an inference engine feeds an EAGLE-3 draft the hidden states it was trained on.

    \b
    Start with:
      hsdiff compare TRAIN_DUMP INFER_DUMP --layer-ids 2,30,58

    --debug, -v and -q may also follow the command.
    """
    obj = ctx.ensure_object(dict)
    defaults: dict[str, dict[str, Any]] = {name: dict(d) for name, d in (ctx.default_map or {}).items()}
    if ctx.invoked_subcommand in _config.COMMANDS:  # hsdiff.toml or [tool.hsdiff], from the cwd upward
        found = _config.find()
        if found is not None:
            obj["config_file"] = found[0]
            for name, values in _config.default_map(ctx, *found).items():
                defaults[name] = {**values, **defaults.get(name, {})}
    if quiet:  # the commands' own -q (a shorter report) defaults to on
        for name in COMMANDS:
            defaults.setdefault(name, {})["quiet"] = True
    ctx.default_map = defaults or None
    configure_logging(obj)


def quiet_run() -> bool:
    """Whether this run was asked to print less (``-q`` before or after the command)."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and (ctx.find_root().obj or {}).get("quiet"))
