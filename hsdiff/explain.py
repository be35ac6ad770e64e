"""Words from records: the cause in a sentence, the walk-through of the evidence, what to print next
time, and the warnings about printed norms. Nothing here loads a tensor or decides anything: every
decision is in :mod:`hsdiff.decide`, every number was measured by :mod:`hsdiff.comparison`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .decide import NOISE_TOLERANCE
from .model import (
    Configured,
    Evidence,
    LabelSource,
    Recommendation,
    Report,
    SlotResult,
    Status,
    Verdict,
    layers_in_words,
    pct,
)
from .model.diagnosis import Diagnosis, Finding, Miss, NormFinding, Override
from .overrides import TORN_FACTOR
from .rules import conventions as conv
from .rules.serving import boundary_list

__all__ = ["Words", "explain", "norm_warnings"]


@dataclass(frozen=True)
class Words:
    cause: str
    walkthrough: tuple[str, ...]


def explain(
    results: Sequence[SlotResult],
    verdict: Verdict,
    diagnosis: Diagnosis,
    configured: Configured | None,
    claims: Sequence[int | None],
    claim_src: str,
    label_offset: int | None,
    recommended: Recommendation,
    num_layers: int | None,
    printed_evidence: bool,
    tolerance: float = NOISE_TOLERANCE,
) -> Words:
    """The cause and the walk-through of a comparison (``printed_evidence``: the inference side was a
    debug log, so the walk-through ends with what the log lacked). ``verdict`` is the one the slots
    give; what overrode it (``diagnosis.overrides``) leads the cause."""
    cause = _cause(verdict, diagnosis, results, configured, num_layers, recommended, label_offset, claim_src)
    cause = _overrides(diagnosis, results, claims, tolerance, cause, configured, num_layers, label_offset, claim_src)
    return Words(
        cause, tuple(_walkthrough(results, configured, claims, claim_src, recommended, printed_evidence, num_layers))
    )


def _overrides(
    d: Diagnosis,
    results: Sequence[SlotResult],
    claims: Sequence[int | None],
    tolerance: float,
    cause: str,
    configured: Configured | None = None,
    num_layers: int | None = None,
    label_offset: int | None = None,
    claim_src: str = "",
) -> str:
    """The cause the slots give, led by what overrode their verdict, in the order it was applied."""
    for why in d.overrides:
        if why == Override.UNDESCRIBED and configured is not None and label_offset is not None:
            r = next(r for r in results if r.evidence == Evidence.OBSERVED and r.claimed_boundary is not None)
            cause = (
                f"The configured ids {list(configured.ids)} cannot describe this dump: the capture they call "
                f"B{r.boundary_index} equals training slot {r.slot}, which the training labels ({claim_src}) call "
                f"B{r.claimed_boundary}, {layers_in_words(label_offset)} away; no engine or trainer counts layers "
                "that differently, so one of the two labels is wrong. If the dump was made with other ids, compare "
                "with the ids it was made with (or dump again with these); if it was made with these, the training "
                f"labels are wrong. Read with the configured ids as its labels: {cause}"
            )
        if why == Override.SLOT_COUNT and configured is not None:
            n, k = len(configured.boundary_indices), len(results)
            cause = (
                f"The engine is fed {n} slot{'s' if n != 1 else ''} (ids {list(configured.ids)} read as "
                f"{boundary_list(list(configured.boundary_indices), num_layers)}), but the draft was trained on {k}: "
                f"its fc takes {k} × the hidden size, so it fails at load or is fed other layers than it learnt, "
                f"whatever the slots that are fed show. Configure {k} ids, one per training slot. {cause}"
            )
        if why == Override.TORN_TOKENS:
            torn = [r for r in results if r.slot in d.torn and r.match is not None]
            what = "; ".join(
                f"slot {r.slot}: median error {pct(r.match.metrics.rel_err)}, but the worst tenth of its "
                f"{r.match.metrics.tokens} ordinary tokens beyond {pct(r.match.metrics.p90_err)}"
                for r in torn
                if r.match is not None
            )
            cause = (
                f"Part of the sequence differs: {what}. The values match on most tokens and differ far beyond "
                f"noise (over {pct(TORN_FACTOR * tolerance)}) on others, so the engine feeds another tensor on "
                "part of the sequence (a later prefill chunk, a cached prefix, decode steps), or the two sides "
                "ran prompts that share only part of their tokens: compare the per-token errors (--plot, "
                f"tokens.png). {cause}"
            )
        elif why == Override.NORMS_ONLY and d.norms:
            cause = _norms_only(d.norms, claims, tolerance)
        elif why == Override.RANK_CONFLICT and d.conflicts:
            more = f" (and {len(d.conflicts) - 1} more tensor(s))" if len(d.conflicts) > 1 else ""
            cause = (
                f"Tensor-parallel ranks disagree: {d.conflicts[0]}{more}. Replicated ranks must hold the same "
                "hidden states; check the all-reduce and that every rank runs the same configuration. On the "
                f"first rank: {cause}"
            )
    return cause


def _norms_only(findings: Sequence[NormFinding], claims: Sequence[int | None], tolerance: float) -> str:
    """The cause when the inference side printed only per-token norms: the layers they rule out."""
    names = [f"B{b}" if b is not None else "layer unknown" for b in claims]
    said, wrong = [], False
    for f in findings:
        out = f.ruled_out(tolerance)
        where = f"the engine's slot {f.slot} ({f.printed.origin}, {len(f.printed.norms)} tokens)"
        own = f.differences.get(f.slot)
        if f.slot in out:
            wrong = True
            others = [s for s in out if s != f.slot]
            said.append(
                f"{where} is not training slot {f.slot} ({names[f.slot]}): its norms are {own:.1%} off"
                + (f"; nor {', '.join(f'{names[s]} ({pct(f.differences[s])})' for s in others)}" if others else "")
            )
        elif own is not None:
            said.append(
                f"{where} is within {own:.1%} of training slot {f.slot} ({names[f.slot]}), which norms cannot "
                "confirm"
                + (f"; it is not {', '.join(f'{names[s]} ({pct(f.differences[s])})' for s in out)}" if out else "")
            )
    tokens = max(len(f.printed.norms) for f in findings)
    text = "; ".join(said)
    return (
        f"The inference side printed only per-token norms ({tokens} tokens × {len(findings)} slots): norms cannot "
        f"prove a layer, but a median norm difference over the {pct(tolerance)} tolerance rules one out (no match "
        f"can differ less in values than in norms). {text[:1].upper() + text[1:]}. "
        + ("The engine feeds the draft other layers than it was trained on. " if wrong else "")
        + "Print the values of each capture (e.g. h[:4, :16]) to identify the layers."
    )


def runs_disagree(reports: Mapping[str, Report], run: str) -> str:
    """The cause of a report on dumper run ``run`` when the runs in the inference directory disagree."""
    verdicts = ", ".join(f"{n}: {r.verdict}" for n, r in reports.items())
    return (
        f"The dumper runs in the inference directory disagree ({verdicts}); the configured ids describe at "
        f"most one of them. On run {run}: {reports[run].cause}"
    )


def norm_warnings(results: Sequence[SlotResult]) -> list[str]:
    """A warning for each matched printed capture whose printed norm equals none of the training norms."""
    out = []
    for r in results:
        if r.match is None or r.match.norm_check is None or r.match.norm_check.agree is not None:
            continue
        nc = r.match.norm_check
        main = [(k, v) for k, v in nc.refs if not k.startswith("token ")]
        ref_text = ", ".join(f"{k.replace('the ', '', 1)} {v:.4g}" for k, v in main)
        out.append(
            f"{r.match.capture.origin}: the values match training slot {r.slot}, but the printed norm {nc.printed:.4g} "
            f"agrees with none of the training side's norms ({ref_text}); {nc.reason}. Norms are secondary evidence: "
            "the values decide, and the match stands"
        )
    return out


def _bl(bs: Sequence[int | None]) -> str:
    return "[" + ", ".join("?" if b is None else str(b) for b in bs) + "]"


def _cause(
    verdict: Verdict,
    diagnosis: Diagnosis,
    results: Sequence[SlotResult],
    configured: Configured | None,
    L: int | None,
    recommended: Recommendation,
    label_offset: int | None,
    claim_src: str,
) -> str:
    """The cause of the comparison, in words, from the diagnosis: the finding's own sentence, then what stays open."""
    title = conv.rule(recommended.engine).title
    bs = [r.boundary_index for r in results]
    kind = diagnosis.kind
    if kind == Finding.NO_MATCH:
        return _cause_no_match(diagnosis, results, configured, L, title, claim_src)
    if kind == Finding.UNSERVABLE:  # no id list serves the training slots: that is the cause, whatever is configured
        return " ".join(recommended.unservable)
    parts: list[str] = []
    if configured is not None:
        if kind == Finding.MATCH:
            return _cause_match(results, configured, L, title)
        if kind == Finding.LAYER_SHIFT:
            parts.append(_cause_layer_shift(diagnosis, bs, configured, L, recommended))
        elif kind == Finding.SLOT_SHIFT:
            parts.append(_cause_slot_shift(diagnosis, bs, configured, L, title))
        elif kind == Finding.SLOTS_DIFFER:
            parts.append(_cause_slots_differ(diagnosis, results, configured, L, title))
    if kind == Finding.IDENTIFIED:
        return f"Every training slot was identified by value: B{_bl(bs)}."
    if _left_open(verdict, parts, results):
        parts += _open_parts(results, configured, claim_src)
    if label_offset:
        parts.append(_label_offset_part(results, label_offset, claim_src))
    parts = [p for p in parts if p]
    return " ".join(parts) if parts else "See the per-slot notes."


