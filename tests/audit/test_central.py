"""The central pass streams: it names the planted problems of a generated set while holding only a
bounded number of summaries, however many files the set has."""

from __future__ import annotations

import weakref
from collections.abc import Iterator

import numpy as np

from hsdiff.audit.fingerprint import FileSummary
from hsdiff.audit.groups import analyse

from . import generated as G


class _Generated:
    """n generated summaries, the same ones at every pass; counts how many are alive at once."""

    def __init__(self, n: int):
        self.n, self.src = n, G.Source()
        self.alive = self.most = self.passes = 0

    def _gone(self) -> None:
        self.alive -= 1

    def __iter__(self) -> Iterator[FileSummary]:
        self.passes += 1
        rng = np.random.Generator(np.random.PCG64(self.n))
        for k in range(self.n):
            s = self.src.summary(k, rng)
            self.alive += 1
            self.most = max(self.most, self.alive)
            weakref.finalize(s, self._gone)
            yield s
            del s


def test_central_pass_names_the_planted_problems_holding_few_summaries():
    n = 5000
    files = _Generated(n)
    found = analyse(files)
    kinds: dict[str, set[str]] = {}
    for p in found.problems:
        kinds.setdefault(p.kind, set()).add(p.file)
    assert {k: len(v) for k, v in kinds.items()} == G.expected(n)
    shallow = {
        G.name(k) for k in range(n) if k % G.SHALLOW_EVERY == G.SHALLOW_EVERY - 1 and k % G.NAN_EVERY != G.NAN_EVERY - 1
    }
    assert kinds["layer_mapping_outlier"] == shallow
    assert [g.files for g in found.groups] == [n - len(shallow) - n // G.NAN_EVERY, len(shallow)]
    assert found.groups[1].relation.startswith("shallower layers")
    assert files.passes == 3 and files.most < 300 < n  # representatives and samples, not the set
