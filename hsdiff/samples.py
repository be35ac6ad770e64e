"""The token ids of one training sample, from any file hsdiff reads or a small JSON file.

``hsdiff request`` and ``hsdiff capture`` replay a sample's exact token ids, so the inference-side
capture lines up token for token with a known training sample.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .configs import read_json
from .errors import InputError
from .model import TRAIN

__all__ = ["Sample", "load_sample"]

_ID_KEYS = ("input_ids", "token_ids", "prompt_token_ids", "prompt", "ids")


@dataclass(frozen=True)
class Sample:
    name: str
    token_ids: tuple[int, ...]
    source: str

    def __repr__(self) -> str:
        return f"<Sample {self.name}: {len(self.token_ids)} tokens from {self.source}>"


def load_sample(path: str | os.PathLike, sample: str | None = None) -> Sample:
    """The token ids of ``sample`` in ``path`` (a dump file or directory, or JSON ``{"input_ids": [...]}``).

    >>> load_sample("fixtures/seed/train", "data_1").token_ids[:3]     # doctest: +SKIP
    (1, 9690, 198)
    """
    p = Path(path)
    if not p.exists():
        raise InputError("no such file or directory", path=p, hint="give a training sample file or dump directory")
    if p.is_file() and p.suffix.lower() == ".json":
        return _from_json(p)
    from .readers import scan

    dump = scan(p, TRAIN)
    groups: dict[str, tuple[int, ...]] = {}
    for c in dump.captures:
        if c.token_ids and c.group is not None:
            groups.setdefault(c.group, tuple(c.token_ids))
    if not groups:
        raise InputError(
            "holds no token ids",
            path=p,
            hint="give a sample that stores input_ids (SpecForge .ckpt, ModelOpt .pt, safetensors) or "
            'a JSON file {"input_ids": [...]}',
        )
    if sample is not None:
        hits = [g for g in groups if g == sample or g.split(":")[0] == sample or g.endswith(sample)]
        if not hits:
            raise InputError(f"no sample named {sample!r}", path=p, hint=f"choose one of: {', '.join(sorted(groups))}")
        name = hits[0]
    elif len(groups) == 1:
        name = next(iter(groups))
    else:
        raise InputError(
            f"holds {len(groups)} samples",
            path=p,
            hint=f"pick one with `sample` (one of: {', '.join(sorted(groups)[:10])})",
            options=("sample",),
        )
    return Sample(name, groups[name], str(p))


def _from_json(p: Path) -> Sample:
    obj = read_json(
        p,
        what="file",
        error=InputError,
        missing="no such file or directory",
        missing_hint="give a training sample file or dump directory",
        bad_hint=None,
    )
    ids = obj
    if isinstance(obj, dict):
        ids = next((obj[k] for k in _ID_KEYS if k in obj), None)
    if not (isinstance(ids, list) and ids and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)):
        raise InputError("holds no list of token ids", path=p, hint='write {"input_ids": [1, 2, 3, ...]}')
    return Sample(p.stem, tuple(ids), str(p))