def _cause_no_match(
    diagnosis: Diagnosis,
    results: Sequence[SlotResult],
    configured: Configured | None,
    L: int | None,
    title: str,
    claim_src: str,
) -> str:
    """No capture equals a training slot: a consistent miss, an offset the labels show, or different tensors."""
    bs = [r.boundary_index for r in results]
    closest = [r.runner_up for r in results if r.runner_up is not None]
    best = min((c.metrics.rel_err for c in closest), default=float("inf"))
    if diagnosis.miss is not None and configured is not None:
        return _miss(diagnosis.miss, configured, results, title, L)
    shift = diagnosis.offset
    if shift and configured is not None:  # an offset from the labels is always against a configuration
        cfg = list(configured.boundary_indices)
        return (
            f"Every slot is captured {layers_in_words(shift)} too {'deep' if shift > 0 else 'shallow'}: the "
            f"configured ids {list(configured.ids)} make {title} capture B{cfg}, but the training labels "
            f"({claim_src}) say B{_bl(bs)}. No capture equals a training slot by value (closest error "
            f"{pct(best)}, what neighbouring layers differ by), so the recommendation follows the training labels."
        )
    top = min(closest, key=lambda c: c.metrics.rel_err, default=None)
    seen = "" if top is None else f", norm ratio {top.metrics.norm_ratio:.2f}, cosine {top.metrics.cosine:.2f}"
    return (
        f"No inference capture equals any training slot (closest error {pct(best)}{seen}): the two sides hold "
        "different tensors. Check post-norm vs pre-norm (HF's last hidden state has the final norm applied; a "
        "norm ratio far from 1), that both ran the same weights, and that the same sample was replayed (a low "
        "cosine)."
    )


