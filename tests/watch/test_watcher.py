"""The window and collapse logic on increments as a scrape or a log line makes them: windows pool to at
least ``window_drafts`` steps, three collapsed windows in a row raise one alarm, the floor raises it at once,
and a restart (counters falling) starts a new segment without a negative delta."""

from __future__ import annotations

import json

import pytest

from hsdiff.watch import (
    CONSECUTIVE_WINDOWS,
    FLOOR_ACCEPTANCE,
    GAIN_SHARE,
    Baseline,
    CounterTracker,
    Increment,
    Restart,
    Sample,
    Settings,
    Watcher,
)
from hsdiff.watch.collapse import FLOOR_MIN_BASELINE, judge
from hsdiff.watch.records import Window
from hsdiff.watch.run import _feed

#: vLLM 0.32 (CPU) with the fixture draft, 5 speculative tokens (README): the right ids and [15, 0, 2]
RIGHT = (0.182, 0.006, 0.006, 0.0, 0.0)
WRONG = (0.029, 0.005, 0.0, 0.0, 0.0)


def inc(drafts: float, per_position: tuple[float, ...], spec: int | None = 5) -> Increment:
    at = tuple(p * drafts for p in per_position)
    return Increment(drafts, sum(at), at, "counted", spec_tokens=spec)


def kinds(events) -> list[str]:
    return [e.kind for e in events]


def test_windows_pool_until_enough_drafts():
    w = Watcher(Settings(window_drafts=100), Baseline(1.194, RIGHT, "given", 5))
    assert w.add(inc(60, RIGHT), 1.0) == []
    events = w.add(inc(60, RIGHT), 2.0)
    assert kinds(events) == ["window"]
    win = events[0].window
    assert win.drafts == 120 and win.index == 1 and win.started == 1.0 and win.ended == 2.0
    assert win.acceptance_length == pytest.approx(1 + sum(RIGHT))
    assert win.per_position == pytest.approx(RIGHT)
    assert events[0].reasons == ()


def test_three_collapsed_windows_raise_one_alarm_naming_both_values():
    w = Watcher(Settings(window_drafts=100), Baseline(1.194, RIGHT, "given", 5))
    got = [kinds(w.add(inc(100, WRONG), float(t))) for t in range(5)]
    assert got == [["window"], ["window"], ["window", "alarm"], ["window"], ["window"]]  # once per episode
    w2 = Watcher(Settings(window_drafts=100), Baseline(1.194, RIGHT, "given", 5))
    alarm = [e for t in range(3) for e in w2.add(inc(100, WRONG), float(t)) if e.alarm][0]
    assert alarm.reasons == ("gain", "position-1") and [x.index for x in alarm.windows] == [1, 2, 3]
    assert "measured acceptance length 1.034" in alarm.message and "baseline 1.194" in alarm.message
    doc = json.loads(alarm.to_json())
    assert doc["event"] == "alarm" and doc["measured"]["acceptance_length"] == pytest.approx(1.034)
    assert doc["baseline"]["acceptance_length"] == 1.194 and doc["windows"] == [1, 2, 3]


def test_a_healthy_window_breaks_the_streak_and_ends_an_alarm():
    w = Watcher(Settings(window_drafts=100), Baseline(1.194, RIGHT, "given", 5))
    seq = [WRONG, WRONG, RIGHT, WRONG, WRONG]
    assert not any(e.alarm for p in seq for e in w.add(inc(100, p), 0.0))
    events = w.add(inc(100, WRONG), 0.0)
    assert kinds(events) == ["window", "alarm"]
    # one healthy window does not end it (a collapsed deployment's windows scatter about the threshold)
    assert kinds(w.add(inc(100, RIGHT), 0.0)) == ["window"]
    assert kinds(w.add(inc(100, RIGHT), 0.0)) == ["window"]
    assert kinds(w.add(inc(100, RIGHT), 0.0)) == ["window", "recovered"]


def test_the_rule_thresholds():
    base = Baseline(2.0, (0.6, 0.3, 0.1), "given", 3)
    gain_edge = 1 + GAIN_SHARE * 1.0
    assert judge(Window(1, 0, 1000, (gain_edge - 1) * 1000 + 1, None), base, 3) == ()
    assert judge(Window(1, 0, 1000, (gain_edge - 1) * 1000 - 1, None), base, 3) == ("gain",)
    # position 1 alone: the later positions make up the gain
    assert judge(Window(1, 0, 1000, 700, (170, 330, 200)), base, 3) == ("position-1",)
    assert judge(Window(1, 0, 1000, 90, None), base, 3) == ("gain", "floor")
    assert judge(Window(1, 0, 1000, 90, None), base, 2) == ("gain",)  # the floor needs >= 3 tokens
    # a weak draft's baseline: the floor would sit above the gain rule's threshold, so it does not apply
    weak = Baseline(FLOOR_MIN_BASELINE - 0.01, None, "given", 5)
    assert judge(Window(1, 0, 1000, 98, None), weak, 5) == ()  # AL 1.098: below the floor, above 40% of 0.24
    assert FLOOR_MIN_BASELINE == pytest.approx(1 + (FLOOR_ACCEPTANCE - 1) / GAIN_SHARE)


