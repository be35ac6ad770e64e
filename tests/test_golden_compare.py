"""The golden comparison itself (:mod:`tests.golden.compare`): it lets through what another CPU
changes and nothing a user relies on.

Every golden report is perturbed as another BLAS kernel could perturb it (each metric moved by its
computed noise, then stored again as a report stores it) and the sample of each score row that matches
nothing is swapped: the comparison must pass. A changed verdict, id, status, matched capture, cause
word, exit code or token count must fail, and so must a metric moved well past its noise.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .golden.compare import (
    H_UNKNOWN,
    RULES,
    differences,
    free_keys,
    hidden_size,
    report_tolerance,
    summed_noise,
    text_differences,
)

pytestmark = pytest.mark.core

GOLDEN = Path(__file__).resolve().parent / "golden"
REPORTS = sorted(p.stem for p in GOLDEN.glob("*.json"))


def _load(name: str) -> dict:
    return json.loads((GOLDEN / f"{name}.json").read_text())


def _perturb(
    doc: Any,
    delta: float,
    rng: random.Random,
    tolerance: float | None,
    at: str = "",
    parent: dict | None = None,
    rule: Callable | None = None,
) -> Any:
    """``doc`` as another kernel could have written it: each metric moved by up to its computed noise
    (to either side), stored again; each non-matching score row read against another sample."""
    if isinstance(doc, float) and rule is not None:
        noise = rule(delta, doc, parent or {})
        return noise.store(doc + rng.choice((-1, 1)) * rng.uniform(0.5, 1.0) * noise.computed)
    if isinstance(doc, dict):
        free = free_keys(at, doc, tolerance)
        return {
            k: (
                f"{v}-other"
                if k in free and isinstance(v, str)
                else _perturb(v, delta, rng, tolerance, f"{at}.{k}", doc, RULES.get(k))
            )
            for k, v in doc.items()
        }
    if isinstance(doc, list):
        return [_perturb(v, delta, rng, tolerance, f"{at}[{i}]", parent, rule) for i, v in enumerate(doc)]
    return doc


@pytest.mark.parametrize("name", REPORTS)
def test_what_another_cpu_changes_passes(name: str) -> None:
    want = _load(name)
    delta = summed_noise(hidden_size(want) or H_UNKNOWN)
    for seed in range(3):
        got = _perturb(copy.deepcopy(want), delta, random.Random(seed), report_tolerance(want))
        assert differences(got, want) == []


def test_perturbing_touches_metrics_and_swaps_non_matching_samples() -> None:
    """The perturbation above is not a no-op: on the real dumps' report it moves metrics and swaps
    the samples of rows that match nothing, never a matched slot's sample."""
    want = _load("real-modelopt-vs-dumper")
    delta = summed_noise(hidden_size(want))
    got = _perturb(copy.deepcopy(want), delta, random.Random(0), report_tolerance(want))
    scores = zip(got["report"]["scores"], want["report"]["scores"])
    swapped = [g for g, w in scores if g["sample"] != w["sample"]]
    assert swapped and all(w_err > 0.1 for w_err in (g["rel_err"] for g in swapped))
    moved = [1 for g, w in zip(got["report"]["scores"], want["report"]["scores"]) if g["cosine"] != w["cosine"]]
    assert len(moved) > len(got["report"]["scores"]) // 4
    assert [s["matched"]["sample"] for s in got["report"]["slots"]] == [
        s["matched"]["sample"] for s in want["report"]["slots"]
    ]


def _report(doc: dict) -> dict:
    r = doc["report"]
    return r.get("report", r)


def _slots_with_match(doc: dict) -> Iterator[dict]:
    return (s for s in _report(doc).get("slots", []) if s.get("matched"))


def _edits() -> list[tuple[str, str, Callable[[dict], bool]]]:
    """(case, what, edit): each edit changes one thing a user relies on and says whether it applied."""

    def verdict(d: dict) -> bool:
        r = _report(d)
        r["verdict"] = "ok" if r["verdict"] != "ok" else "mismatch"
        return True

    def exit_code(d: dict) -> bool:
        d["exit_code"] = 1 - d["exit_code"] if d["exit_code"] in (0, 1) else 0
        return True

    def an_id(d: dict) -> bool:
        ids = _report(d)["recommended"]["eagle_aux_hidden_state_layer_ids"]
        i = next(i for i, v in enumerate(ids) if v is not None)
        ids[i] += 1
        return True

    def other_engine_id(d: dict) -> bool:
        by = _report(d)["recommended"]["by_engine"]
        lists = [e["ids"] if isinstance(e, dict) else e for _, e in sorted(by.items(), reverse=True)]
        ids = next(x for x in lists if any(v is not None for v in x))  # an engine that serves some slot
        i = next(i for i, v in enumerate(ids) if v is not None)
        ids[i] -= 1
        return True

    def status(d: dict) -> bool:
        s = _report(d)["slots"][0]
        s["status"] = "ok" if s["status"] != "ok" else "mismatch"
        return True

    def evidence(d: dict) -> bool:
        s = _report(d)["slots"][0]
        s["evidence"] = "consistent" if s["evidence"] != "consistent" else "observed"
        return True

    def matched_capture(d: dict) -> bool:
        s = next(_slots_with_match(d))
        s["matched"]["capture_boundary_index"] += 1
        return True

    def matched_sample(d: dict) -> bool:
        s = next(_slots_with_match(d))
        s["matched"]["sample"] = s["matched"]["sample"] + "x"
        return True

    def cause_word(d: dict) -> bool:
        r = _report(d)
        words = r["cause"].split()
        words[1] = words[1] + "s"
        r["cause"] = " ".join(words)
        return True

    def token_count(d: dict) -> bool:
        _report(d)["scores"][0]["tokens"] += 1
        return True

    def a_metric_far(d: dict) -> bool:
        s = next(_slots_with_match(d))
        s["metrics"]["rel_err"] = round(s["metrics"]["rel_err"] * 1.05, 6)  # 5%: a different tensor's noise
        return True

    def a_cosine_near_one(d: dict) -> bool:
        s = next(_slots_with_match(d))
        s["metrics"]["cosine"] = round(s["metrics"]["cosine"] - 0.001, 6)
        return True

    def a_warning(d: dict) -> bool:
        r = _report(d)
        r["warnings"] = [*r["warnings"], "a warning more"]
        return True

    cases = []
    for case in ("seed-wrong", "smollm2-early", "real-modelopt-vs-dumper", "gate-seed-fixed"):
        for fn in (
            verdict,
            exit_code,
            an_id,
            other_engine_id,
            status,
            evidence,
            matched_capture,
            matched_sample,
            cause_word,
            token_count,
            a_metric_far,
            a_cosine_near_one,
            a_warning,
        ):
            cases.append((case, fn.__name__, fn))
    return cases