def _cause_match(results: Sequence[SlotResult], configured: Configured, L: int | None, title: str) -> str:
    """The configured ids capture exactly the training slots."""
    cfg = list(configured.boundary_indices)
    return (
        f"The configured ids {list(configured.ids)} make {title} capture {boundary_list(cfg, L)}, exactly the "
        "training slots." + _consistent(results)
    )


def _cause_layer_shift(
    diagnosis: Diagnosis, bs: list[int | None], configured: Configured, L: int | None, recommended: Recommendation
) -> str:
    """Every slot is captured the same number of layers off, and whether the engine's id convention explains it."""
    r = conv.rule(recommended.engine)
    title = r.title
    cfg = list(configured.boundary_indices)
    d = diagnosis.offset or 0
    word = "late" if d > 0 else "early"
    why = ""
    if d == 1 and r.index == conv.OUTPUT:
        why = f" — the ids were written as boundary indices, but {title} reads them as layer outputs and adds 1"
    elif d == -1 and r.index == conv.BOUNDARY:
        why = f" — the ids were written as layer-output indices, but {title} uses them as boundary indices"
    return (
        f"Every slot is captured {layers_in_words(d)} too {word}: {title} takes {boundary_list(cfg, L)} "
        f"where training used {boundary_list(bs, L)}{why}."
    )


