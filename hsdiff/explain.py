"""From per-slot decisions to a verdict, a cause in words, a walk-through and the recommended ids."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from . import align
from . import conventions as conv
from .model import Candidate, Configured, Recommendation, Report, SlotResult

if TYPE_CHECKING:  # pragma: no cover
    from .comparison import _Comparison

_IDENTIFIED = ("identified",)


def explain(cmp: _Comparison, decisions: dict, claims, claim_src, configured: Configured | None, num_layers, hidden, rows, k) -> Report:
    opts = cmp.opts
    family = cmp.family
    warnings = cmp.warnings
    # 1. what the training labels say, and the offset the values show against them
    label_offsets = {
        decisions[s]["b"] - claims[s]
        for s in range(k)
        if decisions[s]["status"] in _IDENTIFIED and decisions[s]["b"] is not None and claims[s] is not None
    }
    label_offset = next(iter(label_offsets)) if len(label_offsets) == 1 else None
    if len(label_offsets) > 1:
        warnings.append(
            f"the training labels ({claim_src}) are off by different amounts on different slots "
            f"({sorted(label_offsets)}): unobserved slots were not inferred from them"
        )
    identified_conf = [decisions[s]["conf"] for s in range(k) if decisions[s]["status"] in _IDENTIFIED]
    from_config = [
        decisions[s]["match"].capture.layer.source == "configured"
        for s in range(k)
        if decisions[s]["status"] in _IDENTIFIED and decisions[s]["match"] is not None
    ]
    if label_offset and from_config and all(from_config):
        warnings.append(
            f"the inference dump carries no layer labels of its own, so its slots were labelled from the configured ids; "
            f"the training side's labels ({claim_src}) differ from those by {label_offset:+d} layer(s). The values "
            "match slot for slot, so the draft receives what it was trained on — provided the dump was captured with "
            "the configuration under test; if not, re-capture with it"
        )

    cfg_b = list(configured.boundary_indices) if configured else None
    results: list[SlotResult] = []
    for s in range(k):
        d = decisions[s]
        b: int | None = d["b"] if d["status"] in _IDENTIFIED else None
        evidence = "observed" if b is not None else "none"
        conf = d["conf"] if b is not None else 0.0
        note = d["note"]
        if b is None and label_offset is not None and claims[s] is not None:
            guess = claims[s] + label_offset
            cand_b = d.get("candidate_b")
            if cand_b is None or abs(cand_b - guess) <= 1:
                b, evidence = guess, "inferred"
                conf = round(0.8 * min(identified_conf), 4) if identified_conf else 0.5
                how = "as labelled" if label_offset == 0 else f"labels shifted by {label_offset:+d}"
                note = (note + "; " if note else "") + (
                    f"inferred B{b} from the training labels ({claim_src}; {how}, as on the observed slots)"
                )
        elif b is None and d["status"] in ("unobserved", "unmatched"):
            note += "; capture more layers to identify it (e.g. dump every layer's input once, see docs/capture.md)"
        status, note = _against_config(cmp, s, d, b, evidence, cfg_b, note)
        layer_id = None
        if b is not None:
            layer_id = conv.from_boundary([b], opts.engine, num_layers=num_layers, model_family=family)[0]
        results.append(
            SlotResult(
                slot=s, boundary_index=b, layer_id=layer_id, evidence=evidence, confidence=float(conf),
                margin=d["margin"], match=d["match"], runner_up=d["runner"], claimed_boundary=claims[s],
                configured_boundary=None if cfg_b is None or s >= len(cfg_b) else cfg_b[s], status=status, note=note,
            )
        )
    _norm_warnings(cmp, results)
    recommended = _recommend(opts.engine, family, [r.boundary_index for r in results], num_layers, warnings)
    verdict = _verdict(results, configured, decisions)
    cause = _cause(verdict, results, configured, decisions, num_layers, opts.engine, family, label_offset, claim_src)
    walk = _walkthrough(results, configured, claims, claim_src, num_layers, cmp=cmp, recommended=recommended)
    if cfg_b is not None and len(cfg_b) != k:
        warnings.append(f"{len(cfg_b)} ids are configured but the training side has {k} slots")
    return Report(
        verdict=verdict, cause=cause, slots=tuple(results), recommended=recommended, configured=configured,
        num_layers=num_layers, hidden_size=hidden, explanation=tuple(walk), warnings=tuple(dict.fromkeys(warnings)),
        scores=tuple(rows), inputs={**cmp.inputs, "engine": opts.engine, "model_family": family},
    )


def _direct(cands_of_slot: list[Candidate], cfg: int) -> Candidate | None:
    return next((c for c in cands_of_slot if c.boundary == cfg), None)


def _against_config(cmp, s, d, b, evidence, cfg_b, note) -> tuple[str, str]:
    if cfg_b is None:
        if b is not None and evidence == "observed":
            return "identified", note
        if b is not None:
            return "inferred", note
        return d["status"], note
    if s >= len(cfg_b):
        return "mismatch", note + f"; the engine is configured with only {len(cfg_b)} ids, so slot {s} gets nothing"
    cfg = cfg_b[s]
    tol = cmp.opts.tolerance
    if evidence == "observed":
        if b == cfg:
            return "ok", note
        return "mismatch", note + f"; the engine captures B{cfg} for this slot"
    direct = _direct(cmp.cands.get(s, []), cfg)
    if direct is not None and not direct.metrics.sink_only:
        e = direct.metrics.rel_err
        if e <= tol:
            return "ok", note + f"; equals the engine's slot {s} (B{cfg}) within noise ({e * 100:.2g}%)"
        return "mismatch", note + f"; the engine's slot {s} (B{cfg}) differs from it by {_pct(e)}"
    if b is not None:
        return ("mismatch" if b != cfg else "unverified"), note + (
            f"; the engine captures B{cfg} for this slot" if b != cfg else "; the configured id agrees but was not observed"
        )
    return ("ambiguous" if d["status"] == "ambiguous" else "unverified"), note


def _verdict(results: list[SlotResult], configured, decisions) -> str:
    if not any(decisions[r.slot]["match"] is not None for r in results):
        return "mismatch"
    if configured is not None:
        if any(r.status == "mismatch" for r in results):
            return "mismatch"
        return "ok" if all(r.status == "ok" for r in results) else "inconclusive"
    return "ok" if all(r.evidence == "observed" and r.boundary_index is not None for r in results) else "inconclusive"


def _recommend(engine, family, bs, num_layers, warnings) -> Recommendation:
    ids = conv.from_boundary(bs, engine, num_layers=num_layers, model_family=family)
    for b, i in zip(bs, ids):
        if b is not None and i is None:
            warnings.append(
                f"{conv.rule(engine).title} ({family}) cannot capture B{b} ({conv.describe_boundary(b, num_layers)}); "
                "the draft needs an engine that captures it, or retraining on capturable layers"
            )
    known = [b for b in bs if b is not None]
    if known != sorted(known):
        warnings.append("training slots are not in ascending layer order, but engines concatenate captures ascending")
    by_engine: dict[str, list[int | None]] = {}
    for e in conv.ENGINES:
        try:
            by_engine[e] = conv.from_boundary(bs, e, num_layers=num_layers, model_family=family if e == "sglang" else None)
        except Exception:  # a rule that needs num_layers it does not have
            by_engine[e] = [None] * len(bs)
    return Recommendation(engine, family, tuple(ids), tuple(bs), by_engine)


def _bl(bs) -> str:
    return "[" + ", ".join("?" if b is None else str(b) for b in bs) + "]"


def _cause(verdict, results, configured, decisions, L, engine, family, label_offset, claim_src) -> str:
    title = conv.rule(engine).title
    bs = [r.boundary_index for r in results]
    parts: list[str] = []
    if not any(decisions[r.slot]["match"] is not None for r in results):
        closest = [decisions[r.slot]["runner"] for r in results if decisions[r.slot]["runner"] is not None]
        best = min((c.metrics.rel_err for c in closest), default=math.inf)
        return (
            f"No inference capture equals any training slot (closest error {_pct(best)}): the two sides hold "
            "different tensors. Check post-norm vs pre-norm (HF's last hidden state has the final norm applied), "
            "that both ran the same weights, and that the same sample was replayed."
        )
    if configured is not None:
        cfg = list(configured.boundary_indices)
        ids = list(configured.ids)
        if verdict == "ok":
            return f"The configured ids {ids} make {title} capture B{cfg}, exactly the training slots."
        pairs = [(r.slot, r.boundary_index, cfg[r.slot]) for r in results if r.boundary_index is not None and r.slot < len(cfg)]
        diffs = {c - b for _, b, c in pairs}
        if pairs and len(diffs) == 1 and 0 not in diffs:
            d = diffs.pop()
            word = "late" if d > 0 else "early"
            why = ""
            r = conv.rule(engine)
            if d == 1 and r.index == conv.OUTPUT:
                why = f" — the ids were written as boundary indices, but {title} reads them as layer outputs and adds 1"
            elif d == -1 and r.index == conv.BOUNDARY:
                why = f" — the ids were written as layer-output indices, but {title} uses them as boundary indices"
            parts.append(
                f"Every slot is captured {abs(d)} layer{'s' if abs(d) > 1 else ''} too {word}: {title} takes B{cfg} "
                f"where training used B{_bl(bs)}{why}."
            )
        else:
            shift = _position_shift(pairs, cfg)
            if shift:
                missing = [b for b in bs if b is not None and b not in cfg]
                parts.append(
                    f"The configured ids {ids} are shifted by {shift} slot{'s' if shift > 1 else ''}: {title} captures "
                    f"B{cfg}, so slot 0 receives {conv.name_boundary(cfg[0], L)} while training slot 0 was {conv.name_boundary(bs[0], L)}"
                    + (f", and B{missing} is never captured." if missing else ".")
                )
            elif verdict == "mismatch":
                bad = [r for r in results if r.status == "mismatch"]
                parts.append(
                    "Training slot" + ("s " if len(bad) > 1 else " ")
                    + ", ".join(f"{r.slot} ({'not identified' if r.boundary_index is None else f'B{r.boundary_index}'})" for r in bad)
                    + f" {'are' if len(bad) > 1 else 'is'} not what {title} captures with ids {ids} (B{cfg}): "
                    + bad[0].note.split("; ")[-1] + "."
                )
    if verdict == "ok" and configured is None:
        return f"Every training slot was identified by value: B{_bl(bs)}."
    if verdict == "inconclusive" or (verdict == "mismatch" and (not parts or any(r.status == "ambiguous" for r in results))):
        open_ = [r for r in results if r.boundary_index is None or r.status in ("unverified", "ambiguous")]
        if open_:
            parts.append(
                "The evidence does not settle slot" + ("s " if len(open_) > 1 else " ")
                + ", ".join(str(r.slot) for r in open_) + ": " + "; ".join(r.note for r in open_[:2]) + "."
            )
    if label_offset:
        parts.append(
            f"The training side's own labels ({claim_src}) are {abs(label_offset)} off: what they call "
            f"B{results[0].claimed_boundary} holds B{results[0].boundary_index}."
        )
    return " ".join(parts) if parts else "See the per-slot notes."


def _position_shift(pairs, cfg) -> int:
    for p in range(1, len(cfg)):
        if pairs and all(s + p < len(cfg) and cfg[s + p] == b for s, b, _ in pairs if s + p < len(cfg)) and any(
            s + p < len(cfg) for s, _, _ in pairs
        ):
            return p
    return 0


def _walkthrough(results: list[SlotResult], configured, claims, claim_src, L, cmp=None, recommended=None) -> list[str]:
    lines = []
    if any(c is not None for c in claims):
        lines.append(f"The training side labels its slots B{_bl(claims)} ({claim_src}).")
    if configured is not None:
        lines.append(
            f"The engine is configured with ids {list(configured.ids)} ({configured.engine}, from {configured.source}), "
            f"which it reads as B{list(configured.boundary_indices)}."
        )
    for r in results:
        head = f"Slot {r.slot}: "
        if r.match is not None and r.match.capture.is_partial and cmp is not None:
            lines.append(head + _printed_evidence(cmp, r) + f" → {r.status}: {r.note}")
        elif r.match is not None:
            m = r.match.metrics
            c = r.match.capture
            where = str(c.origin)
            what = "printed values" if c.is_partial else "tensor"
            lab = "no layer label" if c.layer is None else f"labelled {c.layer} ({c.layer.source})"
            sample = f" of sample {r.match.sample}" if r.match.sample else ""
            tied = f" (equal in {r.match.samples_tied} samples: shared tokens)" if r.match.samples_tied > 1 else ""
            runner = ""
            if r.runner_up is not None:
                runner = f"; runner-up {r.runner_up.capture.label()} at {_pct(r.runner_up.metrics.rel_err)}"
            lines.append(
                head + f"the {what} at {where} ({lab}) equals training{sample}{tied} at token offset {r.match.offset}: "
                f"median error {_pct(m.rel_err)} over {m.tokens} token{'s' if m.tokens != 1 else ''} "
                f"({m.values} values), cosine {m.cosine:.4f}{runner}. → {r.status}: {r.note}"
            )
        else:
            lines.append(head + f"{r.status}: {r.note}")
    if cmp is not None and any(c.is_partial for c in cmp.infer.captures):
        lines.append(_next_time(results, recommended, configured))
    return lines


def _printed_evidence(cmp, r: SlotResult) -> str:
    """Which printed values matched this slot, at which training token, with what error, and what
    their labels claimed: the walk-through an engineer would write for a debug log."""
    import numpy as np

    assert r.match is not None
    c, m = r.match.capture, r.match.metrics
    obs = c.observation
    assert obs is not None
    if c.layer is None:
        claim = "no layer label"
    elif c.layer.source == "configured":
        claim = f"no layer label; as slot {c.slot} of the configured ids it is {c.layer}"
    else:
        claim = f"its label says {c.layer}"
    text = f"the values printed at {c.origin} ({claim})"
    ts = _train_slot(cmp, r)
    if ts is None:
        return text + f" match training at {_pct(m.rel_err)}."
    toks = align.observation_tokens(ts, c, r.match.offset)
    vals, _, cols = align._obs_arrays(c, ts.tensor.shape[1])
    placed = [(i, t) for i, t in enumerate(toks) if t is not None]
    ordinary = [(i, t) for i, t in placed if not bool(ts.sinks[t])]
    sinks = sorted({t for i, t in placed if bool(ts.sinks[t])})
    shown = (ordinary or placed)[:1]
    sample = f"sample {r.match.sample}" if r.match.sample else "training"
    tied = f" (the same in {r.match.samples_tied} samples: they share these tokens)" if r.match.samples_tied > 1 else ""
    used = sorted({t for _, t in (ordinary or placed)})
    where_t = _token_span(used)
    out = text + f" sit at {where_t} of {sample}{tied}"
    if shown:
        i, t = shown[0]
        row = vals[i].numpy()
        keep = [k for k in range(len(cols)) if np.isfinite(row[k])][:5]
        if keep:
            pv = ", ".join(f"{row[k]:.4g}" for k in keep)
            tv = ", ".join(f"{float(ts.tensor[t, cols[k]]):.4g}" for k in keep)
            col_text = _token_span([cols[k] for k in keep], "column")
            out += f": printed {pv} where training holds {tv} (token {t}, {col_text})"
    out += (
        f"; median error {_pct(m.rel_err)} over {m.tokens} token{'s' if m.tokens != 1 else ''} ({m.values} values), "
        f"cosine {m.cosine:.4f}"
    )
    if sinks and ordinary:
        out += f"; {_token_span(sinks)} left out (attention sink: barely changes between layers)"
    elif sinks:
        out += " — attention-sink tokens only"
    if r.runner_up is not None:
        out += f"; next best {r.runner_up.capture.label()} at {_pct(r.runner_up.metrics.rel_err)}"
    nc = _norm_check(cmp, r)
    if nc is not None:
        printed, agree, _, _ = nc
        out += (f"; its printed norm {printed:.4g} agrees with {agree}" if agree else
                f"; its printed norm {printed:.4g} does not (see warnings)")
    return out + "."


def _token_span(ts: list[int], word: str = "token") -> str:
    if not ts:
        return f"no {word}"
    if len(ts) == 1:
        return f"{word} {ts[0]}"
    runs, start, prev = [], ts[0], ts[0]
    for t in ts[1:] + [None]:  # type: ignore[list-item]
        if t is not None and t == prev + 1:
            prev = t
            continue
        runs.append(f"{start}" if start == prev else f"{start}–{prev}")
        if t is not None:
            start = prev = t
    return f"{word}s " + ", ".join(runs)


def _next_time(results: list[SlotResult], recommended=None, configured=None) -> str:
    """What the log lacked, and what to print next time."""
    notes = []
    for r in results:
        m = r.match.metrics if r.match is not None else None
        if r.evidence == "observed":
            if m is not None and m.values < 20:
                notes.append(f"slot {r.slot} rests on {m.values} printed values")
            continue
        if m is None:
            notes.append(f"slot {r.slot} matched no printed capture (B{'?' if r.boundary_index is None else r.boundary_index} "
                         "was not in the log)")
        elif m.sink_only:
            notes.append(f"slot {r.slot} was seen on the first token only (the attention sink)")
        else:
            notes.append(f"slot {r.slot} matched within noise ({_pct(m.rel_err)}) but not clearly enough to rule out "
                         "a neighbouring layer")
    if not notes:
        return "The printed values settle every slot."
    text = "What the log lacked: " + "; ".join(notes) + ". Next time print, for every captured layer, its layer number, "
    text += ("shape and a few ordinary tokens with more columns, e.g. f\"layer={i} shape={tuple(h.shape)} "
             "h[1:5, :64]={h[1:5, :64].tolist()}\" (or dump whole tensors with SGLang's dumper)")
    if recommended is not None and configured is not None and list(recommended.ids) != list(configured.ids) and all(
        i is not None for i in recommended.ids
    ):
        text += f", and run with the recommended ids {list(recommended.ids)} to confirm that every slot then matches"
    return text + "."


def _norm_check(cmp, r: SlotResult):
    """(printed norm, what it agrees with or None, the training norms, likely reason) for a match with a printed norm."""
    if r.match is None or r.match.capture.norm is None:
        return None
    c = r.match.capture
    printed = float(c.norm)  # type: ignore[arg-type]
    ts = _train_slot(cmp, r)
    if ts is None:
        return None
    import torch

    norms = ts.norms[torch.isfinite(ts.norms)]
    if norms.numel() == 0:
        return None
    refs = {
        "the per-token norm (median)": float(norms.median()),
        "the per-token norm (mean)": float(norms.mean()),
        "the first token's norm": float(ts.norms[0]),
        "the last token's norm": float(ts.norms[-1]),
        "the whole tensor's norm": float(ts.tensor.norm()),
    }
    if c.observation is not None:
        import numpy as np

        vals = np.asarray(c.observation.values, dtype=float)
        refs["the norm of the printed values"] = float(np.sqrt(np.nansum(vals**2)))
        toks = [t for t in align.observation_tokens(ts, c, r.match.offset) if t is not None]
        for t in sorted(set(toks))[:8]:
            refs[f"token {t}'s norm"] = float(ts.norms[t])
    agree = next((f"{k} ({v:.4g})" for k, v in refs.items() if v > 0 and abs(printed / v - 1) <= 0.1), None)
    lo, hi = float(norms.min()), float(ts.tensor.norm())
    if printed < 0.9 * lo:
        reason = (
            f"it is smaller than the norm of every training token (smallest {lo:.4g}): probably the norm of "
            "hidden_states before the residual add (engines that fuse add+norm carry the residual separately; the "
            "captured stream is their sum), or of some columns only"
        )
    elif printed > 1.1 * hi:
        reason = (
            "it is larger than the whole training tensor's norm: probably taken over more tokens (a batch, padding) "
            "or another tensor"
        )
    else:
        reason = (
            "it lies between one token's norm and the whole tensor's: probably another reduction (a mean or sum over "
            "tokens, which includes the attention sink) or another token"
        )
    return printed, agree, refs, reason


def _norm_warnings(cmp, results: list[SlotResult]) -> None:
    for r in results:
        nc = _norm_check(cmp, r)
        if nc is None or nc[1] is not None:
            continue
        printed, _, refs, reason = nc
        c = r.match.capture  # type: ignore[union-attr]
        main = {k: v for k, v in refs.items() if not k.startswith("token ")}
        ref_text = ", ".join(f"{k.replace('the ', '', 1)} {v:.4g}" for k, v in main.items())
        cmp.warnings.append(
            f"{c.origin}: the values match training slot {r.slot}, but the printed norm {printed:.4g} agrees with none of "
            f"the training side's norms ({ref_text}); {reason}. Norms are secondary evidence: the values decide, and "
            "the match stands"
        )


def _train_slot(cmp, r: SlotResult) -> Any:
    sample = r.match.sample if r.match else None
    for c in cmp.train_slots.get(r.slot, []):
        if c.group == sample:
            return align.TrainSlot.load(c)
    return None


def _pct(x: float) -> str:
    if not math.isfinite(x):
        return "n/a"
    return f"{x * 100:.2g}%" if x < 0.1 else f"{x * 100:.0f}%"