@pytest.mark.parametrize(("case", "what", "edit"), _edits(), ids=[f"{c}-{w}" for c, w, _ in _edits()])
def test_what_a_user_relies_on_fails(case: str, what: str, edit: Callable[[dict], bool]) -> None:
    want = _load(case)
    got = copy.deepcopy(want)
    assert edit(got)
    found = differences(got, want)
    assert found, f"{what} changed and the comparison passed"


def test_a_cosine_is_judged_by_its_noise_not_its_size() -> None:
    """0.0077 and 0.9999 are not judged alike: a small cosine of two unrelated tensors moves on another
    CPU by more than its relative size allows, a cosine near 1 with equal norms may not move that far."""
    want = {"x": {"cosine": 0.007698, "rel_err": 1.0}, "hidden_size": 576}
    assert differences({"x": {"cosine": 0.007692, "rel_err": 1.0}, "hidden_size": 576}, want) == []
    near_one = {"x": {"cosine": 0.9999, "norm_ratio": 1.0, "rel_err": 0.01}, "hidden_size": 576}
    assert (
        differences({"x": {"cosine": 0.99985, "norm_ratio": 1.0, "rel_err": 0.01}, "hidden_size": 576}, near_one) == []
    )
    assert (
        differences({"x": {"cosine": 0.9995, "norm_ratio": 1.0, "rel_err": 0.01}, "hidden_size": 576}, near_one) != []
    )


def test_a_curve_value_may_move_by_its_last_digit() -> None:
    want = {"profiles": {"tokens": [{"error": [0.9994, 0.00523]}]}, "hidden_size": 576}
    assert differences({"profiles": {"tokens": [{"error": [0.9993, 0.005231]}]}, "hidden_size": 576}, want) == []
    assert differences({"profiles": {"tokens": [{"error": [0.9992, 0.00523]}]}, "hidden_size": 576}, want) != []


def test_an_input_float_is_compared_exactly() -> None:
    want = {"tolerance": 0.1, "slots": []}
    assert differences({"tolerance": 0.1000001, "slots": []}, want) != []


@pytest.mark.parametrize("name", ["smollm2-early", "real-modelopt-vs-dumper-log", "seed-wrong"])
def test_text_numbers_within_their_last_digit_pass_and_ids_do_not(name: str) -> None:
    text = (GOLDEN / f"{name}.txt").read_text()
    width = hidden_size(_load(name)) or H_UNKNOWN
    bumped = re.sub(
        r"(?<![\w.])(\d+\.\d+)(?![\w.]\d|\d)",
        lambda m: f"{float(m.group(1)) + 10 ** -len(m.group(1).split('.')[1]):.{len(m.group(1).split('.')[1])}f}",
        text,
    )
    assert bumped != text
    assert text_differences(bumped, text, width) == []
    ids = re.search(r"\[(\d+), ", text)
    assert ids is not None
    changed = text[: ids.start(1)] + str(int(ids.group(1)) + 1) + text[ids.end(1) :]
    assert text_differences(changed, text, width) != []
    word = text.replace("verdict:", "verdicts:", 1)
    assert text_differences(word, text, width) != []
    far = re.sub(r"(?<![\w.])(\d+\.\d+)%", lambda m: f"{float(m.group(1)) * 1.5:.2f}%", text, count=1)
    assert far != text and text_differences(far, text, width) != []


def test_a_metric_stored_across_a_power_of_ten_keeps_its_noise() -> None:
    # 6 significant digits are 1e-6 below 1 and 1e-5 above it: a cosine of 0.99992 here may be computed
    # as its largest neighbour on another CPU, just above 1, and stored on the coarser grid
    want = {"hidden_size": 576, "metrics": {"cosine": 0.99992, "norm_ratio": 1.0}}
    noise = RULES["cosine"](summed_noise(576), 0.99992, want["metrics"])
    far = noise.store(0.99992 + noise.computed)
    assert far > 1.0 and differences({**want, "metrics": {"cosine": far, "norm_ratio": 1.0}}, want) == []
    assert differences({**want, "metrics": {"cosine": 1.0003, "norm_ratio": 1.0}}, want) != []