def _cause_slot_shift(
    diagnosis: Diagnosis, bs: list[int | None], configured: Configured, L: int | None, title: str
) -> str:
    """The configured ids are the training slots moved along by whole slots, and which boundary is never captured."""
    cfg = list(configured.boundary_indices)
    shift = diagnosis.offset or 0
    missing = list(diagnosis.missing)
    return (
        f"The configured ids {list(configured.ids)} are shifted by {shift} slot{'s' if shift > 1 else ''}: {title} "
        f"captures {boundary_list(cfg, L)}, so slot 0 receives {conv.name_boundary(cfg[0], L)} "
        f"while training slot 0 was {conv.name_boundary(bs[0], L)}"
        + (f", and {boundary_list(missing, L)} is never captured." if missing else ".")
    )


def _cause_slots_differ(
    diagnosis: Diagnosis, results: Sequence[SlotResult], configured: Configured, L: int | None, title: str
) -> str:
    """Some training slots are not what the configured ids capture: which ones, and the first one's reason."""
    cfg = list(configured.boundary_indices)
    bad = [r for r in results if r.slot in diagnosis.slots]
    return (
        "Training slot"
        + ("s " if len(bad) > 1 else " ")
        + ", ".join(
            f"{r.slot} ({'not identified' if r.boundary_index is None else f'B{r.boundary_index}'})" for r in bad
        )
        + f" {'are' if len(bad) > 1 else 'is'} not what {title} captures "
        f"with ids {list(configured.ids)} ({boundary_list(cfg, L)}): " + bad[0].against_config + "."
    )


def _left_open(verdict: Verdict, parts: list[str], results: Sequence[SlotResult]) -> bool:
    """Whether the cause must say what the evidence leaves open: an inconclusive verdict, or a mismatch that no
    finding explains or that has an ambiguous slot."""
    return verdict == Verdict.INCONCLUSIVE or (
        verdict == Verdict.MISMATCH and (not parts or any(r.status == Status.AMBIGUOUS for r in results))
    )


def _open_parts(results: Sequence[SlotResult], configured: Configured | None, claim_src: str) -> list[str]:
    """What the evidence leaves open: slots resting on the training labels alone, and slots it does not settle."""
    open_ = [
        r
        for r in results
        if r.evidence != Evidence.CONSISTENT
        and (r.boundary_index is None or r.status in (Status.UNVERIFIED, Status.AMBIGUOUS))
    ]
    parts = [_consistent(results).strip()]
    inferred = [r for r in results if r.evidence == Evidence.INFERRED]
    if inferred and configured is None:
        many = len(inferred) > 1
        parts.append(
            f"Slot{'s' if many else ''} {', '.join(str(r.slot) for r in inferred)} "
            f"{'rest' if many else 'rests'} on "
            f"the training labels alone (B{_bl([r.boundary_index for r in inferred])}, {claim_src}): no capture "
            f"identified {'them' if many else 'it'} by value; pass --layer-ids (the ids the engine ran with) to "
            "label the captures."
        )
    if open_:
        parts.append(
            "The evidence does not settle slot"
            + ("s " if len(open_) > 1 else " ")
            + ", ".join(str(r.slot) for r in open_)
            + ": "
            + "; ".join(r.note for r in open_[:2])
            + "."
        )
    return parts


def _label_offset_part(results: Sequence[SlotResult], label_offset: int, claim_src: str) -> str:
    """The training side's own labels are a whole number of layers off the values they were compared by."""
    r0 = next((r for r in results if r.evidence == Evidence.OBSERVED and r.claimed_boundary is not None), results[0])
    return (
        f"The training side's own labels ({claim_src}) are {layers_in_words(label_offset)} off the values: what "
        f"they call B{r0.claimed_boundary} matches the capture labelled B{r0.boundary_index}."
    )


