"""Round trip over the whole convention table: training layers -> recommended ids -> ``fix-config`` ->
the config read back as the engine version reads it -> the same training layers, slot for slot.

For every engine, version, model family and a set of boundaries that engine can capture, the ids hsdiff
recommends (and every ``by_engine`` entry, each at the version it names) are written with
:func:`hsdiff.fix_config.fix_config` where the engine reads a draft config, then read back by
:func:`engine_reads` below: the key lookup order of the engine (the table's ``CONFIG_KEYS``), its shift
rule (the row's ``reading``, applied here with arithmetic of this test's own), its range and its slot order
(sorting, TensorRT-LLM's -1). A second set of cases goes through a real :func:`hsdiff.compare` on dumps
of real SmolLM2 states holding the training layers, and its JSON report through ``fix-config --from-report``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hsdiff import compare, decide
from hsdiff.configs import config_value
from hsdiff.errors import InputError
from hsdiff.fix_config import fix_config, ids_from_report
from hsdiff.rules import conventions as conv
from hsdiff.rules.profile import (
    BOUNDARY,
    CONFIG_KEYS,
    DEEPSEEK,
    ENGINE_INFO,
    FAMILIES,
    GPT_OSS,
    NONE,
    OUTPUT,
    RULES,
    VERSIONS,
    Rule,
)
from hsdiff.rules.serving import serve
from hsdiff.rules.settings import settings_for

from . import builders as B

L = B.L  # 30: SmolLM2-135M, whose real states the dumps hold
FINAL = L + 1  # the final post-norm state, as hsdiff numbers it
FAMILY_ENGINES = ("sglang", "specforge", "vllm")  # the engines whose reading depends on the model family


# --------------------------------------------------------------------------- the engine, as this test reads it


def _row(engine: str, family: str, version: str) -> Rule:
    return conv.applied(engine, family if engine in FAMILY_ENGINES else None, version)


def _top(r: Rule) -> int:
    return L if r.captures_last else L - 1


def engine_reads(
    config: dict | None, ids: list[int] | None, engine: str, version: str, family: str, runner: str = "v2"
) -> list[int]:
    """The boundaries ``engine`` at ``version`` captures, slot by slot: the ids found in ``config`` at the
    first key the engine looks at (or ``ids`` for an engine that reads no draft config), shifted as the
    table row says, range-checked, in the engine's slot order."""
    if config is not None:
        keys = CONFIG_KEYS[f"vllm-{runner}" if engine == "vllm" else engine]
        found = [v for k in keys if (v := config_value(config, k)[1]) is not None and (engine != "vllm" or v)]
        assert found, f"{engine} finds no ids in {config}"
        ids = found[0]
    assert ids is not None
    r = _row(engine, family, version)
    if r.fixed:  # reads no id at all: its own layers, whatever was written
        return [2, L // 2, L - 3]
    shift = {OUTPUT: 1, BOUNDARY: 0, DEEPSEEK: 1 if ids[0] == 1 else 0, GPT_OSS: 0 if max(ids) == L else 1}[r.reading]
    out = []
    for i in ids:
        if r.names_final and ((engine == "trtllm" and i == -1) or (engine == "hf" and i == L)):
            out.append(FINAL)
        else:
            b = i + shift
            assert r.min_boundary <= b <= _top(r), f"{r.label}: id {i} names B{b}, which it cannot capture"
            out.append(b)
    if not ENGINE_INFO[engine].sorts:
        return out
    out = sorted(set(out))
    if engine == "trtllm" and version != "two-model" and FINAL in out:  # one-model path: -1 in slot 0
        out = [FINAL] + out[:-1]
    return out


def delivered(boundaries: list[int], engine: str, version: str) -> list[int]:
    """Training slots in the order ``engine`` delivers them (training in another order cannot be served)."""
    if not ENGINE_INFO[engine].sorts:
        return boundaries
    out = sorted(boundaries)
    if engine == "trtllm" and version != "two-model" and FINAL in out:
        out = [FINAL] + out[:-1]
    return out


def boundary_sets(r: Rule) -> list[list[int]]:
    """Sets of three layers the row can capture: the usual default, the lowest and the highest it can
    reach, and the final post-norm state where it has an id for it."""
    if r.fixed:
        return [[2, L // 2, L - 3]]
    low, top = r.min_boundary, _top(r)
    sets = [[2, 15, 27], [low, low + 1, 15], [10, top - 1, top]]
    if r.names_final:
        sets.append([3, 15, FINAL])
    return [s for s in sets if all(b == FINAL or low <= b <= top for b in s)]


def written_config(tmp: Path, engine: str, ids: list[int], version: str, family: str) -> dict | None:
    """``ids`` written by fix-config into a fresh draft config (None where the engine reads no draft config)."""
    if not CONFIG_KEYS[engine if engine != "vllm" else "vllm-v2"]:
        with pytest.raises(InputError):
            fix_config(tmp / "config.json", ids, engine=engine, version=version, model_family=family)
        return None
    path = B.draft_config(tmp / f"{engine}-{version}" / "config.json", [], nested=False)
    result = fix_config(path, ids, engine=engine, version=version, model_family=family)
    assert result.written and result.version == version
    return json.loads(path.read_text())


def cases() -> list[tuple[str, str, str]]:
    """Every engine x version x model family (the family only where the engine's reading depends on it)."""
    out = []
    for engine in conv.ENGINES:
        families = list(FAMILIES) if engine in FAMILY_ENGINES else ["llama"]
        out += [(engine, v, f) for v in VERSIONS[engine] for f in families]
    return out


@pytest.fixture(autouse=True)
def _no_fsync(monkeypatch):
    """fix-config syncs every write to disk; hundreds of throw-away configs need not wait for the disk."""
    monkeypatch.setattr("os.fsync", lambda fd: None)


# --------------------------------------------------------------------------- every row, through the library


@pytest.mark.parametrize("engine,version,family", cases(), ids=lambda x: str(x))
def test_recommended_ids_round_trip(engine: str, version: str, family: str, tmp_path: Path) -> None:
    r = _row(engine, family, version)
    settings = settings_for(engine, version, family, "test", num_layers=L)
    if r.reading == NONE:  # no EAGLE-3 capture at all: refused, with the row's reason
        with pytest.raises(InputError, match=r.source.split()[0]):  # names the source line
            decide.recommend(settings, [2, 15, 27])
        return
    sets = boundary_sets(r)
    assert sets, r
    if r.fixed:  # any other layers: refused, naming what it captures instead
        other = serve([3, 16, 28], engine, num_layers=L, model_family=family, version=version)
        assert [o.kind for o in other.obstacles] == ["fixed"] and "B[2, 15, 27]" in other.sentences()[0]
    for bs in (delivered(s, engine, version) for s in sets):
        rec, _ = decide.recommend(settings, bs)
        assert rec.version == version and rec.by_engine[engine].at.version == version
        assert rec.by_engine[engine].ids == rec.ids  # one engine, one answer
        assert None not in rec.ids, (bs, rec.unservable)
        ids = [int(i) for i in rec.ids if i is not None]
        config = written_config(tmp_path, engine, ids, version, family)
        assert engine_reads(config, ids, engine, version, family) == bs
        if engine == "vllm" and config is not None:  # the V1 runner looks at the same top-level key first
            assert engine_reads(config, None, engine, version, family, runner="v1") == bs
        for other, entry in rec.by_engine.items():
            _by_engine_round_trips(other, entry.at.version, entry.ids, bs, family, tmp_path)


_CHECKED: set[tuple] = set()  # by_engine entries already round-tripped (most cases share the other engines')


def _by_engine_round_trips(
    engine: str, version: str | None, ids: tuple[int | None, ...], trained: list[int], family: str, tmp: Path
) -> None:
    """``by_engine[engine]`` reproduces the training slots on ``engine`` at the version it names, or holds a
    null exactly where that engine cannot serve them (and hsdiff says why)."""
    assert version is not None
    key = (engine, version, ids, tuple(trained), family)
    if key in _CHECKED:
        return
    _CHECKED.add(key)
    if _row(engine, family, version).reading == NONE:
        assert set(ids) == {None}
        return
    if None in ids:
        assert not serve(trained, engine, num_layers=L, model_family=family, version=version).ok
        return
    written = [int(i) for i in ids if i is not None]
    config = written_config(tmp, engine, written, version, family)
    assert engine_reads(config, written, engine, version, family) == trained


def test_every_row_of_the_table_is_reached() -> None:
    """The cases above select every row of the convention table at least once."""
    reached = {_row(e, f, v) for e, v, f in cases()}
    missing = [r for r in RULES if r not in reached and r.engine != "specforge"]
    assert not missing  # SpecForge's own row is applied through SGLang's, which every SGLang family reaches


# --------------------------------------------------------------------------- through compare, on dumps


def compare_cases() -> list[tuple[str, str, str]]:
    """One version per row of the table that can capture (the row's first version), and its family."""
    out = []
    for r in RULES:
        if r.reading == NONE or r.engine == "specforge":
            continue
        version = next(v for v in VERSIONS[r.engine] if _row(r.engine, (r.families or ("llama",))[0], v) == r)
        out.append((r.engine, version, (r.families or ("llama",))[0]))
    out.append(("specforge", "0.5.12", "deepseek"))  # SpecForge through SGLang before and after the DeepSeek change
    out.append(("specforge", "0.5.14", "deepseek"))
    return out


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """An SGLang dumper run holding every boundary B0..B30 of sample 1, and SpecForge training sets."""
    root = tmp_path_factory.mktemp("roundtrip")
    infer = B.sglang_dump(root / "all-layers", 1, list(range(L + 1)), concat_slots=False, tag_layers=True)
    trains: dict[tuple[int, ...], Path] = {}

    def train(bs: list[int]) -> Path:
        if tuple(bs) not in trains:
            trains[tuple(bs)] = B.specforge(root / ("train-" + "-".join(map(str, bs))), [1], bs)
        return trains[tuple(bs)]

    return infer, train


@pytest.mark.parametrize("engine,version,family", compare_cases(), ids=lambda x: str(x))
def test_compare_then_fix_config_round_trips(engine: str, version: str, family: str, dumps, tmp_path: Path) -> None:
    infer, train = dumps
    top = _top(_row(engine, family, version))
    bs = [10, top - 1, top]  # the deepest layers the row can capture (B = L where it can)
    if _row(engine, family, version).fixed:
        bs = [2, L // 2, L - 3]  # the only layers it captures
    report = compare(train(bs), infer, engine=engine, engine_version=version, model_family=family, num_layers=L)
    assert [s.boundary_index for s in report.slots] == bs
    assert all(s.evidence == "observed" for s in report.slots)
    assert report.settings is not None and report.settings.engine.version == version
    path = tmp_path / "report.json"
    path.write_text(report.to_json())
    doc = json.loads(path.read_text())
    assert doc["recommended"]["engine_version"] == version
    if CONFIG_KEYS[engine if engine != "vllm" else "vllm-v2"]:
        found = ids_from_report(path)
        assert (found.engine, found.version, list(found.ids)) == (
            engine,
            version,
            doc["recommended"]["eagle_aux_hidden_state_layer_ids"],
        )
        config = written_config(tmp_path, engine, list(found.ids), version, family)
        assert engine_reads(config, None, engine, version, family) == bs
    else:
        assert engine_reads(None, doc["recommended"]["eagle_aux_hidden_state_layer_ids"], engine, version, family) == bs
    for other, entry in doc["recommended"]["by_engine"].items():
        _by_engine_round_trips(other, entry["version"], tuple(entry["ids"]), bs, family, tmp_path)
