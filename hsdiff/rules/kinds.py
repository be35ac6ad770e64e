"""Draft kinds: which family of drafts eats the aux hidden states, how to tell it from a draft config, and
how many ids it takes. A kind selects the rows an engine reads ids with (``reading``): EAGLE-3 drafts the
EAGLE-3 table, the DFlash family its own rows (:mod:`hsdiff.rules.dflash`); MTP heads take no aux ids.

>>> kind_from_config({"architectures": ["DFlashDraftModel"]}).key
'dflash'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DraftKind",
    "DRAFT_KINDS",
    "EAGLE3",
    "DFLASH",
    "EAGLE3_KINDS",
    "DFLASH_KINDS",
    "EAGLE31_FLAGS",
    "DraftNorm",
    "DRAFT_NORMS",
    "MISSING_NORM_WEIGHT",
    "draft_norms",
    "kind_from_config",
]

EAGLE3 = "eagle3"  # the reading of EAGLE-3 drafts: the table of hsdiff.rules.profile
DFLASH = "dflash"  # the reading of the DFlash family: hsdiff.rules.dflash


@dataclass(frozen=True)
class DraftKind:
    """One kind of draft: a row of ``--draft-kind``."""

    key: str
    title: str
    reading: str  # EAGLE3, DFLASH or "" (takes no aux hidden-state ids)
    architectures: tuple[str, ...]  # draft config architectures that select it (substring, case-sensitive)
    counts: tuple[int, int]  # how many ids it takes, (fewest, most); (0, 0) none
    source: str
    note: str = ""  # said when it is refused or reported


DRAFT_KINDS: dict[str, DraftKind] = {
    k.key: k
    for k in [
        DraftKind(
            "eagle3",
            "EAGLE-3",
            EAGLE3,
            ("Eagle3", "EAGLE3", "Eagle3Speculator", "LlamaForCausalLMEagle3"),
            (1, 8),
            "sglang==0.5.23 sglang/srt/models/llama_eagle3.py:154-161 (fc over num_aux_hidden_states chunks); "
            "vllm==0.33.0 transformers_utils/configs/speculators/algos.py:20-49; DeepSpec uses 5 "
            "(deepseek-ai/DeepSpec, top-level target_layer_ids)",
        ),
        DraftKind(
            "eagle3.1",
            "EAGLE-3.1",
            EAGLE3,
            ("Eagle31", "EAGLE31", "Eagle3_1"),
            (1, 8),
            "sglang==0.5.23 sglang/srt/models/llama_eagle3.py:171-207 (norm_before_fc, fc_norm / legacy "
            "use_aux_norm, norm_output), :241-268; vllm==0.33.0 transformers_utils/configs/speculators/"
            "algos.py:36-38,74 (the three flags lifted from a speculators config)",
            note="EAGLE-3 with norms around the fc; its ids are read as EAGLE-3's",
        ),
        DraftKind(
            "peagle",
            "P-EAGLE",
            EAGLE3,
            ("Peagle", "PEagle", "PEAGLE"),
            (1, 8),
            "vllm==0.33.0 vllm/transformers_utils/configs/speculators/algos.py:53-87 (update_peagle: the top-level "
            "eagle_aux_hidden_state_layer_ids, as for EAGLE-3), model_executor/models/registry.py:699,706 "
            "(PeagleLlamaForCausalLM runs as Eagle3LlamaForCausalLM)",
            note="parallel drafting on an EAGLE-3 draft; its ids are read as EAGLE-3's",
        ),
        DraftKind(
            "dflash",
            "DFlash",
            DFLASH,
            ("DFlashDraftModel", "DFlash"),
            (1, 8),
            "sglang==0.5.23 sglang/srt/speculative/dflash_utils.py:348-385,656-674 "
            "(dflash_config.target_layer_ids, else top-level target_layer_ids)",
        ),
        DraftKind(
            "dflash2",
            "DFlash2",
            DFLASH,
            ("DFlash2", "MuseGlimmerAssistantModel"),
            (1, 8),
            "sglang==0.5.23 sglang/srt/model_executor/model_runner_components/spec_aux_hidden_state.py:17-29",
        ),
        DraftKind(
            "dspark",
            "DSpark",
            DFLASH,
            ("DSpark",),
            (1, 8),
            "sglang==0.5.23 sglang/srt/speculative/dspark_components/dspark_config.py:226-310 "
            "(dspark_target_layer_ids first); vllm==0.33.0 v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:125-135",
        ),
        DraftKind(
            "domino",
            "Domino",
            DFLASH,
            ("Domino",),
            (1, 8),
            "SpecForge@a6b6b02 specforge/algorithms/domino/providers.py:67-68 (the DFlash draft's "
            "target_layer_ids); served as DFlash, sglang==0.5.23 speculative/domino_utils.py",
        ),
        DraftKind(
            "mtp",
            "MTP head",
            "",
            ("MTP", "NextN", "Mtp"),
            (0, 0),
            "sglang==0.5.23 spec_aux_hidden_state.py:156-178 (a NEXTN/MTP head is sized by "
            "num_nextn_predict_layers, no aux ids); vllm==0.33.0 v1/worker/gpu/spec_decode/eagle/eagle3_utils.py:15-22 "
            "(aux hidden states only for eagle3, dflash, dspark, extract_hidden_states)",
            note="an MTP head reads the target's last hidden state, not aux hidden states: it takes no "
            "layer ids, so there is nothing to check or translate",
        ),
    ]
}

EAGLE3_KINDS = tuple(k for k, v in DRAFT_KINDS.items() if v.reading == EAGLE3)
DFLASH_KINDS = tuple(k for k, v in DRAFT_KINDS.items() if v.reading == DFLASH)

#: EAGLE-3.1 flags a draft config may set, and what each does (check-config reports them).
EAGLE31_FLAGS: dict[str, str] = {
    "fc_norm": "one RMSNorm per aux chunk before the fc",
    "use_aux_norm": "one RMSNorm per aux chunk before the fc (legacy name of fc_norm)",
    "norm_before_fc": "one RMSNorm over the concatenated aux hidden states before the fc",
    "norm_output": "the draft feeds back its post-norm hidden state",
}


@dataclass(frozen=True)
class DraftNorm:
    """One of an EAGLE-3.1 draft's norms as an engine switches it on: the config keys it reads and how."""

    name: str  # the module: norm_before_fc, fc_norm or norm_output
    keys: tuple[tuple[str, ...], ...]  # the config keys read
    first: bool  # True: the first key present decides; False: any key set switches it on
    weights: str  # the weight it loads ({i}: per aux chunk), "" none
    source: str


