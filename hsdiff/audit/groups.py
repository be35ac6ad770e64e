"""The central pass of an audit: problems and layer-mapping groups from per-file summaries.

Nothing here reads a hidden-state file: it works on :class:`~.fingerprint.FileSummary` records.

Layer mapping is decided by value. Files whose token ids start alike carry, in a causal model, the
same hidden states on that shared prefix for the same layer; their prefix fingerprints (a fixed
random projection of each prefix token, :mod:`.fingerprint`) are compared token by token, leaving
out attention-sink tokens (norm over :data:`~.fingerprint.SINK_FACTOR` times the slot's median),
which barely change across middle layers. Files that agree within ``tolerance`` on every slot are
joined; the largest group is the majority. Files that share no prefix with any other are placed by
their per-slot norm profile when it lies within a group's own spread, and left unplaced otherwise.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np

from .fingerprint import SINK_FACTOR, FileSummary
from .report import Group, Problem

#: Default largest median per-token relative error on a shared prefix read as the same layer. Files
#: of one capture run agree to rounding; adjacent layers differ by 4-60% on SmolLM2 (fixtures/README.md).
TOLERANCE = 0.03
_REPS_PER_KEY = 8
_PAIRS = 8


def analyse(summaries: Sequence[FileSummary], *, tolerance: float = TOLERANCE, config: dict | None = None
            ) -> tuple[list[Group], list[Problem], str | None, list[str]]:
    """Groups, problems (in file order), the majority group's id and warnings."""
    problems: list[Problem] = []
    warnings: list[str] = []
    readable = [s for s in summaries if s.readable]
    problems += [Problem(s.file, "unreadable", s.error or "") for s in summaries if not s.readable]
    sigs = Counter(_sig(s) for s in readable)
    main = sigs.most_common(1)[0][0] if sigs else None
    clean: list[FileSummary] = []
    for s in readable:
        bad = False
        if _sig(s) != main and main is not None:
            problems.append(Problem(s.file, "shape_mismatch", _sig_detail(s, main, sigs[main], len(readable))))
            bad = True
        tokens = _token_problem(s)
        if tokens:
            problems.append(Problem(s.file, "shape_mismatch", tokens))
            bad = True
        if s.non_finite:
            problems.append(Problem(s.file, "non_finite", "; ".join(_nf_detail(n) for n in s.non_finite)))
            bad = True
        if not bad:
            clean.append(s)
    problems += _duplicates(readable)
    assumed = [s.file for s in readable if s.hidden_size_source == "assumed three EAGLE-3 slots"]
    if assumed:
        warnings.append(f"{len(assumed)} file(s) give no hidden size (no final hidden_state, no config.json): "
                        "three EAGLE-3 slots were assumed; pass --hidden-size if that is wrong")
    groups, outliers, majority = _group(clean, tolerance, config, warnings)
    problems += outliers
    order = {s.file: i for i, s in enumerate(summaries)}
    problems.sort(key=lambda p: (order.get(p.file, 0), p.kind))
    return groups, problems, majority, warnings


def _sig(s: FileSummary) -> tuple:
    return (s.slots, s.hidden_size, s.dtype)


def _sig_detail(s: FileSummary, main: tuple, n_main: int, n: int) -> str:
    what = []
    if s.slots != main[0]:
        what.append(f"{s.slots} slot(s) (others: {main[0]})")
    if s.hidden_size != main[1]:
        what.append("slots of unequal width" if s.hidden_size == -1 else f"hidden size {s.hidden_size} (others: {main[1]})")
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


def _duplicates(readable: Sequence[FileSummary]) -> list[Problem]:
    by: dict[str, list[FileSummary]] = defaultdict(list)
    for s in readable:
        key = f"ids:{s.ids_digest}" if s.ids_digest else f"values:{s.values_digest}"
        by[key].append(s)
    out = []
    for key, group in by.items():
        for s in group[1:]:
            first = group[0]
            if key.startswith("ids:"):
                same = "identical values" if s.values_digest == first.values_digest else "different values"
                out.append(Problem(s.file, "duplicate", f"same input_ids as {first.file} ({same})"))
            else:
                out.append(Problem(s.file, "duplicate", f"identical hidden states to {first.file} (no input_ids to tell)"))
    return out


# -- value comparison on shared prefixes ---------------------------------------------------------


