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

import re
from collections.abc import Mapping

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

    def __init__(self, message: str, *, path: object | None = None, hint: str | None = None,
                 params: tuple[str, ...] = ()):
        self.path = None if path is None else str(path)
        self.hint = hint
        self.detail = message
        #: the API parameters (``compare(hidden_size=...)``) the message names, for a front end to word as its own
        self.params = params
        super().__init__(self._compose())

    def _compose(self, names: Mapping[str, str] | None = None) -> str:
        text = f"{self.path}: {self.detail}" if self.path else self.detail
        if self.hint:
            text = f"{text} — {self.hint}"
        for param in self.params:
            if names and param in names:
                text = re.sub(rf"\b{re.escape(param)}\b", names[param], text)
        return text

    def worded(self, names: Mapping[str, str]) -> str:
        """The message with each API parameter it names written as ``names`` says (``hidden_size`` ->
        ``--hidden-size`` on the command line)."""
        return self._compose(names)


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
