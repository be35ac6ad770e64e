"""Exceptions raised by hsdiff.

Every problem a user can fix by changing the input is an :class:`HsdiffError`; the CLI prints
its message on one line and exits with status 2. Anything else escaping the library is a bug in
hsdiff itself (exit status 3)::

    HsdiffError                 user-fixable; message names the file and says what to do
    ├── InputError              a path, option or value given by the user is wrong
    │   └── ConfigError         a config.json is unreadable or lacks what is needed
    ├── FormatError             a file is not in any format hsdiff reads, or is damaged
    │   └── UnsafeFileError     a file would need arbitrary code to load (pickle globals, object arrays)
    └── AlignmentError          the two sides cannot be compared at all (no shared hidden size, ...)
"""

from __future__ import annotations

__all__ = [
    "HsdiffError",
    "InputError",
    "ConfigError",
    "FormatError",
    "UnsafeFileError",
    "AlignmentError",
]


class HsdiffError(Exception):
    """Base class of every error a user can fix by changing the input."""

    def __init__(self, message: str, *, path: object | None = None, hint: str | None = None):
        self.path = None if path is None else str(path)
        self.hint = hint
        self.detail = message
        super().__init__(self._compose())

    def _compose(self) -> str:
        text = f"{self.path}: {self.detail}" if self.path else self.detail
        if self.hint:
            text = f"{text} — {self.hint}"
        return text


class InputError(HsdiffError):
    """A path, option or value given by the user is wrong."""


class ConfigError(InputError):
    """A config.json cannot be read or lacks what is needed."""


class FormatError(HsdiffError):
    """A file is in no format hsdiff reads, or is damaged."""


class UnsafeFileError(FormatError):
    """A file would need arbitrary code (pickled globals, object arrays) to load; it was refused."""


class AlignmentError(HsdiffError):
    """The training and inference sides cannot be compared at all."""