def _miss(m: Miss, configured: Configured, results: Sequence[SlotResult], title: str, L: int | None) -> str:
    """Nothing matched, but every capture sits the same way off its training slot."""
    seen = m.seen
    cfg = list(configured.boundary_indices)
    figures = (
        f"{seen.norms} norms on the same tokens, {_range(seen.ratios, 'ratio')}; errors {_range(seen.errors)} at "
        f"cosines {seen.cosines[0]:.2f}–{seen.cosines[1]:.2f}, as neighbouring layers differ"
    )
    steps = (1,) if m.layers is not None else (1, 2)  # the layers the miss points at
    near = sorted({b - m.direction * k for b in cfg for k in steps if b - m.direction * k >= 0} - set(cfg))
    confirm = f"dump the layers {_and([f'B{b}' for b in near])} once to confirm"
    floor = "" if m.separation is None else f" ({pct(m.separation)}, bounded from the other captures and the depth)"
    if m.layers is None:
        return (
            f"No capture equals a training slot, but every capture sits {seen.way} than its training slot "
            f"({figures}); no engine's reading of the ids {list(configured.ids)} explains a single step, and the "
            f"errors do not show one layer (each capture the nearest to its slot but for a neighbour, above the least "
            f"one layer moves the states by here{floor}), so the distance is not known: {confirm} and find it."
        )
    bs = [r.boundary_index for r in results]
    head = (
        f"No capture equals a training slot, but every capture sits about one layer {seen.way} than its training "
        f"slot ({figures})"
    )
    claimed = [r.claimed_boundary for r in results]
    refuted = (
        f" The training side's own labels say {boundary_list(claimed, L)}, the layers the configured ids capture: "
        "the values refute them (no capture so labelled equals its slot)."
        if any(c is not None for c in claimed) and claimed == cfg[: len(claimed)]
        else ""
    )
    if m.explained_by:
        return (
            f"{head}: {title} takes {boundary_list(cfg, L)} where training used {boundary_list(bs, L)}, likely ids "
            f"written in another convention — {_and(list(m.explained_by))} read {list(configured.ids)} as exactly "
            f"the training layers. The recommendation is inferred from that, not observed: {confirm}.{refuted}"
        )
    way = "shallower" if seen.sign > 0 else "deeper"
    return (
        f"{head}: {title} takes {boundary_list(cfg, L)} where training likely used {boundary_list(bs, L)}. No "
        f"engine's reading of the ids {list(configured.ids)} names those layers; each capture is the nearest to its "
        f"slot but for a neighbour and above the least one layer moves the states by here{floor}, and one layer is "
        f"the nearest reading (two layers off can look the same). The recommendation moves each id one layer {way} "
        f"in {title}'s convention: inferred from the miss at low confidence, not observed — {confirm}.{refuted}"
    )


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _range(xs: tuple[float, float], what: str = "") -> str:
    lo, hi = xs
    if what == "ratio":
        return f"ratio {lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"ratios {lo:.2f}–{hi:.2f}"
    return pct(lo) if pct(lo) == pct(hi) else f"{pct(lo)}–{pct(hi)}"


def _consistent(results: Sequence[SlotResult]) -> str:
    """A sentence for the slots whose answer rests on labels the values only agree with."""
    cons = [r for r in results if r.evidence == Evidence.CONSISTENT]
    if not cons:
        return ""
    sink = [r for r in cons if r.match is not None and r.match.metrics.sink_only]
    many = len(cons) > 1
    figures = "; ".join(_figures(r) for r in cons if r.match is not None)
    text = (
        f" Slot{'s' if many else ''} {', '.join(str(r.slot) for r in cons)} "
        f"{'rest' if many else 'rests'} on the labels (B{_bl([r.boundary_index for r in cons])}): the values "
        f"equal {'them' if many else 'it'} within noise{f' ({figures})' if figures else ''} but do not rule out "
        "a neighbouring layer"
    )
    if sink:
        text += (
            f" (slot{'s' if len(sink) > 1 else ''} {', '.join(str(r.slot) for r in sink)}: attention-sink "
            "tokens only, on which a gate does not pass)"
        )
    if not any(r.status == Status.UNVERIFIED for r in cons if r not in sink):
        return text + "."
    return text + (
        ". Labels can be wrong the same way as the configuration under test, so a gate does not pass "
        f"on them: {_to_dump(cons)} and compare again."
    )


