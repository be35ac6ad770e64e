"""The :class:`~hsdiff.model.Diagnosis` record as the JSON report carries it: the kinds and overrides a
user's script branches on, and the fields every finding writes."""

from __future__ import annotations

import dataclasses
import json

import jsonschema
import pytest

from hsdiff import schemas
from hsdiff.model import Diagnosis, Direction, Finding, Miss, Override

DEF = schemas.load("report")["$defs"]["diagnosis"]
MISS = Miss(Direction(-1, (0.8123456, 0.9), (0.2, 0.31234567), (0.95, 0.97)), 1, ("vLLM",))


def test_the_kinds_and_overrides_are_the_report_schema_s() -> None:
    assert [f.value for f in Finding] == DEF["properties"]["kind"]["enum"]
    assert [o.value for o in Override] == DEF["properties"]["overrides"]["items"]["enum"]


@pytest.mark.parametrize(
    "d",
    [
        Diagnosis(Finding.MATCH),
        Diagnosis(Finding.LAYER_SHIFT, offset=-1, slots=(0, 1, 2)),
        Diagnosis(
            Finding.SLOT_SHIFT,
            offset=1,
            slots=(0, 1),
            missing=(59,),
            overrides=(Override.RANK_CONFLICT,),
            run="dump_20261201_000000_000001",
        ),
        Diagnosis(Finding.NO_MATCH, offset=-1, slots=(0, 1, 2), miss=MISS),
        Diagnosis(Finding.OPEN, slots=(2,), overrides=(Override.TORN_TOKENS, Override.RUNS_DISAGREE)),
    ],
    ids=lambda d: d.kind.value,
)
def test_every_diagnosis_is_written_as_the_schema_says(d: Diagnosis) -> None:
    out = json.loads(json.dumps(d.to_dict()))  # as a report file holds it
    jsonschema.validate(out, DEF)
    assert (out["kind"], out["offset"], out["slots"], out["missing_boundaries"]) == (
        d.kind.value,
        d.offset,
        list(d.slots),
        list(d.missing),
    )
    assert out["overrides"] == [o.value for o in d.overrides] and out["run"] == d.run


def test_a_miss_says_its_direction_in_words_and_rounds_its_figures() -> None:
    out = Diagnosis(Finding.NO_MATCH, offset=-1, miss=MISS).to_dict()["miss"]
    assert out == {
        "direction": "shallower",
        "layers": 1,
        "explained_by": ["vLLM"],
        "norm_ratios": [0.8123, 0.9],
        "errors": [0.2, 0.3123],
        "cosines": [0.95, 0.97],
    }
    deeper = dataclasses.replace(MISS, seen=dataclasses.replace(MISS.seen, sign=1), layers=None, explained_by=())
    assert deeper.to_dict()["direction"] == "deeper" and deeper.to_dict()["layers"] is None


def test_a_diagnosis_is_a_value() -> None:
    a = Diagnosis(Finding.SLOT_SHIFT, offset=1, slots=(0, 1), missing=(59,))
    assert a == Diagnosis(Finding.SLOT_SHIFT, offset=1, slots=(0, 1), missing=(59,)) and len({a, a}) == 1
    assert a != dataclasses.replace(a, offset=2)