_SG31 = "sglang==0.5.23 sglang/srt/models/llama_eagle3.py"
_VL31 = "vllm==0.33.0 vllm/model_executor/models/llama_eagle3.py"
_BEFORE_FC = (("eagle_config", "norm_before_fc"), ("norm_before_fc",))

#: Per engine, the EAGLE-3.1 norms of a draft and where it reads each. The engines agree but for the legacy
#: ``use_aux_norm``, which vLLM does not read. An engine without a row of its own reads them as SGLang does.
DRAFT_NORMS: dict[str, tuple[DraftNorm, ...]] = {
    "sglang": (
        DraftNorm("norm_before_fc", _BEFORE_FC, True, "input_norm.weight", f"{_SG31}:173-182, :239-240"),
        DraftNorm(
            "fc_norm", (("fc_norm",), ("use_aux_norm",)), False, "fc_norm.{i}.weight", f"{_SG31}:184-196, :241-246"
        ),
        DraftNorm("norm_output", (("norm_output",),), True, "", f"{_SG31}:207, :263-268"),
    ),
    "vllm": (
        DraftNorm("norm_before_fc", _BEFORE_FC, True, "input_norm.weight", f"{_VL31}:184-188, :405-407, :464-465"),
        DraftNorm("fc_norm", (("fc_norm",),), False, "fc_norm.{i}.weight", f"{_VL31}:231-240, :411-416"),
        DraftNorm("norm_output", (("norm_output",),), True, "", f"{_VL31}:252, :283-286"),
    ),
}
#: What an engine does with a norm the config switches on but whose weights the checkpoint lacks.
MISSING_NORM_WEIGHT = (
    "vLLM refuses to load it (vllm==0.33.0 vllm/model_executor/model_loader/default_loader.py:567-572: weights "
    "not initialized from checkpoint); SGLang runs it with the unit weights the norm starts with "
    "(sglang==0.5.23 sglang/srt/models/llama_eagle3.py:345-378 loads only what the checkpoint names)"
)


def draft_norms(config: Mapping[str, Any], engine: str | None = None) -> dict[str, bool]:
    """Which EAGLE-3.1 norms ``engine`` switches on for a draft ``config.json`` (SGLang's reading for an
    engine without a row of its own).

    >>> draft_norms({"use_aux_norm": True}, "sglang")["fc_norm"], draft_norms({"use_aux_norm": True}, "vllm")["fc_norm"]
    (True, False)
    """
    out = {}
    for n in DRAFT_NORMS.get(engine or "", DRAFT_NORMS["sglang"]):
        found = [_lookup(config, k) for k in n.keys]
        present = [v for v in found if v is not None]
        out[n.name] = bool(present[0]) if n.first and present else any(bool(v) for v in present)
    return out


def _lookup(config: Mapping[str, Any], key: tuple[str, ...]) -> Any:
    node: Any = config
    for part in key:
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def kind_from_config(config: Mapping[str, Any]) -> DraftKind:
    """The draft kind a draft ``config.json`` states: its ``architectures`` (most specific name first),
    else an EAGLE-3.1 flag, else a DFlash key, else EAGLE-3.

    >>> kind_from_config({"architectures": ["LlamaForCausalLMEagle3"], "fc_norm": True}).key
    'eagle3.1'
    """
    archs = [str(a) for a in config.get("architectures") or []]
    best: tuple[int, str] = (0, "")
    for key, kind in DRAFT_KINDS.items():
        for name in kind.architectures:
            if any(name in a for a in archs) and len(name) > best[0]:
                best = (len(name), key)
    nested = config.get("eagle_config")
    eagle: Mapping[str, Any] = nested if isinstance(nested, dict) else {}
    flagged = any(config.get(f) or eagle.get(f) for f in EAGLE31_FLAGS)
    if best[1] in ("", "eagle3"):
        if flagged:
            return DRAFT_KINDS["eagle3.1"]
        if not best[1] and ("dflash_config" in config or "dspark_target_layer_ids" in config):
            return DRAFT_KINDS["dspark" if "dspark_target_layer_ids" in config else "dflash"]
    return DRAFT_KINDS[best[1] or "eagle3"]