def _figures(r: SlotResult) -> str:
    """A slot's error and the separation of its neighbours it was judged against, in figures."""
    assert r.match is not None  # only matched slots have figures
    m = r.match.metrics
    b = r.match.boundary
    text = (
        f"B{r.boundary_index} at {pct(m.rel_err)}"
        if b is None or b == r.boundary_index
        else f"B{r.boundary_index}: B{b} at {pct(m.rel_err)}"
    )
    if r.separation is not None:
        text += f", its neighbours {'measured' if r.separation_measured else 'estimated'} {pct(r.separation)} away"
    elif r.match is not None and r.match.capture.is_partial:
        text += f" on {m.values} printed values"
    return text


def _to_dump(results: Sequence[SlotResult]) -> str:
    """What to dump so the values can tell these slots' layers from their neighbours."""
    near = sorted(
        {
            b + s
            for r in results
            if r.boundary_index is not None
            and not r.separation_measured
            and not (
                r.runner_up is not None
                and r.runner_up.boundary is not None
                and abs(r.runner_up.boundary - r.boundary_index) == 1
            )
            for b in [r.boundary_index]
            for s in (-1, 1)
            if b + s >= 0
        }
    )
    printed = any(r.match is not None and r.match.capture.is_partial for r in results)
    more = "print more values of each capture (whole rows of ordinary tokens)" if printed else "dump more tokens"
    if not near:
        return more
    names = [f"B{b}" for b in near]
    listed = _and(names)
    return (
        f"{more + ', or ' if printed else ''}dump the neighbouring layer{'s' if len(names) > 1 else ''} "
        f"{listed} once{'' if printed else ' (or more tokens)'}"
    )


def _walkthrough(
    results: Sequence[SlotResult],
    configured: Configured | None,
    claims: Sequence[int | None],
    claim_src: str,
    recommended: Recommendation,
    printed_evidence: bool,
    num_layers: int | None = None,
) -> list[str]:
    lines = []
    if any(c is not None for c in claims):
        lines.append(f"The training side labels its slots {boundary_list(list(claims), num_layers)} ({claim_src}).")
    if configured is not None:
        lines.append(
            f"The engine is configured with ids {list(configured.ids)} "
            f"({configured.engine}, from {configured.source}), "
            f"which it reads as {boundary_list(list(configured.boundary_indices), num_layers)}."
        )
    for r in results:
        head = f"Slot {r.slot}: "
        if r.match is not None and r.match.capture.is_partial:
            lines.append(head + _printed_evidence(r) + f" → {r.status}: {r.note}")
        elif r.match is not None:
            m = r.match.metrics
            c = r.match.capture
            lab = "no layer label" if c.layer is None else f"labelled {c.layer} ({c.layer.source})"
            sample = f" of sample {r.match.sample}" if r.match.sample else ""
            tied = f" (equal in {r.match.samples_tied} samples: shared tokens)" if r.match.samples_tied > 1 else ""
            runner = ""
            if r.runner_up is not None:
                runner = f"; runner-up {r.runner_up.capture.label()} at {pct(r.runner_up.metrics.rel_err)}"
            lines.append(
                head
                + f"the tensor at {c.origin} ({lab}) equals training{sample}{tied} at token offset {r.match.offset}: "
                f"median error {pct(m.rel_err)} over {m.tokens} token{'s' if m.tokens != 1 else ''} "
                f"({m.values} values), cosine {m.cosine:.4f}{runner}. → {r.status}: {r.note}"
            )
        else:
            lines.append(head + f"{r.status}: {r.note}")
    if printed_evidence:
        lines.append(_next_time(results, recommended, configured))
    return lines


