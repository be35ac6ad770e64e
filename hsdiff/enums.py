"""The base of every closed set of words in hsdiff's records (verdicts, statuses, severities, label
sources): an enum whose members are their string values everywhere — JSON, f-strings, comparisons —
so a record read back from a saved report compares equal to the one that wrote it.

    >>> class Colour(StrEnum):
    ...     RED = "red"
    >>> Colour.RED == "red", f"{Colour.RED}", [Colour.RED]
    (True, 'red', ['red'])
"""

from __future__ import annotations

from enum import Enum

__all__ = ["StrEnum"]


class StrEnum(str, Enum):
    """An enum whose members are their string values everywhere: JSON, f-strings, comparisons."""

    __str__ = str.__str__
    __format__ = str.__format__  # type: ignore[assignment]

    def __repr__(self) -> str:  # reads as the string it is, in a notebook's tuples and lists
        return repr(self.value)
