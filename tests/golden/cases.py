"""The golden cases: every fixture case and every test scenario that produces a report.

Each case is a command line for the ``hsdiff`` CLI, built (where it needs generated dumps) from real
SmolLM2 states by :mod:`tests.builders`. Its JSON report and text output are checked in under
``tests/golden/<name>.json`` / ``.txt``; ``tests/test_golden.py`` compares them. After an intended
change of behaviour, rewrite them with ``HSDIFF_UPDATE_GOLDEN=1 pytest tests/test_golden.py`` and say
in the commit why each changed file changed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from .. import builders as B

LOGS = B.FIXTURES / "logs"
CONFIGS = B.FIXTURES / "configs"
TARGET_SEED = str(B.SEED / "model" / "config.json")

Case = Callable[[Path], list[str]]
CASES: dict[str, Case] = {}


def case(name: str) -> Callable[[Case], Case]:
    def add(fn: Case) -> Case:
        CASES[name] = fn
        return fn

    return add


def _fixed(name: str, argv: list[str]) -> None:
    CASES[name] = lambda tmp: list(argv)


# -- the seed story (fixtures/seed) ------------------------------------------------------------------
S = str(B.SEED)
_fixed("seed-wrong", ["compare", f"{S}/train", f"{S}/infer-wrong", "--layer-ids=-1,2,30"])
_fixed("seed-fixed", ["compare", f"{S}/train", f"{S}/infer-fixed", "--layer-ids=2,30,58"])
_fixed("seed-no-ids", ["compare", f"{S}/train", f"{S}/infer-fixed"])
_fixed("seed-fixed-vllm", ["compare", f"{S}/train", f"{S}/infer-fixed", "--engine", "vllm", "--layer-ids=3,31,59"])
_fixed(
    "gate-seed-fixed",
    [
        "gate",
        f"{S}/train",
        f"{S}/infer-fixed",
        "--draft-config",
        f"{S}/draft-fixed/config.json",
        "--target-config",
        TARGET_SEED,
    ],
)
_fixed("seed-fixed-neighbours", ["compare", f"{S}/train", f"{S}/infer-fixed-neighbours", "--layer-ids=2,30,58"])
_fixed(
    "gate-seed-fixed-neighbours",
    [
        "gate",
        f"{S}/train",
        f"{S}/infer-fixed-neighbours",
        "--draft-config",
        f"{S}/draft-fixed/config.json",
        "--target-config",
        TARGET_SEED,
    ],
)
_fixed("seed-fixed-neighbours", ["compare", f"{S}/train", f"{S}/infer-fixed-neighbours", "--layer-ids=2,30,58"])
_fixed(
    "gate-seed-fixed-neighbours",
    [
        "gate",
        f"{S}/train",
        f"{S}/infer-fixed-neighbours",
        "--draft-config",
        f"{S}/draft-fixed/config.json",
        "--target-config",
        TARGET_SEED,
    ],
)
_fixed(
    "gate-seed-wrong",
    [
        "gate",
        f"{S}/train",
        f"{S}/infer-wrong",
        "--draft-config",
        f"{S}/draft-wrong/config.json",
        "--target-config",
        TARGET_SEED,
    ],
)
_fixed(
    "gate-out-of-range",
    [
        "gate",
        f"{S}/train",
        f"{S}/infer-fixed",
        "--draft-config",
        str(CONFIGS / "out-of-range.json"),
        "--target-config",
        TARGET_SEED,
    ],
)

# -- files written by the real tools (fixtures/real-dumps) -------------------------------------------
R = str(B.REAL)
_fixed("real-modelopt-vs-dumper", ["compare", f"{R}/modelopt", f"{R}/sglang-dumper"])
_fixed("real-modelopt-vs-dumper-log", ["compare", f"{R}/modelopt", f"{R}/sglang-dumper.log"])
_fixed("real-modelopt-vs-dumper-ids", ["compare", f"{R}/modelopt", f"{R}/sglang-dumper", "--layer-ids=1,14,26"])

# -- every debug-log style (fixtures/logs/cases.json) ------------------------------------------------
for _log, _c in json.loads((LOGS / "cases.json").read_text()).items():
    _fixed(f"log-{Path(_log).stem}", ["compare", str(B.FIXTURES / _c["train"]), str(LOGS / _log), *_c["args"]])

# -- check-config on every fixture config ------------------------------------------------------------
for _cfg in sorted(CONFIGS.glob("*.json")):
    _fixed(f"check-config-{_cfg.stem}", ["check-config", str(_cfg), "--num-layers", "30"])
_fixed(
    "check-config-kimi-deepseek",
    [
        "check-config",
        str(CONFIGS / "kimi-first-id.json"),
        "--target-config",
        str(CONFIGS / "targets" / "kimi-k25-61.json"),
    ],
)
_fixed(
    "check-config-vllm-nested",
    ["check-config", str(CONFIGS / "nested-only.json"), "--engine", "vllm", "--num-layers", "30"],
)


# -- scenarios built from real SmolLM2 states (tests/test_align_real.py and friends) ------------------
TRAIN_B = [2, 15, 27]


def _train(tmp: Path) -> Path:
    return B.specforge(tmp / "train", [0, 1, 2], TRAIN_B)


def _all_layers(tmp: Path) -> Path:
    return B.sglang_dump(tmp / "all", 1, list(range(30)), concat_slots=False, tag_layers=True)


def _scenario(name: str, infer: Callable[[Path], Path], *args: str) -> None:
    CASES[name] = lambda tmp: ["compare", str(_train(tmp)), str(infer(tmp)), *args]


_scenario("smollm2-correct", _all_layers, "--layer-ids=1,14,26")
_scenario("smollm2-late", _all_layers, "--layer-ids=2,15,27")
_scenario("smollm2-early", _all_layers, "--layer-ids=0,13,25")
_scenario("smollm2-vllm-ok", _all_layers, "--engine", "vllm", "--layer-ids=2,15,27")
_scenario("smollm2-vllm-output-ids", _all_layers, "--engine", "vllm", "--layer-ids=1,14,26")
_scenario("smollm2-no-ids", _all_layers)
_scenario(
    "smollm2-partial-layers", lambda t: B.sglang_dump(t / "i", 1, list(range(21)), concat_slots=False, tag_layers=True)
)
_scenario("smollm2-by-value", lambda t: B.sglang_dump(t / "i", 2, TRAIN_B, with_ids=False), "--layer-ids=1,14,26")
_scenario("smollm2-decode", lambda t: B.sglang_dump(t / "i", 0, TRAIN_B, tokens=slice(9, 13)), "--layer-ids=1,14,26")
_scenario(
    "smollm2-skip-first",
    lambda t: B.sglang_dump(t / "i", 0, TRAIN_B, tokens=slice(1, None), with_ids=False),
    "--layer-ids=1,14,26",
)
_scenario("smollm2-neighbours-only", lambda t: B.sglang_dump(t / "i", 1, [3, 16, 28]), "--layer-ids=2,15,27")
_scenario(
    "smollm2-sinks-only",
    lambda t: B.sglang_dump(t / "i", 1, list(range(10, 20)), concat_slots=False, tag_layers=True, tokens=slice(0, 1)),
)
_scenario(
    "smollm2-output-tags",
    lambda t: B.sglang_dump(t / "i", 0, TRAIN_B, concat_slots=False, tag_layers=True, tag_shift=-1),
    "--infer-index",
    "output",
    "--layer-ids=1,14,26",
)
_scenario("smollm2-two-ranks", lambda t: B.sglang_dump(t / "i", 1, TRAIN_B, ranks=2), "--layer-ids=1,14,26")
_scenario(
    "smollm2-vllm-connector",
    lambda t: B.vllm_file(t / "i", 1, TRAIN_B),
    "--engine",
    "vllm",
    "--layer-ids=2,15,27",
    "--hidden-size",
    "576",
)
_scenario("smollm2-modelopt-infer", lambda t: B.modelopt_file(t / "i", 1, TRAIN_B), "--layer-ids=1,14,26")


@case("smollm2-labelled-training")
def _labelled(tmp: Path) -> list[str]:
    train = _train(tmp)
    B.draft_config(train / "config.json", [1, 14, 26])
    infer = B.sglang_dump(tmp / "i", 1, list(range(21)), concat_slots=False, tag_layers=True)
    return ["compare", str(train), str(infer), "--layer-ids=1,14,26"]


@case("gate-smollm2-vllm-nested-only")
def _gate_nested(tmp: Path) -> list[str]:
    cfg = B.draft_config(tmp / "draft" / "config.json", [1, 14, 26])
    return [
        "gate",
        str(_train(tmp)),
        str(_all_layers(tmp)),
        "--draft-config",
        str(cfg),
        "--engine",
        "vllm",
        "--target-config",
        str(B.SMOLLM2 / "config.json"),
    ]


@case("gate-smollm2-sglang")
def _gate_sglang(tmp: Path) -> list[str]:
    cfg = B.draft_config(tmp / "draft" / "config.json", [1, 14, 26])
    return [
        "gate",
        str(_train(tmp)),
        str(_all_layers(tmp)),
        "--draft-config",
        str(cfg),
        "--target-config",
        str(B.SMOLLM2 / "config.json"),
    ]
