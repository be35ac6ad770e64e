"""The central pass of an audit: problems and layer-mapping groups from per-file summaries.

Nothing here reads a hidden-state file: it works on :class:`~.fingerprint.FileSummary` records, and
never holds all of them. :func:`analyse` reads the summaries three times, in file order, from any
iterable that can be iterated again (a checkpoint on disk, :class:`~.run.CheckpointStore`):
once to count shapes, once over the first few thousand files to measure the run's rounding spread
(:func:`~.prefix.calibrate`), and once to flag files and group them. What it keeps per file is its
name, its per-slot median norms and a digest; summaries themselves are kept only as a bounded number
of representatives per group and token prefix, and a bounded sample per group for the relations
(:data:`MAX_REPRESENTATIVES`, :data:`MAX_SAMPLED` over all groups).

Layer mapping is decided by value. Files whose token ids start alike carry, in a causal model, the
same hidden states on that shared prefix for the same layer (:mod:`.prefix`). Files that agree within
the tolerance on every slot are joined; the largest group is the majority. Groups never compared by
value with another group (their files share no prefix with the rest) are placed by their per-slot
norm profile when it lies within a group's own spread, and left unplaced otherwise.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..align.separation import miss_direction, slot_direction
from ..configs import stated_ids
from ..model import Metrics
from . import prefix as P
from .fingerprint import FileSummary
from .report import Group, Problem

#: Summaries kept as representatives of a group under one token-prefix key.
_REPS_PER_KEY = 8
#: Representatives kept over all groups (about 7 kB each); a file that starts a group beyond it is
#: still grouped, but later files can only join it through groups that kept theirs.
MAX_REPRESENTATIVES = 20_000
#: Members of each group kept whole for the relations between groups ...
_SAMPLE = 64
#: ... and over all groups (a set of files that share no prefix is a group per file).
MAX_SAMPLED = 20_000
_PAIRS = 8


@dataclass(frozen=True)
class Analysis:
    """What the central pass found: ``tolerance`` per slot and where it came from."""

    groups: list[Group]
    problems: list[Problem]
    majority: str | None
    warnings: list[str]
    tolerance: tuple[float, ...]
    tolerance_source: str


def analyse(
    summaries: Iterable[FileSummary], *, tolerance: float | None = None, config: dict | None = None
) -> Analysis:
    """Problems (in file order), groups, the majority group's id and warnings; ``summaries`` is iterated three times.

    ``tolerance``: the largest median relative error on a shared prefix read as the same layer, for
    every slot; ``None`` measures it per slot from the set (:func:`~.prefix.calibrate`).
    """
    sigs: Counter = Counter()
    assumed = 0
    for s in summaries:
        if s.readable:
            sigs[_sig(s)] += 1
            assumed += s.hidden_size_source == "assumed three EAGLE-3 slots"
    main = sigs.most_common(1)[0][0] if sigs else None
    n_readable = sum(sigs.values())
    slots = main[0] if main and main[0] and main[0] > 0 else 0
    if tolerance is not None:
        tol, source = (tolerance,) * slots, "given"
    else:
        tol, measured = P.calibrate((s for s in summaries if s.readable and _sig(s) == main and not _flagged(s)), slots)
        source = (
            f"measured: {P.SPREAD_FACTOR:g} x the spread of {measured} file(s) sharing a prefix"
            if measured
            else "no two files share a prefix: the least tolerance"
        )
    warnings: list[str] = []
    problems: list[tuple[int, Problem]] = []
    grouping = _Grouping(tol)
    firsts: dict[bytes, tuple[str, str | None]] = {}
    for idx, s in enumerate(summaries):
        if not s.readable:
            problems.append((idx, Problem(s.file, "unreadable", s.error or "")))
            continue
        bad = False
        if _sig(s) != main and main is not None:
            problems.append((idx, Problem(s.file, "shape_mismatch", _sig_detail(s, main, sigs[main], n_readable))))
            bad = True
        tokens = _token_problem(s)
        if tokens:
            problems.append((idx, Problem(s.file, "shape_mismatch", tokens)))
            bad = True
        if s.non_finite:
            problems.append((idx, Problem(s.file, "non_finite", "; ".join(_nf_detail(n) for n in s.non_finite))))
            bad = True
        dup = _duplicate(s, firsts)
        if dup:
            problems.append((idx, dup))
        if not bad:
            grouping.add(idx, s)
    if assumed:
        warnings.append(
            f"{assumed} file(s) give no hidden size (no final hidden_state, no config.json): "
            "three EAGLE-3 slots were assumed; pass --hidden-size if that is wrong"
        )
    groups, outliers, majority = grouping.finish(config, warnings)
    problems += outliers
    problems.sort(key=lambda p: (p[0], p[1].kind))
    return Analysis(groups, [p for _, p in problems], majority, warnings, tol, source)


def _flagged(s: FileSummary) -> bool:
    return bool(s.non_finite or _token_problem(s))


def _sig(s: FileSummary) -> tuple:
    return (s.slots, s.hidden_size, s.dtype)


def _sig_detail(s: FileSummary, main: tuple, n_main: int, n: int) -> str:
    what = []
    if s.slots != main[0]:
        what.append(f"{s.slots} slot(s) (others: {main[0]})")
    if s.hidden_size != main[1]:
        what.append(
            "slots of unequal width" if s.hidden_size == -1 else f"hidden size {s.hidden_size} (others: {main[1]})"
        )
    if s.dtype != main[2]:
        what.append(f"dtype {s.dtype} (others: {main[2]})")
    return ", ".join(what) + f" — {n_main} of {n} readable files have {main[0]} x {main[1]} {main[2]}"


def _token_problem(s: FileSummary) -> str:
    if s.tokens == -1:
        return "slots cover different numbers of tokens"
    out = []
    if s.ids_tokens is not None and s.ids_tokens != s.tokens:
        out.append(f"hidden states cover {s.tokens} tokens but input_ids has {s.ids_tokens}")
    if s.mask_tokens is not None and s.mask_tokens != s.tokens:
        out.append(f"hidden states cover {s.tokens} tokens but loss_mask has {s.mask_tokens}")
    return "; ".join(out)


def _nf_detail(n) -> str:
    what = " and ".join(w for w, c in (("NaN", n.nan), ("Inf", n.inf)) if c)
    return f"{what} in slot {n.slot}, tokens {n.first}-{n.last} ({n.count} token(s))"


def _duplicate(s: FileSummary, firsts: dict[bytes, tuple[str, str | None]]) -> Problem | None:
    """A duplicate problem when an earlier file had the same input_ids (or, without ids, the same values)."""
    digest = s.ids_digest or s.values_digest or ""
    k = (b"i" if s.ids_digest else b"v") + bytes.fromhex(digest)
    first = firsts.get(k)
    if first is None:
        firsts[k] = (s.file, s.values_digest)
        return None
    if s.ids_digest:
        same = "identical values" if s.values_digest == first[1] else "different values"
        return Problem(s.file, "duplicate", f"same input_ids as {first[0]} ({same})")
    return Problem(s.file, "duplicate", f"identical hidden states to {first[0]} (no input_ids to tell)")


# -- grouping by value, one file at a time ---------------------------------------------------------


class _Cluster:
    __slots__ = ("members", "norms", "reps", "sample", "compared")

    def __init__(self, first: int, s: FileSummary, keep: bool):
        self.members = array("q", [first])  # positions in _Grouping.names
        self.norms = array("d", s.median_norms)  # per-slot median norms of every member, flattened
        self.reps: dict[tuple, list[FileSummary]] = {}
        self.sample: list[FileSummary] = [s] if keep else []
        self.compared = False  # compared by value with a file outside it at least once

    @classmethod
    def union(cls, parts: Sequence[_Cluster], members: Iterable[int]) -> _Cluster:
        """The members given, with the norms and samples of ``parts`` (for reporting only)."""
        out = cls.__new__(cls)
        out.members, out.norms, out.reps, out.sample, out.compared = array("q", members), array("d"), {}, [], False
        for c in parts:
            out.norms.extend(c.norms)
            out.sample = (out.sample + c.sample)[:_SAMPLE]
        return out

    def absorb(self, other: _Cluster) -> None:
        self.members.extend(other.members)
        self.norms.extend(other.norms)
        for k, v in other.reps.items():
            self.reps[k] = (self.reps.get(k, []) + v)[:_REPS_PER_KEY]
        self.sample = (self.sample + other.sample)[:_SAMPLE]
        self.compared |= other.compared

    def profile(self, slots: int) -> np.ndarray:
        """[members, slots] median norms."""
        return np.array(self.norms, dtype=np.float64).reshape(-1, slots) if slots else np.zeros((len(self.members), 0))


_HOLLOW = _Cluster.__new__(_Cluster)


class _Grouping:
    """Files joined by value as they come; clusters that agree are merged (union-find)."""

    def __init__(self, tol: Sequence[float]):
        self.tol = tuple(tol)
        self.names: list[str] = []
        self.order = array("q")  # each member's position in the file order
        self.clusters: list[_Cluster] = []
        self.parent: list[int] = []
        self.by_key: dict[tuple, set[int]] = defaultdict(set)  # clusters holding representatives under a key
        self.held = self.sampled = 0
        self.sig: tuple[int, int, str] = (0, 0, "")  # slots, width, dtype: the same for every file grouped

    def find(self, c: int) -> int:
        while self.parent[c] != c:
            self.parent[c] = self.parent[self.parent[c]]
            c = self.parent[c]
        return c

    def add(self, idx: int, f: FileSummary) -> None:
        i = len(self.names)
        self.names.append(f.file)
        self.order.append(idx)
        k = P.key(f)
        matched: list[int] = []
        compared: list[int] = []
        for c in sorted(self.by_key.get(k, ())):
            reps = self.clusters[c].reps[k]
            j = max(reps, key=lambda r: P.lcp(f, r))
            n = P.lcp(f, j)
            errs = P.same_slots(f, j, n) if n else None
            if errs is None:
                continue
            compared.append(c)
            if P.within(errs, self.tol):
                matched.append(c)
        if matched:
            root = matched[0]
            for c in matched[1:]:
                self.parent[c] = root
                self.clusters[root].absorb(self.clusters[c])
                for kk in list(self.clusters[c].reps):
                    self.by_key[kk].discard(c)
                    self.by_key[kk].add(root)
                self.clusters[c] = _HOLLOW  # its members now live in root
            cl = self.clusters[root]
            cl.members.append(i)
            cl.norms.extend(f.median_norms)
            if len(cl.sample) < _SAMPLE and self.sampled < MAX_SAMPLED:
                cl.sample.append(f)
                self.sampled += 1
        else:
            root = len(self.clusters)
            self.clusters.append(_Cluster(i, f, keep=self.sampled < MAX_SAMPLED))
            self.sampled += self.sampled < MAX_SAMPLED
            self.parent.append(root)
            self.sig = (f.slots or 0, f.hidden_size or 0, f.dtype or "")
        cl = self.clusters[root]
        if len(cl.reps.get(k, ())) < _REPS_PER_KEY and self.held < MAX_REPRESENTATIVES:
            cl.reps.setdefault(k, []).append(f)
            self.held += 1
            self.by_key[k].add(root)
        for c in compared:
            if c not in matched:
                self.clusters[c].compared = True
                cl.compared = True

    def finish(
        self, config: dict | None, warnings: list[str]
    ) -> tuple[list[Group], list[tuple[int, Problem]], str | None]:
        if not self.names:
            return [], [], None
        roots = sorted(
            {self.find(c) for c in range(len(self.clusters))},
            key=lambda c: (-len(self.clusters[c].members), self.clusters[c].members[0]),
        )  # [0]: its first file
        cl = self.clusters
        slots = self.sig[0]
        # groups told apart by value: compared with another group, or the largest when its files matched each other
        linked = [c for c in roots if cl[c].compared or (c == roots[0] and len(cl[c].members) > 1)]
        isolated = [c for c in roots if c not in linked]
        evidence = {c: "prefix values" for c in linked}
        if linked:
            profiles = [cl[g].profile(slots) for g in linked]
            placed = set()
            for c in isolated:
                target = _by_norm_profile(cl[c].profile(slots), profiles)
                if target is not None:
                    cl[linked[target]].absorb(cl[c])
                    evidence[linked[target]] = "prefix values + norm profile"
                    placed.add(c)
            isolated = [c for c in isolated if c not in placed]
        unplaced = [i for c in isolated for i in cl[c].members]
        if unplaced and linked:
            names = [self.names[i] for i in sorted(unplaced)]
            warnings.append(
                f"{len(unplaced)} file(s) share no token prefix with the rest and their norm profile fits no "
                f"group, so their layers were not checked: {', '.join(names[:5])}" + (" ..." if len(names) > 5 else "")
            )
        if not linked:  # no two files share a prefix: nothing was compared by value, nothing is flagged
            warnings.append("no two files share a token prefix: their layer mappings could not be compared by value")
            everyone = _Cluster.union([cl[c] for c in roots], range(len(self.names)))
            return [self._group("A", everyone, True, "none", "", _claimed(config), slots)], [], "A"
        ranked = sorted(linked, key=lambda c: (-len(cl[c].members), min(cl[c].members)))
        sizes = [len(cl[c].members) for c in ranked]
        major = cl[ranked[0]]
        if len(sizes) > 1 and sizes[0] == sizes[1]:
            warnings.append(
                f"no majority layer mapping: the two largest groups have {sizes[0]} files each; "
                "every group but the first is reported as outlying"
            )
        groups, problems = [], []
        for k, c in enumerate(ranked):
            name = _name(k)
            is_major = k == 0
            relation = (
                ""
                if is_major
                else _relation(cl[c].sample, major.sample, self.tol)
                if cl[c].sample and major.sample
                else "other layers than the majority (no member kept for the relation: more groups than MAX_SAMPLED)"
            )
            groups.append(
                self._group(name, cl[c], is_major, evidence[c], relation, _claimed(config) if is_major else "", slots)
            )
            if not is_major:
                for i in sorted(cl[c].members):
                    problems.append(
                        (
                            self.order[i],
                            Problem(
                                self.names[i],
                                "layer_mapping_outlier",
                                f"holds other layers than the majority group A ({len(major.members)} files); "
                                f"group {name} ({len(cl[c].members)} files): {relation}",
                            ),
                        )
                    )
        if unplaced:
            rest = _Cluster.union([cl[c] for c in isolated], sorted(unplaced))
            groups.append(
                self._group(
                    "unplaced",
                    rest,
                    False,
                    "none",
                    "not compared: no token prefix shared with other files and a norm profile that fits no group",
                    "",
                    slots,
                )
            )
        return groups, problems, "A"

    def _group(
        self, name: str, c: _Cluster, major: bool, evidence: str, relation: str, claimed: str, slots: int
    ) -> Group:
        members = sorted(c.members)
        profile = tuple(float(v) for v in np.nanmedian(c.profile(slots), axis=0)) if len(c.norms) else ()
        return Group(
            name,
            len(members),
            major,
            self.sig[0],
            self.sig[1],
            self.sig[2],
            profile,
            evidence,
            self.names[members[0]],
            relation,
            claimed,
            tuple(self.names[i] for i in members),
        )


def _name(k: int) -> str:
    return chr(ord("A") + k) if k < 26 else f"G{k}"


def _median_profile(files: Sequence[FileSummary]) -> tuple[float, ...]:
    a = np.array([f.median_norms for f in files], dtype=np.float64)
    return tuple(float(v) for v in np.nanmedian(a, axis=0))


def _by_norm_profile(cands: np.ndarray, groups: list[np.ndarray]) -> int | None:
    """Index of the group whose per-slot norm profile holds the candidates within its own spread, if one does."""
    with np.errstate(all="ignore"):
        prof = np.log(np.nanmedian(cands, axis=0))
        best, best_dev = None, math.inf
        for k, g in enumerate(groups):
            logs = np.log(g)
            centre = np.nanmedian(logs, axis=0)
            spread = np.maximum(np.nanmax(np.abs(logs - centre), axis=0), 0.02)
            dev = np.abs(prof - centre)
            if np.all(dev <= 2 * spread) and float(dev.max()) < best_dev:
                best, best_dev = k, float(dev.max())
    return best


def _relation(group: Sequence[FileSummary], majority: Sequence[FileSummary], tol: Sequence[float]) -> str:
    """What an outlier group holds compared with the majority, from pairs sharing the longest prefixes."""
    pairs = sorted(((P.lcp(g, m), gi, mi) for gi, g in enumerate(group) for mi, m in enumerate(majority)), reverse=True)
    pairs = [p for p in pairs if p[0] > 0][:_PAIRS]
    k = group[0].slots or 0
    kmaj = majority[0].slots or 0 if majority else 0
    err, ratio, cos = (np.full((len(pairs), k, kmaj), np.nan) for _ in range(3))
    tokens = 0
    for p, (n, gi, mi) in enumerate(pairs):
        for a in range(k):
            for b in range(kmaj):
                r = P.slot_errors(group[gi], majority[mi], a, b, n)
                if r is not None:
                    err[p, a, b], ratio[p, a, b], cos[p, a, b] = r[0], r[1], r[3]
                    tokens = max(tokens, r[2])
    embed = P.embedding_slots(group)
    if not pairs or np.all(np.isnan(err)):
        prof, maj = _median_profile(group), _median_profile(majority)
        rel = " / ".join(f"{a / b:.2f}" for a, b in zip(prof, maj))
        return f"no token prefix shared with the majority; per-slot norm ratio to the majority {rel} (norm profile)"
    e, r, c = (np.nanmedian(x, axis=0) for x in (err, ratio, cos))
    parts, equal, apart = [], {}, {}
    for a in range(k):
        b = int(np.nanargmin(e[a])) if not np.all(np.isnan(e[a])) else a
        if a in embed:
            parts.append(f"slot {a} = the embeddings (B0: the same vector for the same token wherever it stands)")
        elif e[a, b] <= tol[min(a, len(tol) - 1)]:
            equal[a] = b
            parts.append(f"slot {a} = the majority's slot {b} ({e[a, b]:.1%} apart)")
        else:
            same = e[a, a] if a < kmaj else float("nan")
            nr = r[a, a] if a < kmaj else float("nan")
            if a < kmaj and b == a:  # nearest to the majority's same slot: which way it misses, as compare decides
                apart[a] = Metrics(float(same), float(c[a, a]), float(same), float(nr), tokens, 0)
            parts.append(
                f"slot {a}: {same:.0%} from the majority's slot {a}, norm x{nr:.2f}, "
                f"cosine {np.nanmax(c[a]):.2f} at most with any majority slot"
            )
    rest = [a for a in range(k) if a not in embed]
    shifts = {b - a for a, b in equal.items()}
    if rest and all(np.nanmax(c[a]) < P.OTHER_MODEL_COSINE for a in rest if not np.all(np.isnan(c[a]))):
        head = (
            "another model: on the same tokens no slot points the way any majority slot does (cosine below "
            f"{P.OTHER_MODEL_COSINE:g}), as the hidden states of another model of the same width (or of this one "
            "in another basis) do; other layers of one model keep its direction"
        )
    elif equal and len(equal) + len(embed) == k and len(shifts) == 1 and shifts != {0}:
        d = shifts.pop()
        head = f"shifted by {abs(d)} slot(s): slot s holds the majority's slot s{d:+d}"
        if embed:
            head += f", slot(s) {', '.join(map(str, sorted(embed)))} the embeddings"
    elif (
        equal
        and apart
        and len(equal) + len(apart) + len(embed) == k
        and all(slot_direction(m) == -1 for m in apart.values())
    ):
        head = "shallower layers: " + ", ".join(f"slot {a} = majority slot {b}" for a, b in equal.items())
    elif len(apart) == k and (seen := miss_direction(list(apart.values()))) is not None:
        head = (
            f"{seen.way} layers than the majority at every slot: {seen.norms} norms on the same tokens and nearest to "
            f"the majority's same slot, as capture ids set one (or a few) layers {seen.way} give; the exact offset "
            "needs the neighbouring layers"
        )
    else:
        head = "other layers than the majority"
    return f"{head} — on {tokens} shared-prefix token(s): " + "; ".join(parts)


def _claimed(config: dict | None) -> str:
    """The layer ids a config.json at the dataset's top claims (a label, not checked by value)."""
    got = stated_ids(config) if config else None
    return "" if got is None else f"config.json claims {got[0]} {got[1]}"
