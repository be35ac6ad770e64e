"""The ``hsdiff`` command line: a thin layer over the library, one module per command (``compare``,
``gate``, ``check-config``, ``ids``, ``fix-config``, ``request``, ``capture``, ``audit``, ``inspect``), each registered on the
group in :mod:`._group` when it is run; shared options in :mod:`._options` and :mod:`._ci`.

Exit status (every command): 0 consistent, 1 mismatch or inconclusive, 2 bad input or usage
(one line, no traceback), 3 an internal error (a bug in hsdiff; ``--debug`` shows the traceback).
"""

from __future__ import annotations

from ._group import EXIT_BUG, EXIT_FAIL, EXIT_INPUT, EXIT_OK, cli  # each command's module is loaded when it runs

__all__ = ["cli", "main", "EXIT_OK", "EXIT_FAIL", "EXIT_INPUT", "EXIT_BUG"]


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    cli.main(args=argv, prog_name="hsdiff")


if __name__ == "__main__":  # pragma: no cover
    main()