def _lcp(a: FileSummary, b: FileSummary) -> int:
    n = 0
    limit = min(len(a.prefix_ids), len(b.prefix_ids),
                0 if a.prefix_proj is None else a.prefix_proj.shape[0], 0 if b.prefix_proj is None else b.prefix_proj.shape[0])
    while n < limit and a.prefix_ids[n] == b.prefix_ids[n]:
        n += 1
    return n


def _usable(s: FileSummary, n: int, slot: int) -> np.ndarray:
    assert s.prefix_norms is not None
    norms = s.prefix_norms[:n, slot]
    med = s.median_norms[slot]
    return (norms > 0) & np.isfinite(norms) & (norms <= SINK_FACTOR * med if math.isfinite(med) else True)


def slot_errors(a: FileSummary, b: FileSummary, sa: int, sb: int, n: int) -> tuple[float, float, int] | None:
    """(median relative error of a's slot ``sa`` to b's slot ``sb``, median norm ratio, tokens) on the first n tokens."""
    assert a.prefix_proj is not None and b.prefix_proj is not None and b.prefix_norms is not None
    assert a.prefix_norms is not None
    keep = _usable(a, n, sa) & _usable(b, n, sb)
    if not keep.any():
        return None
    diff = np.linalg.norm(a.prefix_proj[:n, sa][keep] - b.prefix_proj[:n, sb][keep], axis=1)
    ref = b.prefix_norms[:n, sb][keep]
    ratio = a.prefix_norms[:n, sa][keep] / ref
    return float(np.median(diff / ref)), float(np.median(ratio)), int(keep.sum())


def _same_slots(a: FileSummary, b: FileSummary, n: int) -> list[float] | None:
    errs = []
    for s in range(a.slots or 0):
        r = slot_errors(a, b, s, s, n)
        if r is None:
            return None  # a slot with only sink tokens in common cannot be told apart
        errs.append(r[0])
    return errs


class _Cluster:
    def __init__(self, first: int):
        self.members = [first]
        self.reps: dict[tuple, list[int]] = defaultdict(list)
        self.compared = False  # compared by value with a file outside it at least once


def _group(files: list[FileSummary], tol: float, config: dict | None, warnings: list[str]
           ) -> tuple[list[Group], list[Problem], str | None]:
    if not files:
        return [], [], None
    clusters: list[_Cluster] = []
    parent: list[int] = []

    def find(c: int) -> int:
        while parent[c] != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    for i, f in enumerate(files):
        key = f.prefix_ids[:2]
        matched: list[int] = []
        compared: list[int] = []
        for c in {find(k) for k in range(len(clusters))}:
            reps = clusters[c].reps.get(key, [])
            if not reps:
                continue
            j = max(reps, key=lambda r: _lcp(f, files[r]))
            n = _lcp(f, files[j])
            errs = _same_slots(f, files[j], n) if n else None
            if errs is None:
                continue
            compared.append(c)
            if max(errs) <= tol:
                matched.append(c)
        if matched:
            root = matched[0]
            for c in matched[1:]:
                parent[c] = root
                clusters[root].members += clusters[c].members
                for k, v in clusters[c].reps.items():
                    clusters[root].reps[k] = (clusters[root].reps[k] + v)[:_REPS_PER_KEY]
                clusters[root].compared |= clusters[c].compared
            clusters[root].members.append(i)
        else:
            root = len(clusters)
            clusters.append(_Cluster(i))
            parent.append(root)
        if len(clusters[root].reps[key]) < _REPS_PER_KEY:
            clusters[root].reps[key].append(i)
        for c in compared:
            if c not in matched:
                clusters[c].compared = True
                clusters[root].compared = True
    roots = sorted({find(c) for c in range(len(clusters))}, key=lambda c: (-len(clusters[c].members), clusters[c].members[0]))
    linked = [c for c in roots if clusters[c].compared or len(clusters[c].members) > 1]
    isolated = [c for c in roots if c not in linked]
    evidence = {c: "prefix values" for c in linked}
    if linked:
        profiles = [[files[i] for i in clusters[g].members] for g in linked]
        placed = set()
        for c in isolated:
            target = _by_norm_profile([files[i] for i in clusters[c].members], profiles)
            if target is not None:
                clusters[linked[target]].members += clusters[c].members
                evidence[linked[target]] = "prefix values + norm profile"
                placed.add(c)
        isolated = [c for c in isolated if c not in placed]
    unplaced = [files[i].file for c in isolated for i in clusters[c].members]
    if unplaced and linked:
        warnings.append(f"{len(unplaced)} file(s) share no token prefix with the rest and their norm profile fits no "
                        f"group, so their layers were not checked: {', '.join(unplaced[:5])}" + (" ..." if len(unplaced) > 5 else ""))
    if not linked:  # no two files share a prefix: nothing was compared by value, nothing is flagged
        warnings.append("no two files share a token prefix: their layer mappings could not be compared by value")
        return [_as_group("A", files, True, "none", "", _claimed(config))], [], "A"
    ranked = sorted(linked, key=lambda c: (-len(clusters[c].members), clusters[c].members[0]))
    sizes = [len(clusters[c].members) for c in ranked]
    majority_c = ranked[0]
    if len(sizes) > 1 and sizes[0] == sizes[1]:
        warnings.append(f"no majority layer mapping: the two largest groups have {sizes[0]} files each; "
                        "every group but the first is reported as outlying")
    names = {c: _name(k) for k, c in enumerate(ranked)}
    maj_files = [files[i] for i in sorted(clusters[majority_c].members)]
    groups, problems = [], []
    for c in ranked:
        members = [files[i] for i in sorted(clusters[c].members)]
        is_major = c == majority_c
        relation = "" if is_major else _relation(members, maj_files, tol)
        groups.append(_as_group(names[c], members, is_major, evidence[c], relation, _claimed(config) if is_major else ""))
        if not is_major:
            for m in members:
                problems.append(Problem(m.file, "layer_mapping_outlier",
                                        f"holds other layers than the majority group {names[majority_c]} "
                                        f"({len(maj_files)} files); group {names[c]} ({len(members)} files): {relation}"))
    if unplaced:
        rest = [files[i] for c in isolated for i in clusters[c].members]
        groups.append(_as_group("unplaced", rest, False, "none", "not compared: no token prefix shared with other files "
                                "and a norm profile that fits no group", ""))
    return groups, problems, names[majority_c]