def test_the_floor_alarms_in_one_window_while_the_baseline_is_learned():
    w = Watcher(Settings(window_drafts=100))
    events = w.add(Increment(100, 2, None, spec_tokens=5), 0.0)
    assert kinds(events) == ["window", "alarm"] and events[1].reasons == ("floor",)
    assert "no baseline yet" in events[1].message


def test_baseline_learned_from_the_first_windows():
    w = Watcher(Settings(window_drafts=100, baseline_windows=3))
    events = [e for _ in range(3) for e in w.add(inc(100, RIGHT), 0.0)]
    assert kinds(events) == ["window", "window", "window", "baseline"]
    assert w.baseline is not None and w.baseline.acceptance_length == pytest.approx(1 + sum(RIGHT))
    assert "first 3 windows" in w.baseline.source
    got = [e for _ in range(CONSECUTIVE_WINDOWS) for e in w.add(inc(100, WRONG), 0.0)]
    assert kinds(got)[-1] == "alarm"


def vllm(drafts: float, accepted: float, per_pos: tuple[float, ...] = (), created: float | None = None) -> Sample:
    return Sample("vllm", {"drafts": drafts, "accepted": accepted}, {"accepted_at": dict(enumerate(per_pos))}, created)


def test_counter_reset_is_a_new_segment_never_a_negative_delta():
    t = CounterTracker()
    assert t.step(vllm(5000, 960, (910, 30, 20))) is None
    step = t.step(vllm(5200, 1000, (946, 31, 23)))
    assert isinstance(step, Increment) and (step.drafts, step.accepted) == (200, 40)
    assert step.accepted_at == (36, 1, 3)
    restart = t.step(vllm(150, 5, (4, 1, 0)))  # the server restarted and served 150 steps since
    assert isinstance(restart, Restart) and "drafts went from 5200 to 150" in restart.reason
    assert restart.increment is not None and (restart.increment.drafts, restart.increment.accepted) == (150, 5)
    # counters made anew that already passed the old values: told by their _created time
    t2 = CounterTracker(vllm(100, 20, created=1000.0))
    again = t2.step(vllm(400, 30, created=2000.0))
    assert isinstance(again, Restart) and "_created" in again.reason
    assert again.increment is not None and again.increment.drafts == 400


def test_restart_is_a_new_segment_that_keeps_the_baseline():
    w = Watcher(Settings(window_drafts=100), Baseline(1.194, RIGHT, "given", 5))
    w.add(inc(100, WRONG), 0.0)
    w.add(inc(50, WRONG), 0.0)  # an open window
    events = _feed(w, [Restart("drafts went from 5200 to 150", inc(150, WRONG))], 1.0)
    assert kinds(events) == ["reset", "window"]
    assert w.segment == 1 and events[1].window.segment == 1 and events[1].window.drafts == 150  # nothing old
    assert events[1].streak == 1 and w.baseline is not None  # the streak restarts with the process
    assert "the baseline stays 1.194" in events[0].message
    # a baseline learned before the restart is kept too: a restart into wrong ids is what the watch is for
    learned = Watcher(Settings(window_drafts=100, baseline_windows=1))
    learned.add(inc(100, RIGHT), 0.0)
    learned.restart("x", 0.0)
    assert learned.baseline is not None
    got = [e for _ in range(3) for e in learned.add(inc(100, WRONG), 0.0)]
    assert kinds(got)[-1] == "alarm" and "baseline 1.194" in got[-1].message
    # one still being learned is learned from the new process alone
    half = Watcher(Settings(window_drafts=100, baseline_windows=2))
    half.add(inc(100, RIGHT), 0.0)
    assert "learned from it" in half.restart("x", 0.0)[0].message and half.learned == []


def test_state_round_trip_keeps_the_streak():
    w = Watcher(Settings(window_drafts=100), Baseline(1.194, RIGHT, "given", 5))
    w.add(inc(100, WRONG), 0.0)
    w.add(inc(100, WRONG), 0.0)
    w.add(inc(30, WRONG), 0.0)
    doc = json.loads(json.dumps(w.state()))
    back = Watcher.from_state(doc, Settings(window_drafts=100))
    assert back.streak == 2 and back.open is not None and back.open.drafts == 30
    assert kinds(back.add(inc(70, WRONG), 0.0)) == ["window", "alarm"]
