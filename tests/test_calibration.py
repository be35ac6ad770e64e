"""The calibration suite, short: 60 generated scenarios from real SmolLM2 states (``tests/scenarios``),
the first 60 of the seeds the decision constants were chosen on (``FIT_SEEDS``): a regression guard.
``make calibrate`` publishes its table on held-out seeds (``HELD_OUT_SEEDS``), none of them here. A
wrong id at confidence >= 0.9 is the one thing a deployment gate must never say; every other figure
(the table per confidence bin, the fraction answered) is measured by ``make calibrate`` and not
asserted here.
"""

from __future__ import annotations

import logging

import pytest
import torch

from .scenarios import generate
from .scenarios.heldout import FIT_SEEDS
from .scenarios.score import CONFIDENT, Outcome, run

SEEDS = FIT_SEEDS[:60]


@pytest.fixture(scope="module")
def outcomes() -> list[Outcome]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threads only add contention
    logging.disable(logging.WARNING)
    try:
        return [run(generate(s)) for s in SEEDS]
    finally:
        logging.disable(logging.NOTSET)
        torch.set_num_threads(threads)


def _show(items: list[Outcome]) -> str:
    return "\n".join(f"seed {o.seed}: {o.about} -> {o.verdict} exit {o.exit_code} {o.error}" for o in items[:5])


def test_no_wrong_id_at_high_confidence(outcomes):
    bad = [o for o in outcomes if any(a.outcome == "wrong" and a.confidence >= CONFIDENT for a in o.slots)]
    assert not bad, (
        "wrong ids at confidence >= 0.9 (replay: python benchmarks/calibrate.py --n 1 -v --seed N)\n" + _show(bad)
    )


def test_no_internal_errors(outcomes):
    bad = [o for o in outcomes if o.exit_code == 3]
    assert not bad, _show(bad)


def test_no_pass_on_a_wrong_deployment(outcomes):
    bad = [o for o in outcomes if o.exit_code == 0 and o.should_pass is False]
    assert not bad, _show(bad)


# ----------------------------------------------------------------------------- named classes of thin evidence
CLASS_SEEDS = FIT_SEEDS[:12]


@pytest.fixture(scope="module")
def class_outcomes(tmp_path_factory) -> list[dict]:
    from .scenarios import classes

    logging.disable(logging.WARNING)
    try:
        return [
            classes.outcome(f(seed), tmp_path_factory.mktemp(f"{name}-{seed}"))
            for name, f in classes.CLASSES.items()
            for seed in CLASS_SEEDS
        ]
    finally:
        logging.disable(logging.NOTSET)


def _show_cases(items: list[dict]) -> str:
    return "\n".join(
        f"{o['class']} seed {o['seed']}: {o['case']} -> {o['verdict']} exit {o['exit_code']}" for o in items
    )


def test_classes_pass_no_wrong_deployment(class_outcomes):
    bad = [o for o in class_outcomes if o["exit_code"] == 0 and o["should_pass"] is False]
    assert not bad, _show_cases(bad)


def test_classes_give_no_wrong_id_at_high_confidence_and_no_internal_error(class_outcomes):
    bad = [
        o for o in class_outcomes if o["exit_code"] == 3 or any(k == "wrong" and c >= CONFIDENT for k, c in o["slots"])
    ]
    assert not bad, _show_cases(bad)


def test_classes_keep_every_training_slot(class_outcomes):
    bad = [o for o in class_outcomes if o.get("slots_read", len(o["slots"])) != len(o["slots"])]
    assert not bad, _show_cases(bad)


@pytest.mark.slow
def test_fingerprint_deployments_on_fit_seeds(tmp_path):
    """CI's guard of the fingerprint rows of ``make calibrate``: SmolLM2 deployments (fit seeds, bf16 and
    eager attention) checked against a fingerprint: right ids pass, ids off fail, no wrong id held at
    confidence >= 0.9."""
    import dataclasses

    from .scenarios import fingerprint, heldout

    outcomes = []
    for noise in ("bf16", "eager"):
        for seed in range(FIT_SEEDS.start, FIT_SEEDS.start + 4):
            d = dataclasses.replace(heldout.deployment(seed, ("smollm2-30",)), noise=noise)
            outcomes.append(fingerprint.outcome(d, tmp_path / f"{noise}-{seed}"))
    fingerprint.forget("smollm2-30")
    s = fingerprint.summary(outcomes)["all"]
    assert s["right"] and s["off"], s  # both kinds drawn
    assert s["right_exit_0"] == s["right"], outcomes
    assert s["off_exit_0"] == 0, outcomes
    assert s["wrong_at_0.9"] == 0, outcomes