def _as_group(name: str, members: Sequence[FileSummary], major: bool, evidence: str, relation: str, claimed: str) -> Group:
    first = members[0]
    return Group(name, len(members), major, first.slots or 0, first.hidden_size or 0, first.dtype or "",
                 _median_profile(members), evidence, first.file, relation, claimed, tuple(m.file for m in members))


def _name(k: int) -> str:
    return chr(ord("A") + k) if k < 26 else f"G{k}"


def _median_profile(files: Sequence[FileSummary]) -> tuple[float, ...]:
    a = np.array([f.median_norms for f in files], dtype=np.float64)
    return tuple(float(v) for v in np.nanmedian(a, axis=0))


def _by_norm_profile(cands: list[FileSummary], groups: list[list[FileSummary]]) -> int | None:
    """Index of the group whose per-slot norm profile holds the candidates within its own spread, if one does."""
    prof = np.log(np.array(_median_profile(cands)))
    best, best_dev = None, math.inf
    for k, g in enumerate(groups):
        logs = np.log(np.array([f.median_norms for f in g], dtype=np.float64))
        centre = np.nanmedian(logs, axis=0)
        spread = np.maximum(np.nanmax(np.abs(logs - centre), axis=0), 0.02)
        dev = np.abs(prof - centre)
        if np.all(dev <= 2 * spread) and float(dev.max()) < best_dev:
            best, best_dev = k, float(dev.max())
    return best


