"""JSON Schemas (draft 2020-12) of hsdiff's JSON outputs, shipped with the package.

* ``report``: ``hsdiff compare --json`` (:meth:`hsdiff.model.Report.to_dict`);
* ``gate``: ``hsdiff gate --json`` and ``hsdiff check-config --json`` (embeds a ``report``);
* ``inspect``: ``hsdiff inspect --json``;
* ``fingerprint``: the metadata document of a fingerprint (``hsdiff fingerprint``, :mod:`hsdiff.fingerprint.file`).

Each document carries ``schema_version``; the schema's ``$id`` names the version it describes.
Validation needs the ``jsonschema`` package (``pip install 'hsdiff[test]'``).

>>> from hsdiff.schemas import validate
>>> validate(report.to_dict(), "report")          # doctest: +SKIP
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["NAMES", "load", "validate"]

NAMES = ("report", "gate", "inspect", "fingerprint")


@cache
def load(name: str) -> dict:
    """The schema called ``name`` (one of :data:`NAMES`) as a dict."""
    if name not in NAMES:
        raise ValueError(f"no schema {name!r}: choose one of {', '.join(NAMES)}")
    return json.loads(resources.files(__package__).joinpath(f"{name}.schema.json").read_text(encoding="utf-8"))


def validate(document: Any, name: str) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``document`` follows schema ``name``."""
    import jsonschema
    from referencing import Registry, Resource

    registry = Registry().with_resources((load(n)["$id"], Resource.from_contents(load(n))) for n in NAMES)
    jsonschema.Draft202012Validator(load(name), registry=registry).validate(document)
