"""The ``hsdiff`` command line: a thin layer over the library, one module per command (``compare``,
``gate``, ``check-config``, ``ids``, ``fix-config``, ``request``, ``capture``, ``audit``, ``watch``,
``inspect``), each registered on the group in :mod:`._group` when it is run; shared options in
:mod:`._options` and :mod:`._ci`.

Exit status (every command): 0 consistent, 1 mismatch or inconclusive, 2 bad input or usage
(one line, no traceback), 3 an internal error (a bug in hsdiff; ``--debug`` shows the traceback).
"""

from __future__ import annotations

import os

# One BLAS thread: hsdiff runs its own threads where they pay, and OpenBLAS's pool, started with numpy,
# spins on the other cores meanwhile (figures: benchmarks/results/timings.md). Set before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from ._group import EXIT_BUG, EXIT_FAIL, EXIT_INPUT, EXIT_OK, cli  # each command's module is loaded when it runs

__all__ = ["cli", "main", "EXIT_OK", "EXIT_FAIL", "EXIT_INPUT", "EXIT_BUG"]


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    _keep_freed_memory()
    _allow_open_files()
    cli.main(args=argv, prog_name="hsdiff")


def _allow_open_files() -> None:
    """Raise the soft limit of open files to the hard one: a training set of thousands of files, each
    memory-mapped, exceeds the usual 1024 (the process's own setting, as for the allocator)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = 1 << 20 if hard == resource.RLIM_INFINITY else min(hard, 1 << 20)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ImportError, ValueError, OSError):  # not POSIX, or not allowed: the limit stays
        pass


def _keep_freed_memory() -> None:
    """Let glibc's allocator reuse the buffers a comparison frees (up to 16 MB each, 64 MB kept free)
    instead of returning each to the system and faulting it in again: page faults were a sixth of a
    compare's time on a 4 GB dump here. The process's own setting, so the command line's, not the
    library's."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return
    mallopt(-3, 16 << 20)  # M_MMAP_THRESHOLD
    mallopt(-1, 64 << 20)  # M_TRIM_THRESHOLD


if __name__ == "__main__":  # pragma: no cover
    main()
