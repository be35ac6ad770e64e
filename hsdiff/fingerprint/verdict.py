"""From the engine slots' identities to the report's slots, verdict, cause, walk-through and scores."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .. import decide
from ..comparison import Options, settings_of
from ..errors import InputError
from ..model import (
    TRAIN,
    Candidate,
    Capture,
    Configured,
    Evidence,
    LabelSource,
    Layer,
    Metrics,
    Origin,
    Score,
    Settings,
    SlotResult,
    Status,
    Verdict,
    pct,
)
from ..rules import conventions as conv
from ..rules.serving import boundary_list
from . import file as fpfile
from .align import Placement
from .identify import Identity, upper_median

__all__ = [
    "EngineSlot",
    "NOISE_WARNING",
    "fp_settings",
    "slot_results",
    "plain_verdict",
    "label_warnings",
    "noise_warnings",
    "fp_cause",
    "walkthrough",
    "fp_scores",
]


#: The noise an engine adds may exceed the noise floor measured at recording (other kernels, fp8): past
#: this multiple the report says so (the identification holds; it is the numerics that differ).
NOISE_WARNING = 3.0


@dataclass
class EngineSlot:
    """The captures of one engine slot (one configured layer, or one label), pooled over the requests:
    per-token errors against every stored boundary and what they identify."""

    key: int | str
    captures: list[Capture] = field(default_factory=list)
    placements: list[Placement] = field(default_factory=list)
    errors: list[np.ndarray] = field(default_factory=list)  # [rows, n] per capture
    cosines: list[np.ndarray] = field(default_factory=list)  # [rows, n]
    ratios: list[np.ndarray] = field(default_factory=list)  # [rows, n] capture norm / stored norm
    seen: set[int] = field(default_factory=set)  # stored tokens compared (each once)
    identity: Identity | None = None

    @property
    def boundary(self) -> int | None:
        """The layer the label says (None for an unlabelled capture)."""
        return self.key if isinstance(self.key, int) else None

    def pooled(self, what: str = "errors") -> np.ndarray:
        parts = getattr(self, what)
        return np.concatenate(parts, axis=1) if parts else np.zeros((0, 0), dtype=np.float32)

    def label(self) -> str:
        return self.captures[0].label() if self.captures else str(self.key)


def fp_settings(opts: Options, family: str, L: int, H: int) -> Settings:
    return settings_of(opts, family, L, "the fingerprint", H, "the fingerprint")


def _metrics(g: EngineSlot, b: int, hidden: int) -> Metrics:
    """The capture against stored row ``b``: upper median error, lower median cosine (sketch space), 90th
    percentile error and median norm ratio (whole rows against the stored norms) over the tokens compared."""
    e = g.pooled()[b]
    n = int(e.size)
    if not n:
        return Metrics.empty()
    cos = np.sort(g.pooled("cosines")[b])
    return Metrics(
        upper_median(e),
        float(cos[(n - 1) // 2]),
        float(np.quantile(e, 0.9)),
        float(np.median(g.pooled("ratios")[b])),
        n,
        n * hidden,
    )


def _candidate(g: EngineSlot, b: int, fp: fpfile.Fingerprint) -> Candidate:
    at = g.placements[0]
    name = fp.meta["probes"]["items"][at.probe].get("name")
    return Candidate(g.captures[0], name, at.offset, _metrics(g, b, fp.hidden_size))


def _stored(fp: fpfile.Fingerprint, b: int, g: EngineSlot) -> Candidate:
    """A stored boundary as the runner-up of a capture: the fingerprint's row, with the capture's errors to it."""
    cap = Capture(
        TRAIN,
        Origin(fp.name(), "fingerprint", format="fingerprint"),
        None,
        "float16",
        fp.hidden_size,
        layer=Layer(b, source=LabelSource.KEY),
    )
    return Candidate(cap, None, 0, _metrics(g, b, fp.hidden_size))


def _fed(groups: dict[int | str, EngineSlot], cfg: int | None) -> EngineSlot | None:
    return None if cfg is None else groups.get(cfg)


def _share(i: Identity, b: int) -> str:
    k, n = i.share_against(b)
    return f"{k}/{n}"


def slot_results(
    fp: fpfile.Fingerprint,
    groups: dict[int | str, EngineSlot],
    configured: Configured | None,
    opts: Options,
    family: str,
    final_row: int | None,
) -> tuple[list[SlotResult], list[int | None]]:
    """Per training slot: its boundary (the fingerprint's), and what the capture the engine feeds it is."""
    trained = fp.training
    if not trained:
        draft = fp.draft or {}
        ids = draft.get("ids")
        if not ids:
            raise InputError(
                "the fingerprint holds no training slots and no draft ids to check against",
                path=fp.path,
                hint="record it with the training dump (hsdiff fingerprint --train TRAIN) or the draft (--draft)",
            )
        bs = conv.to_boundary(list(ids), "specforge", num_layers=fp.num_layers, keep_order=True)
        trained = tuple(fpfile.TrainingSlot(i, b, "labelled") for i, b in enumerate(bs))
    cfg_b = list(configured.boundary_indices) if configured else None
    L = fp.num_layers
    out: list[SlotResult] = []
    for ts in trained:
        s, t = ts.slot, ts.boundary
        cfg = None if cfg_b is None or s >= len(cfg_b) else cfg_b[s]
        if configured is not None:
            g = _fed(groups, cfg)
        else:  # no configuration: the capture that holds the training layer, else the nearest to it
            g = _holding(groups, t)
        status, note, against = _status(ts, g, cfg, configured is not None, L)
        ident = None if g is None else g.identity
        evidence = {"observed": Evidence.OBSERVED, "labelled": Evidence.CONSISTENT}.get(ts.evidence, Evidence.NONE)
        conf = ts.confidence if ts.evidence == "observed" else decide.CONSISTENT_CONFIDENCE if t is not None else 0.0
        if status in (Status.OK, Status.IDENTIFIED) and ident is not None:
            conf = min(conf, ident.confidence)
        if evidence == Evidence.CONSISTENT and status == Status.OK:
            status = Status.UNVERIFIED
            note += "; the training slot's layer comes from the draft's ids, not from values: a gate does not pass"
        match = runner = None
        sep = margin = None
        if g is not None and ident is not None and ident.boundary is not None:
            target_row = t if t is not None else ident.boundary
            match = _candidate(g, target_row, fp)
            others = [b for b in range(fp.boundaries) if b != target_row and math.isfinite(ident.medians[b])]
            if others:
                rb = min(others, key=lambda b: ident.medians[b])
                runner = _stored(fp, rb, g)
                sep = runner.metrics.rel_err
                margin = sep - match.metrics.rel_err
        layer_id = None
        if t is not None:
            try:
                layer_id = conv.from_boundary(
                    [t], opts.engine, num_layers=L, model_family=family, version=opts.engine_version
                )[0]
            except InputError:
                layer_id = None
        out.append(
            SlotResult(
                slot=s,
                boundary_index=t,
                layer_id=layer_id,
                evidence=evidence if t is not None else Evidence.NONE,
                confidence=float(conf),
                margin=margin,
                match=match,
                runner_up=runner,
                claimed_boundary=t,
                configured_boundary=cfg,
                status=status,
                note=note,
                against_config=against,
                separation=sep,
                separation_measured=sep is not None,
            )
        )
    return out, [ts.boundary for ts in trained]


def _holding(groups: dict[int | str, EngineSlot], t: int | None) -> EngineSlot | None:
    if t is None or not groups:
        return None
    held = [g for g in groups.values() if g.identity and g.identity.boundary == t and g.identity.decisive]
    if held:
        return held[0]
    return min(groups.values(), key=lambda g: g.identity.medians[t] if g.identity and g.identity.medians else math.inf)


def _name(b: int | None, L: int) -> str:
    return "?" if b is None else boundary_list([b], L).strip("[]") if b == L + 1 else f"B{b}"


def _status(
    ts: fpfile.TrainingSlot, g: EngineSlot | None, cfg: int | None, configured: bool, L: int
) -> tuple[Status, str, str]:
    """The slot's status, its note and how it stands against the configured ids (words)."""
    t = ts.boundary
    trained = (
        f"trained on {_name(t, L)} (identified by value at recording: {ts.share:.0%} of {ts.tokens} tokens nearer it "
        f"than any other boundary)"
        if ts.evidence == "observed"
        else f"trained on {_name(t, L)} as the draft's ids say (not identified by value)"
        if t is not None
        else "its training layer was not identified when the fingerprint was recorded"
    )
    if t is None:
        return Status.UNOBSERVED, trained, ""
    if g is None:
        if not configured:
            return Status.UNVERIFIED, trained + "; no capture holds it", ""
        if cfg is None:
            return Status.MISMATCH, trained, "the engine is configured with fewer ids: this slot gets nothing"
        return (
            Status.UNVERIFIED,
            trained + f"; the inference side holds no capture of the engine's slot for {_name(cfg, L)}",
            f"no capture of {_name(cfg, L)} was dumped",
        )
    i = g.identity
    assert i is not None and i.boundary is not None
    where = f"the engine's capture {g.label()}" if configured else f"{g.label()}"
    if i.error > 0.10:
        return (
            Status.MISMATCH,
            trained + f"; {where} holds no hidden state of the target on the probe tokens (closest "
            f"{_name(i.boundary, L)} at {pct(i.error)})",
            f"the engine's slot holds no hidden state of the target (closest {_name(i.boundary, L)} at {pct(i.error)})",
        )
    if i.boundary == t and i.decisive:
        said = (
            f"{where} holds {_name(t, L)} by value: error {pct(i.error)}, every other boundary ruled out "
            f"(weakest: {_name(i.against, L)}, {_share(i, i.against) if i.against is not None else '-'} tokens nearer "
            f"{_name(t, L)}, at {pct(i.against_error)})"
        )
        if not configured:
            return Status.IDENTIFIED, trained + "; " + said, ""
        if cfg == t:
            return Status.OK, trained + "; " + said, ""
        return (
            Status.UNVERIFIED,
            trained + "; " + said + f", though the configured ids name {_name(cfg, L)} for it",
            f"the values show {_name(t, L)} where the configured ids, as read, capture {_name(cfg, L)}: the dump was "
            "made with other ids, or the engine reads them otherwise",
        )
    if i.decisive:
        said = (
            f"{where} holds {_name(i.boundary, L)} by value (error {pct(i.error)}; "
            f"{_share(i, t)} tokens nearer it than {_name(t, L)})"
        )
        return Status.MISMATCH, trained + "; " + said, f"the engine's slot holds {_name(i.boundary, L)} by value"
    open_ = sorted({i.boundary, *i.open})
    if t not in open_:
        said = (
            f"{where} is nearest {_name(i.boundary, L)} (error {pct(i.error)}) and not {_name(t, L)} "
            f"({_share(i, t)} tokens nearer {_name(i.boundary, L)})"
        )
        return Status.MISMATCH, trained + "; " + said, f"the engine's slot holds {_name(i.boundary, L)} or a neighbour"
    rival = [b for b in open_ if b != t]
    k_n = ", ".join(f"{_name(b, L)} ({_share(i, b)} tokens nearer {_name(i.boundary, L)})" for b in rival[:3])
    said = (
        f"{where} is nearest {_name(i.boundary, L)} (error {pct(i.error)}), but the {i.tokens} ordinary probe tokens "
        f"compared do not rule out {k_n}: send more probe tokens (every probe of the fingerprint, or longer ones)"
    )
    return (Status.AMBIGUOUS if configured else Status.UNVERIFIED), trained + "; " + said, ""


def plain_verdict(results: Sequence[SlotResult]) -> Verdict:
    """With no configuration: OK when a capture holds every training slot by value."""
    if all(r.status == Status.IDENTIFIED for r in results):
        return Verdict.OK
    return Verdict.INCONCLUSIVE


def label_warnings(groups: dict[int | str, EngineSlot], L: int) -> list[str]:
    out = []
    for g in groups.values():
        i = g.identity
        b = g.boundary
        if i is None or b is None or not i.decisive or i.error > 0.10 or i.boundary == b:
            continue
        src = g.captures[0].layer.source if g.captures[0].layer is not None else "label"
        out.append(
            f"the capture {g.label()} is labelled {_name(b, L)} ({src}) but holds {_name(i.boundary, L)} by value "
            f"({i.share:.0%} or more of {i.tokens} tokens nearer it than any other boundary)"
            + (
                ": the engine did not capture what the configured ids, as read, name"
                if src == LabelSource.CONFIGURED
                else ": its labels count otherwise (layer outputs? pass --infer-index output)"
            )
        )
    return out


def noise_warnings(fp: fpfile.Fingerprint, groups: dict[int | str, EngineSlot]) -> list[str]:
    floor = fp.noise_floor
    if not floor:
        return []
    worst = []
    for g in groups.values():
        i = g.identity
        if i is None or i.boundary is None or i.error > 0.10:
            continue
        f = floor[i.boundary] if i.boundary < len(floor) else None
        if f and i.error > NOISE_WARNING * f:
            worst.append((i.error / f, i, f))
    if not worst:
        return []
    ratio, i, f = max(worst, key=lambda w: w[0])
    return [
        f"the engine's captures differ from the fingerprint by up to {ratio:.1f}x the noise floor recorded with it "
        f"(B{i.boundary}: {pct(i.error)} against {pct(f)}): other numerics than the recording's (fp8, a quantised "
        "target, other kernels); the layers are identified all the same, with fewer tokens to spare"
    ]


def fp_cause(
    fp: fpfile.Fingerprint,
    groups: dict[int | str, EngineSlot],
    results: Sequence[SlotResult],
    configured: Configured | None,
    verdict: Verdict,
    words: str,
    L: int,
) -> str:
    """The cause ``explain`` gives the slots, led by what the engine's slots hold by value."""
    held = []
    labelled: list[int | str] = sorted((k for k in groups if isinstance(k, int)), key=int)
    keys: Sequence[int | str] = (
        configured.boundary_indices if configured is not None else labelled or list(groups)
    )  # capture order
    for key in keys:
        g = groups.get(key)
        i = None if g is None else g.identity
        if i is None or i.boundary is None or i.error > 0.10:
            held.append("?")
        elif i.decisive:
            held.append(_name(i.boundary, L).replace("the final post-norm state", "final"))
        else:
            held.append(_name(i.boundary, L) + "~")
    trained = [_name(r.boundary_index, L).replace("the final post-norm state", "final") for r in results]
    n = max((g.identity.tokens for g in groups.values() if g.identity), default=0)
    open_ = " (~: a neighbour not ruled out)" if any(h.endswith("~") for h in held) else ""
    lead = (
        f"Against the fingerprint ({fp.num_layers}-layer target, every boundary, {n} ordinary probe tokens): the "
        f"engine's slots hold [{', '.join(held)}] by value{open_}; training used [{', '.join(trained)}]."
    )
    return f"{lead} {words}"


def other_weights(
    groups: dict[int | str, EngineSlot],
    results: Sequence[SlotResult],
    configured: Configured | None,
    tolerance: float,
    L: int,
) -> str | None:
    """What to say when the configured ids already name a slot's training boundary, yet what the engine
    captures there is no hidden state of the fingerprint's target: no id fixes that (other weights than the
    fingerprint's, or a damaged capture). None when no slot is in that case."""
    if configured is None:
        return None
    bad, good = [], []
    for r, cfg in zip(results, configured.boundary_indices):
        g = _fed(groups, cfg)
        i = None if g is None else g.identity
        if i is None or r.boundary_index != cfg:
            continue
        if i.error > max(tolerance, 0.10):
            bad.append((r.slot, cfg, i))
        elif i.boundary == cfg:
            good.append(cfg)
    if not bad:
        return None
    slots = ", ".join(
        f"slot {s} ({_name(b, L)}: closest {_name(i.boundary, L) if i.boundary is not None else 'none'} at "
        f"{pct(i.error)})"
        for s, b, i in bad
    )
    where = ""
    first_bad = min(b for _, b, _ in bad)
    if good and max(good) < first_bad:
        where = f" (its captures match the target's up to B{max(good)} and no longer at B{first_bad})"
    return (
        f"The configured ids already name the training layer of {slots}, yet what the engine captures there is no "
        f"hidden state of the fingerprint's target: the engine runs other weights than the fingerprint was "
        f"recorded from{where}, or its capture is damaged. No id change fixes this: check that the engine serves "
        "the checkpoint the fingerprint and the draft's training used."
    )


def walkthrough(
    fp: fpfile.Fingerprint,
    groups: dict[int | str, EngineSlot],
    results: Sequence[SlotResult],
    configured: Configured | None,
    L: int,
) -> list[str]:
    floor = fp.noise_floor
    lines = [f"Fingerprint: {fp.describe()}."]
    if configured is not None:
        lines.append(
            f"The engine is configured with ids {list(configured.ids)} ({configured.engine}, from "
            f"{configured.source}), which it reads as {boundary_list(list(configured.boundary_indices), L)} "
            f"({configured.rule})."
        )
    for g in groups.values():
        i = g.identity
        if i is None or i.boundary is None:
            continue
        f = floor[i.boundary] if floor and i.boundary < len(floor) else None
        lines.append(
            f"Capture {g.label()} ({len(g.captures)} request(s), {i.tokens} ordinary probe tokens): nearest "
            f"{_name(i.boundary, L)} at {pct(i.error)}"
            + (f" (noise floor {pct(f)})" if f else "")
            + (
                f"; weakest rival {_name(i.against, L)} at {pct(i.against_error)}, {_share(i, i.against)} tokens "
                f"nearer {_name(i.boundary, L)} (sign test p = {i.p:.1e})"
                if i.against is not None
                else ""
            )
            + ("; decisive." if i.decisive else f"; not decisive: {', '.join(_name(b, L) for b in i.open[:4])} open.")
        )
    for r in results:
        lines.append(f"Slot {r.slot} → {r.status}: {r.note}" + (f" ({r.against_config})" if r.against_config else ""))
    return lines


def fp_scores(
    fp: fpfile.Fingerprint, groups: dict[int | str, EngineSlot], results: Sequence[SlotResult]
) -> list[Score]:
    out = []
    for r in results:
        if r.boundary_index is None:
            continue
        for g in groups.values():
            c = g.captures[0]
            m = _metrics(g, r.boundary_index, fp.hidden_size)
            out.append(
                Score(
                    r.slot,
                    fp.meta["probes"]["items"][g.placements[0].probe].get("name"),
                    c.label(),
                    c.boundary,
                    None if c.layer is None else str(c.layer.source),
                    g.placements[0].offset,
                    m,
                )
            )
    return out
