"""Exceptions raised by hsdiff.

Every problem a user can fix by changing the input is an :class:`HsdiffError`; the CLI prints
its message on one line and exits with status 2. Anything else escaping the library is a bug in
hsdiff itself (exit status 3)::

    HsdiffError                 user-fixable; message names the file and says what to do
    ├── InputError              a path, option or value given by the user is wrong
    │   └── ConfigError         a config.json is unreadable or lacks what is needed
    ├── FormatError             a file is not in any format hsdiff reads, or is damaged
    │   └── UnsafeFileError     a file would need arbitrary code to load (pickle globals, object arrays)
    ├── AlignmentError          the two sides cannot be compared at all (no shared hidden size, ...)
    └── MissingExtraError       a feature needs a package of an extra that is not installed (hsdiff.extras)

Messages speak the library's terms: a setting is named as the parameter (or record field) that takes
it, in backquotes (```layer_ids```, ```infer_format=vllm```), and listed in ``options``; a front end
says them its own way with :meth:`HsdiffError.in_terms` (the CLI: as its flags).

    >>> e = InputError("`infer_index` must be 'boundary' or 'output'", hint="give `infer_index=output`",
    ...                options=("infer_index",))
    >>> e.in_terms(lambda name: "--" + name.replace("_", "-"))
    "--infer-index must be 'boundary' or 'output' — give --infer-index output"
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

__all__ = [
    "HsdiffError",
    "InputError",
    "ConfigError",
    "FormatError",
    "UnsafeFileError",
    "AlignmentError",
    "MissingExtraError",
]


class HsdiffError(Exception):
    """Base class of every error a user can fix by changing the input."""

    def __init__(
        self, message: str, *, path: object | None = None, hint: str | None = None, options: Sequence[str] = ()
    ):
        self.path = None if path is None else str(path)
        self.hint = hint
        self.detail = message
        #: the parameters the message names in backquotes (```layer_ids```, or ```layer_ids=VALUE``` to say
        #: what to give)
        self.options = tuple(options)
        super().__init__(self._compose(self.detail, self.hint))

    def _compose(self, detail: str, hint: str | None) -> str:
        text = f"{self.path}: {detail}" if self.path else detail
        if hint:
            text = f"{text} — {hint}"
        return text

    def in_terms(self, name: Callable[[str], str]) -> str:
        """The message with every parameter of ``options`` said as ``name`` says it, without the
        backquotes (```p=VALUE``` as ``name(p) VALUE``): a command line names the flags that set them."""
        if not self.options:
            return str(self)
        rx = re.compile("`(" + "|".join(map(re.escape, self.options)) + ")(?:=([^`]*))?`")

        def say(text: str) -> str:
            return rx.sub(lambda m: name(m[1]) + ("" if m[2] is None else " " + m[2]), text)

        return self._compose(say(self.detail), None if self.hint is None else say(self.hint))


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


class MissingExtraError(HsdiffError):
    """A feature needs a package that ``pip install hsdiff`` leaves out; the hint names the extra that brings it.

    >>> str(MissingExtraError("the pictures", "matplotlib", "plot"))
    "matplotlib is needed for the pictures and is not installed — pip install 'hsdiff[plot]'"
    """

    def __init__(
        self, what: str, package: str, extra: str, *, path: object | None = None, alternative: str | None = None
    ):
        self.what, self.package, self.extra, self.alternative = what, package, extra, alternative
        hint = f"pip install 'hsdiff[{extra}]'" + (f", or {alternative}" if alternative else "")
        super().__init__(f"{package} is needed for {what} and is not installed", path=path, hint=hint)

    def __reduce__(self) -> tuple:  # rebuilt from its fields, e.g. when a worker process raises it
        return (_rebuild, (type(self), self.what, self.package, self.extra, self.path, self.alternative))


def _rebuild(cls: type, what: str, package: str, extra: str, path: str | None, alternative: str | None) -> Exception:
    return cls(what, package, extra, path=path, alternative=alternative)