def _printed_evidence(r: SlotResult) -> str:
    """Which printed values matched this slot, at which training token, with what error, and what
    their labels claimed: the walk-through an engineer would write for a debug log."""
    assert r.match is not None
    c, m = r.match.capture, r.match.metrics
    if c.layer is None:
        claim = "no layer label"
    elif c.layer.source == LabelSource.CONFIGURED:
        claim = f"no layer label; as slot {c.slot} of the configured ids it is {c.layer}"
    else:
        claim = f"its label says {c.layer}"
    text = f"the values printed at {c.origin} ({claim})"
    ev = r.match.printed
    if ev is None:
        return text + f" match training at {pct(m.rel_err)}."
    sample = f"sample {r.match.sample}" if r.match.sample else "training"
    tied = f" (the same in {r.match.samples_tied} samples: they share these tokens)" if r.match.samples_tied > 1 else ""
    out = text + f" sit at {_token_span(list(ev.tokens))} of {sample}{tied}"
    if ev.token is not None and ev.printed:
        pv = ", ".join(f"{v:.4g}" for v in ev.printed)
        tv = ", ".join(f"{v:.4g}" for v in ev.training)
        out += f": printed {pv} where training holds {tv} (token {ev.token}, {_token_span(list(ev.cols), 'column')})"
    out += (
        f"; median error {pct(m.rel_err)} over {m.tokens} token{'s' if m.tokens != 1 else ''} ({m.values} values), "
        f"cosine {m.cosine:.4f}"
    )
    if ev.sinks and not ev.sinks_only:
        out += f"; {_token_span(list(ev.sinks))} left out (attention sink: barely changes between layers)"
    elif ev.sinks:
        out += " — attention-sink tokens only"
    if r.runner_up is not None:
        out += f"; next best {r.runner_up.capture.label()} at {pct(r.runner_up.metrics.rel_err)}"
    nc = r.match.norm_check
    if nc is not None:
        out += (
            f"; its printed norm {nc.printed:.4g} agrees with {nc.agree}"
            if nc.agree
            else f"; its printed norm {nc.printed:.4g} does not (see warnings)"
        )
    return out + "."


def _token_span(ts: list[int], word: str = "token") -> str:
    if not ts:
        return f"no {word}"
    if len(ts) == 1:
        return f"{word} {ts[0]}"
    runs, start, prev = [], ts[0], ts[0]
    for t in [*ts[1:], None]:
        if t is not None and t == prev + 1:
            prev = t
            continue
        runs.append(f"{start}" if start == prev else f"{start}–{prev}")
        if t is not None:
            start = prev = t
    return f"{word}s " + ", ".join(runs)


def _next_time(results: Sequence[SlotResult], recommended: Recommendation, configured: Configured | None) -> str:
    """What the log lacked, and what to print next time."""
    notes = []
    for r in results:
        m = r.match.metrics if r.match is not None else None
        if r.evidence == Evidence.OBSERVED:
            if m is not None and m.values < 20:
                notes.append(f"slot {r.slot} rests on {m.values} printed values")
            continue
        if m is None:
            notes.append(
                f"slot {r.slot} matched no printed capture (B{'?' if r.boundary_index is None else r.boundary_index} "
                "was not in the log)"
            )
        elif m.sink_only:
            notes.append(f"slot {r.slot} was seen on the first token only (the attention sink)")
        else:
            notes.append(
                f"slot {r.slot} matched within noise ({pct(m.rel_err)}) but not clearly enough to rule out "
                "a neighbouring layer"
            )
    if not notes:
        return "The printed values settle every slot."
    text = (
        "What the log lacked: " + "; ".join(notes) + ". Next time print, for every captured layer, its layer number, "
    )
    text += (
        'shape and a few ordinary tokens with more columns, e.g. f"layer={i} shape={tuple(h.shape)} '
        "h[1:5, :64]={h[1:5, :64].tolist()}\" (or dump whole tensors with SGLang's dumper)"
    )
    if (
        configured is not None
        and list(recommended.ids) != list(configured.ids)
        and all(i is not None for i in recommended.ids)
    ):
        text += f", and run with the recommended ids {list(recommended.ids)} to confirm that every slot then matches"
    return text + "."
