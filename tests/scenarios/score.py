"""Run ``hsdiff.compare`` on scenarios and measure calibration: right / wrong / null per confidence bin.

Only the stable surface of the library is used: ``hsdiff.compare(train, infer, **kwargs)``, the
report's ``slots[i].boundary_index / confidence / evidence``, ``verdict``, ``exit_code`` and
``recommended.ids``.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import hsdiff

from .generate import Scenario, generate, to_ids
from .write import write

BINS = ((0.0, 0.5), (0.5, 0.7), (0.7, 0.9), (0.9, 1.0))
CONFIDENT = 0.9


@dataclass
class SlotAnswer:
    truth: int  # the training slot's real boundary
    determinable: bool
    got: int | None  # the boundary hsdiff reports (or the one its recommended id stands for)
    confidence: float
    evidence: str

    @property
    def outcome(self) -> str:
        if self.got is None:
            return "null"
        return "right" if self.got == self.truth else "wrong"


@dataclass
class Outcome:
    seed: int
    about: str
    tags: list[str] = field(default_factory=list)
    slots: list[SlotAnswer] = field(default_factory=list)
    verdict: str = ""
    exit_code: int = 0
    should_pass: bool | None = None
    error: str = ""
    seconds: float = 0.0


def _boundary_of(engine: str, rec: int | None) -> int | None:
    if rec is None:
        return None
    return next((b for b in range(0, 64) if to_ids(engine, [b]) == [rec]), None)


def judge(sc: Scenario, report: object) -> list[SlotAnswer]:
    """One answer per training slot; a slot whose boundary or recommended id is wrong is wrong."""
    slots = list(getattr(report, "slots", ()))
    rec = list(getattr(getattr(report, "recommended", None), "ids", ()) or ())
    out = []
    for i, b in enumerate(sc.train_b):
        det = sc.truth[i] is not None
        if len(slots) != len(sc.train_b):  # the training side was split wrongly: no slot is right
            conf = max((float(s.confidence) for s in slots), default=0.0)
            out.append(SlotAnswer(b, det, -1, conf, "split"))
            continue
        s = slots[i]
        got = s.boundary_index
        rb = _boundary_of(sc.engine, rec[i]) if i < len(rec) else None
        if got is None or (rb is not None and rb != got):
            got = rb if got is None else (got if got != b else rb)
        out.append(SlotAnswer(b, det, got, float(s.confidence), str(s.evidence)))
    return out


def run(sc: Scenario) -> Outcome:
    out = Outcome(sc.seed, sc.describe(), sc.tags(), should_pass=sc.should_pass)
    with tempfile.TemporaryDirectory(prefix="calibration-scenario-") as d:
        train, infer = write(sc, Path(d))
        t0 = time.perf_counter()
        try:
            report = hsdiff.compare(str(train), str(infer), **sc.kwargs)
        except hsdiff.HsdiffError as e:
            out.error, out.exit_code = f"user error: {e}", 2
            out.slots = [SlotAnswer(b, t is not None, None, 0.0, "error") for b, t in zip(sc.train_b, sc.truth)]
        except Exception as e:  # noqa: BLE001 — a crash is a finding, not the end of the run
            out.error, out.exit_code = f"internal error: {type(e).__name__}: {e}", 3
            out.slots = [SlotAnswer(b, t is not None, None, 0.0, "error") for b, t in zip(sc.train_b, sc.truth)]
        else:
            out.verdict, out.exit_code = str(report.verdict), int(report.exit_code)
            out.slots = judge(sc, report)
        out.seconds = time.perf_counter() - t0
    return out


def run_many(seeds: range) -> list[Outcome]:
    return [run(generate(s)) for s in seeds]


def summarise(outcomes: list[Outcome], examples: int = 10) -> dict:
    slots = [(o, a) for o in outcomes for a in o.slots]
    bins = []
    for lo, hi in BINS:
        inb = [a for _, a in slots if lo <= a.confidence < hi or (hi == 1.0 and a.confidence == 1.0)]
        n = len(inb)
        bins.append(
            {
                "bin": f"{lo:.1f}-{hi:.1f}",
                "slots": n,
                **{k: (sum(a.outcome == k for a in inb) / n if n else None) for k in ("right", "wrong", "null")},
            }
        )
    confident_wrong = [(o, a) for o, a in slots if a.outcome == "wrong" and a.confidence >= CONFIDENT]
    wrong_pass = [o for o in outcomes if o.exit_code == 0 and o.should_pass is False]
    false_alarm = [o for o in outcomes if o.exit_code != 0 and o.should_pass is True]
    ok_null = [o for o in outcomes if o.exit_code == 0 and any(a.got is None for a in o.slots)]
    det = [a for _, a in slots if a.determinable]
    n = len(slots)

    def by_tag(items: list[Outcome]) -> dict[str, int]:
        c = Counter(t for o in items for t in o.tags)
        return dict(c.most_common())

    def ex(o: Outcome, a: SlotAnswer | None = None) -> dict:
        d = {"seed": o.seed, "scenario": o.about, "verdict": o.verdict, "exit_code": o.exit_code}
        if a is not None:
            d.update(truth=a.truth, got=a.got, confidence=round(a.confidence, 3), evidence=a.evidence)
        if o.error:
            d["error"] = o.error
        return d

    return {
        "scenarios": len(outcomes),
        "should_pass": sum(o.should_pass is True for o in outcomes),
        "should_fail": sum(o.should_pass is False for o in outcomes),
        "undetermined": sum(o.should_pass is None for o in outcomes),
        "slots": n,
        "wrong_at_confidence_ge_0.9": len(confident_wrong),
        "wrong_at_confidence_ge_0.9_examples": [ex(o, a) for o, a in confident_wrong[:examples]],
        "wrong_at_confidence_ge_0.9_scenarios": len({o.seed for o, _ in confident_wrong}),
        "wrong_at_confidence_ge_0.9_scenarios_by_trait": by_tag(list({o.seed: o for o, _ in confident_wrong}.values())),
        "right": sum(a.outcome == "right" for _, a in slots) / n,
        "wrong": sum(a.outcome == "wrong" for _, a in slots) / n,
        "null": sum(a.outcome == "null" for _, a in slots) / n,
        "answered": sum(a.outcome != "null" for _, a in slots) / n,
        "answered_where_determinable": (sum(a.outcome != "null" for a in det) / len(det)) if det else None,
        "bins": bins,
        "wrong_exit_0": len(wrong_pass),
        "wrong_exit_0_examples": [ex(o) for o in wrong_pass[:examples]],
        "wrong_exit_0_by_trait": by_tag(wrong_pass),
        "should_pass_but_exit_nonzero": len(false_alarm),
        "should_pass_but_exit_nonzero_examples": [ex(o) for o in false_alarm[:examples]],
        "should_pass_but_exit_nonzero_by_trait": by_tag(false_alarm),
        "ok_with_null_ids": len(ok_null),
        "ok_with_null_ids_examples": [ex(o) for o in ok_null[:examples]],
        "ok_with_null_ids_by_trait": by_tag(ok_null),
        "user_errors": sum(o.exit_code == 2 for o in outcomes),
        "user_error_messages": dict(
            Counter(o.error.split(":")[1].strip() for o in outcomes if o.exit_code == 2).most_common()
        ),
        "internal_errors": sum(o.exit_code == 3 for o in outcomes),
        "internal_error_examples": [ex(o) for o in outcomes if o.exit_code == 3][:examples],
        "compare_seconds_total": round(sum(o.seconds for o in outcomes), 2),
    }


def markdown(s: dict) -> str:
    pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    lines = [
        f"Calibration over {s['scenarios']} scenarios, {s['slots']} training slots "
        f"(real SmolLM2-135M states; `make calibrate`).",
        "",
        "| confidence | slots | right | wrong | null |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {b['bin']} | {b['slots']} | {pct(b['right'])} | {pct(b['wrong'])} | {pct(b['null'])} |" for b in s["bins"]
    ]
    lines += [
        f"| all | {s['slots']} | {pct(s['right'])} | {pct(s['wrong'])} | {pct(s['null'])} |",
        "",
        f"- scenarios that should pass: {s['should_pass']}, should fail: {s['should_fail']}, undetermined (either "
        f"answer defensible): {s['undetermined']}",
        f"- wrong ids at confidence >= 0.9: **{s['wrong_at_confidence_ge_0.9']}**",
        f"- answered: {pct(s['answered'])} of all slots, {pct(s['answered_where_determinable'])} of the slots "
        "the values or labels determine",
        f"- exit 0 where the deployment should fail: **{s['wrong_exit_0']}** of {s['should_fail']}; "
        f"exit 1 where it should pass: {s['should_pass_but_exit_nonzero']} of {s['should_pass']}",
        f"- exit 0 with a null id in the recommendation: {s['ok_with_null_ids']}",
        f"- user errors (exit 2): {s['user_errors']}; internal errors (exit 3): {s['internal_errors']}",
        "",
        "| failure | scenarios | traits (scenarios carrying each) |",
        "|---|---:|---|",
    ]
    for label, n, traits in (
        (
            "wrong id at confidence >= 0.9",
            s["wrong_at_confidence_ge_0.9_scenarios"],
            s["wrong_at_confidence_ge_0.9_scenarios_by_trait"],
        ),
        ("exit 0, deployment wrong", s["wrong_exit_0"], s["wrong_exit_0_by_trait"]),
        ("exit 1, deployment right", s["should_pass_but_exit_nonzero"], s["should_pass_but_exit_nonzero_by_trait"]),
        ("exit 0 with null ids", s["ok_with_null_ids"], s["ok_with_null_ids_by_trait"]),
        ("user error (exit 2)", s["user_errors"], s["user_error_messages"]),
    ):
        lines.append(f"| {label} | {n} | " + ", ".join(f"{k} {v}" for k, v in list(traits.items())[:6]) + " |")
    return "\n".join(lines)


def as_json(outcomes: list[Outcome]) -> list[dict]:
    return [asdict(o) for o in outcomes]
