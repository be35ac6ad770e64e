"""The collapse rule: when a window's acceptance says the draft is no longer fed what it was trained on.

Acceptance moves with the workload (a code-heavy hour accepts more than a chatty one), so the rule only
fires on a fall far larger than a workload shift, sustained, or so deep no working draft shows it:

* **gain** — the accepted tokens per step (AL - 1) below :data:`GAIN_SHARE` of the baseline's, in
  :data:`CONSECUTIVE_WINDOWS` windows in a row;
* **position 1** — the first drafted position accepted at below :data:`POSITION1_SHARE` of the baseline's
  rate, in as many windows in a row (only where the engine counts per position: vLLM, TensorRT-LLM);
* **floor** — the acceptance length below :data:`FLOOR_ACCEPTANCE` with at least
  :data:`FLOOR_MIN_SPEC_TOKENS` speculative tokens, in a single window: no EAGLE-3 draft fed its trained
  layers accepts that little; applied while the baseline is learned and whenever the baseline's gain is
  at least :data:`FLOOR_MIN_BASELINE` (else the floor would sit above the gain rule's threshold).

Why these numbers (docs/watch.md has the table): wrong layers cost 80-98% of the gain in every incident
on record — vLLM #50170 (acceptance rate 1.21% against 58.9%, position 1 0.036 against 0.751), tokenspeed
#526 (0.00 against 0.47), SGLang #21272 (accept len 1.00), and the project's fixture draft on vLLM (AL
1.033 against 1.193, position 1 0.029 against 0.182) — while a shift of layer or of workload costs far less
(one layer deeper on vLLM: 1.187 against 1.193). 40% and 0.3x sit between the two with room either way.

>>> from hsdiff.watch.records import Baseline, Window
>>> base = Baseline(1.19, (0.18, 0.006, 0.006, 0.0, 0.0), "given", 5)
>>> judge(Window(1, 0, 200, 6.6, (5.8, 0.8, 0.0, 0.0, 0.0)), base, 5)
('gain', 'position-1')
>>> judge(Window(1, 0, 200, 36.0, (34.0, 2.0, 0.0, 0.0, 0.0)), base, 5)
()
"""

from __future__ import annotations

from .records import Baseline, Window

__all__ = [
    "GAIN_SHARE",
    "POSITION1_SHARE",
    "CONSECUTIVE_WINDOWS",
    "FLOOR_ACCEPTANCE",
    "FLOOR_MIN_SPEC_TOKENS",
    "FLOOR_MIN_BASELINE",
    "DEFAULT_WINDOW_DRAFTS",
    "BASELINE_WINDOWS",
    "RULES",
    "judge",
    "floor_applies",
    "explain",
]

#: A window whose gain (AL - 1) is below this share of the baseline's reads as collapsed.
GAIN_SHARE = 0.40
#: A window whose position-1 acceptance is below this multiple of the baseline's reads as collapsed.
POSITION1_SHARE = 0.30
#: Windows in a row that must read as collapsed (gain or position 1) before the alarm.
CONSECUTIVE_WINDOWS = 3
#: Below this acceptance length (with enough speculative tokens) one window is enough.
FLOOR_ACCEPTANCE = 1.10
FLOOR_MIN_SPEC_TOKENS = 3
#: The floor applies against a baseline only when the gain rule's threshold lies above it.
FLOOR_MIN_BASELINE = round(1.0 + (FLOOR_ACCEPTANCE - 1.0) / GAIN_SHARE, 6)
#: Verification steps per window: at 1,000, a gain of 0.2 is measured to about +-0.03 (one sigma).
DEFAULT_WINDOW_DRAFTS = 1000
#: Windows pooled into the baseline when none is given.
BASELINE_WINDOWS = 3

#: Each rule's name (the ``reasons`` of an event) and what it says.
RULES = {
    "gain": f"accepted tokens per step (AL - 1) below {GAIN_SHARE:.0%} of the baseline's",
    "position-1": f"position-1 acceptance below {POSITION1_SHARE}x the baseline's",
    "floor": f"acceptance length below {FLOOR_ACCEPTANCE} with >= {FLOOR_MIN_SPEC_TOKENS} speculative tokens",
}


def floor_applies(baseline: Baseline | None, spec_tokens: int | None) -> bool:
    """Whether one window below :data:`FLOOR_ACCEPTANCE` is an alarm here."""
    if spec_tokens is None or spec_tokens < FLOOR_MIN_SPEC_TOKENS:
        return False
    return baseline is None or baseline.acceptance_length >= FLOOR_MIN_BASELINE


def judge(window: Window, baseline: Baseline | None, spec_tokens: int | None) -> tuple[str, ...]:
    """The rules ``window`` breaks against ``baseline`` (none learned yet: the floor alone)."""
    broken = []
    if baseline is not None and baseline.gain > 0:
        if window.acceptance_length - 1.0 < GAIN_SHARE * baseline.gain:
            broken.append("gain")
        got, base = window.per_position, baseline.per_position
        if got and base and base[0] > 0 and got[0] < POSITION1_SHARE * base[0]:
            broken.append("position-1")
    if floor_applies(baseline, spec_tokens) and window.acceptance_length < FLOOR_ACCEPTANCE:
        broken.append("floor")
    return tuple(broken)


def explain(reasons: tuple[str, ...], measured: Window, baseline: Baseline | None) -> str:
    """The reasons in numbers: 'gain 0.033 is 17% of the baseline's 0.193 (alarm below 40%)'."""
    parts = []
    if "gain" in reasons and baseline is not None and baseline.gain > 0:
        g = measured.acceptance_length - 1.0
        parts.append(
            f"gain (AL - 1) {g:.3f} is {g / baseline.gain:.0%} of the baseline's {baseline.gain:.3f} "
            f"(alarm below {GAIN_SHARE:.0%})"
        )
    got = measured.per_position
    if "position-1" in reasons and got and baseline is not None and baseline.per_position:
        parts.append(
            f"position 1 accepted {got[0]:.3f}, {got[0] / baseline.per_position[0]:.2f}x the baseline's "
            f"{baseline.per_position[0]:.3f} (alarm below {POSITION1_SHARE}x)"
        )
    if "floor" in reasons:
        parts.append(f"acceptance length {measured.acceptance_length:.3f} is below the floor {FLOOR_ACCEPTANCE}")
    return "; ".join(parts)