def _relation(group: Sequence[FileSummary], majority: Sequence[FileSummary], tol: float) -> str:
    """What an outlier group holds compared with the majority, from pairs sharing the longest prefixes."""
    pairs = sorted(((_lcp(g, m), gi, mi) for gi, g in enumerate(group) for mi, m in enumerate(majority)), reverse=True)
    pairs = [p for p in pairs if p[0] > 0][:_PAIRS]
    k = group[0].slots or 0
    kmaj = majority[0].slots or 0 if majority else 0
    err = np.full((len(pairs), k, kmaj), np.nan)
    ratio = np.full((len(pairs), k, kmaj), np.nan)
    tokens = 0
    for p, (n, gi, mi) in enumerate(pairs):
        for a in range(k):
            for b in range(kmaj):
                r = slot_errors(group[gi], majority[mi], a, b, n)
                if r is not None:
                    err[p, a, b], ratio[p, a, b] = r[0], r[1]
                    tokens = max(tokens, r[2])
    embed = _embedding_slots(group)
    if not pairs or np.all(np.isnan(err)):
        prof, maj = _median_profile(group), _median_profile(majority)
        rel = " / ".join(f"{a / b:.2f}" for a, b in zip(prof, maj))
        return f"no token prefix shared with the majority; per-slot norm ratio to the majority {rel} (norm profile)"
    e = np.nanmedian(err, axis=0)
    r = np.nanmedian(ratio, axis=0)
    parts, equal, shallower, deeper = [], {}, [], []
    for a in range(k):
        b = int(np.nanargmin(e[a])) if not np.all(np.isnan(e[a])) else a
        if a in embed:
            parts.append(f"slot {a} = the embeddings (B0: the same vector for the same token wherever it stands)")
        elif e[a, b] <= tol:
            equal[a] = b
            parts.append(f"slot {a} = the majority's slot {b} ({e[a, b]:.1%} apart)")
        else:
            same = e[a, a] if a < kmaj else float("nan")
            nr = r[a, a] if a < kmaj else float("nan")
            if a < kmaj and b == a and nr < 1:
                shallower.append(a)
            elif a < kmaj and b == a and nr > 1:
                deeper.append(a)
            parts.append(f"slot {a}: {same:.0%} from the majority's slot {a}, norm x{nr:.2f}")
    shifts = {b - a for a, b in equal.items()}
    if equal and len(equal) + len(embed) == k and len(shifts) == 1 and shifts != {0}:
        d = shifts.pop()
        head = f"shifted by {abs(d)} slot(s): slot s holds the majority's slot s{d:+d}"
        if embed:
            head += f", slot(s) {', '.join(map(str, sorted(embed)))} the embeddings"
    elif equal and shallower and len(equal) + len(shallower) + len(embed) == k:
        head = "shallower layers: " + ", ".join(f"slot {a} = majority slot {b}" for a, b in equal.items())
    elif len(shallower) == k:
        head = ("shallower layers than the majority at every slot: lower norms on the same tokens and nearest to the "
                "majority's same slot, as capture ids set one (or a few) layers shallower give; the exact offset needs "
                "the neighbouring layers")
    elif len(deeper) == k:
        head = ("deeper layers than the majority at every slot: higher norms on the same tokens and nearest to the "
                "majority's same slot, as capture ids set one (or a few) layers deeper give; the exact offset needs "
                "the neighbouring layers")
    else:
        head = "other layers than the majority"
    return f"{head} — on {tokens} shared-prefix token(s): " + "; ".join(parts)


def _embedding_slots(group: Sequence[FileSummary]) -> set[int]:
    """Slots whose vectors for a repeated token id are identical at different positions (position-free: B0)."""
    out: set[int] = set()
    f = group[0]
    if f.prefix_proj is None or f.prefix_norms is None:
        return out
    ids = f.prefix_ids[: f.prefix_proj.shape[0]]
    where: dict[int, list[int]] = defaultdict(list)
    for t, tok in enumerate(ids):
        where[tok].append(t)
    repeats = [v for v in where.values() if len(v) > 1]
    if not repeats:
        return out
    for s in range(f.slots or 0):
        errs = []
        for pos in repeats:
            a, b = pos[0], pos[1]
            ref = float(f.prefix_norms[b, s])
            if ref > 0:
                errs.append(float(np.linalg.norm(f.prefix_proj[a, s] - f.prefix_proj[b, s])) / ref)
        if errs and max(errs) < 1e-3:
            out.add(s)
    return out


def _claimed(config: dict | None) -> str:
    """The layer ids a config.json at the dataset's top claims (a label, not checked by value)."""
    if not config:
        return ""
    nested = config.get("eagle_config")
    nested = nested if isinstance(nested, dict) else {}
    for where, ids in (("eagle_config.eagle_aux_hidden_state_layer_ids", nested.get("eagle_aux_hidden_state_layer_ids")),
                       ("eagle_aux_hidden_state_layer_ids", config.get("eagle_aux_hidden_state_layer_ids"))):
        if isinstance(ids, list):
            return f"config.json claims {where} {ids}"
    return ""
