"""The draft carries its proof: a fingerprint of every layer of the target, recorded once at training time.

A fingerprint (``hsdiff-fingerprint.safetensors``, written beside the draft) holds, for a few probe
sequences (by default the first samples of the training dump), every boundary B0…BL of the target and its
final post-norm state as a norm and a 64-number sketch per token (:mod:`.sketch`: ≈ 34 kB per boundary
whatever the hidden size), the noise floor of a second pass in other numerics, the training slots
*identified by value* against every boundary, the draft's kind and ids, and the target's identity.

Any later engine capture of the probe tokens is then checked against all the boundaries at once
(:func:`check`, the same :class:`~hsdiff.model.Report` as :func:`hsdiff.compare`): no extra dump of
neighbouring layers, no labels taken on trust. The decision between neighbouring layers is a paired
per-token test (:mod:`.identify`).

The check needs numpy alone (the core install); recording runs the target (torch and transformers, the
``capture`` extra) unless the states are already on disk (:func:`from_dump`).

>>> import hsdiff.fingerprint as fingerprint
>>> fp = fingerprint.from_model("target/", train="train/", draft_config="draft/")   # doctest: +SKIP
>>> fingerprint.write(fp, "draft/")                                                 # doctest: +SKIP
>>> report = fingerprint.check("draft/hsdiff-fingerprint.safetensors", "dump/", layer_ids=[2, 30, 58])  # doctest: +SKIP
>>> report.verdict
'ok'

Modules: :mod:`.sketch` (the projection), :mod:`.identify` (the paired test), :mod:`.file` (the file,
read safely), :mod:`.align` (tokens to probes), :mod:`.probes`, :mod:`.recording` (building one from states),
:mod:`.sources` (from a dump on disk), :mod:`.forward` (from a model run here), :mod:`.check` (the check).
"""

from __future__ import annotations

from .check import WrongTargetError, check, check_arrays, check_dump
from .file import FILENAME, Fingerprint, TrainingSlot, is_fingerprint, load, summary, write
from .forward import from_model, record
from .identify import Identity, identify
from .probes import BUILTIN_TEXTS, Pass, Probes
from .recording import build, identify_training
from .sources import from_dump

__all__ = [
    "FILENAME",
    "Fingerprint",
    "TrainingSlot",
    "Identity",
    "Pass",
    "Probes",
    "BUILTIN_TEXTS",
    "WrongTargetError",
    "build",
    "check",
    "check_arrays",
    "check_dump",
    "from_dump",
    "from_model",
    "identify",
    "identify_training",
    "is_fingerprint",
    "load",
    "record",
    "summary",
    "write",
]
