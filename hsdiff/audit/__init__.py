"""``hsdiff audit``: validate a whole hidden-state training set, on one machine or a Dask cluster.

A per-file pass (:mod:`.fingerprint`, on Dask workers) reads each file once and keeps a small
summary; a central pass (:mod:`.groups`) finds unreadable, non-finite, misshapen and duplicate files
and groups files by the layers their slots hold, by value; :mod:`.run` ties them together with a
checkpoint so an interrupted audit resumes. Records and renderers: :mod:`.report`.

>>> from hsdiff.audit import audit
>>> report = audit("train_dump/", workers=2)        # doctest: +SKIP
>>> report.exit_code, [(p.file, p.kind) for p in report.problems][:1]
(1, [('rows_0-2000/data_3.ckpt', 'layer_mapping_outlier')])
"""

from __future__ import annotations

from .report import KINDS, AuditReport, Group, Problem, render_text
from .run import AuditOptions, audit, check_outside, default_checkpoint

__all__ = [
    "audit",
    "AuditOptions",
    "AuditReport",
    "Group",
    "Problem",
    "KINDS",
    "render_text",
    "default_checkpoint",
    "check_outside",
]
