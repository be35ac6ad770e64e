"""The ``hsdiff`` click group: exit codes for every command, ``--debug``, logging."""

from __future__ import annotations

import errno
import importlib
import logging
import traceback
from typing import Any

import click

from ..errors import HsdiffError
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
            return super().invoke(ctx)
        except HsdiffError as e:
            click.echo(f"hsdiff: error: {e.in_terms(flag)}", err=True)
            ctx.exit(EXIT_INPUT)
        except click.BadParameter as e:
            if not isinstance(getattr(e.param, "type", None), click.Path):
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


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logging.")
@click.version_option(package_name="hsdiff")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Prove that an inference engine feeds an EAGLE-3 draft the hidden states it was trained on.

    \b
    Start with:
      hsdiff compare TRAIN_DUMP INFER_DUMP --layer-ids 2,30,58
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, format="hsdiff: %(message)s")
