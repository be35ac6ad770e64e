"""The convention table as Markdown: ``docs/conventions.md`` holds this output between two markers,
and ``tests/test_convention_table.py`` fails when the two drift apart.

Regenerate the block with ``python -m hsdiff.report.conventions docs/conventions.md``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..rules.conventions import TABLE, default_version
from ..rules.dflash import DFLASH_DEFAULTS, DFLASH_KEYS, DFLASH_WRITES
from ..rules.kinds import DRAFT_KINDS, EAGLE3_KINDS
from ..rules.profile import CONFIG_KEYS, ENGINE_INFO, KEY_INDEX, NONE, VERSIONS, Rule

__all__ = ["BEGIN", "END", "render_rules", "render_engines", "render_kinds", "render_keys", "render_block", "update"]

BEGIN = "<!-- convention table: generated from hsdiff/rules/profile.py, do not edit by hand -->"
END = "<!-- end of the generated convention table -->"

_READING = {
    "output": "id + 1 (output index)",
    "boundary": "id (boundary index)",
    "deepseek": "id + 1 if ids[0] == 1, else id",
    "gpt-oss": "id if max(ids) == L, else id + 1",
    "none": "no EAGLE-3 capture",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _versions(r: Rule) -> str:
    if r.since and r.until:
        return r.since if r.since == r.until else f"{r.since}–{r.until}"
    if r.since:
        return f"≥ {r.since}"
    if r.until:
        return f"≤ {r.until}"
    return "all"


def _range(r: Rule) -> str:
    if r.reading == NONE:
        return "—"
    low = f"B{r.min_boundary}"
    high = "B(L)" if r.captures_last and not r.final_is_last else "B(L-1)"
    extra = " and the post-norm final state" if r.names_final else ""
    extra += " (id L-1)" if r.final_is_last else ""
    extra += "; an id for B(L) fails at startup" if r.last_fails else ""
    return f"{low} to {high}{extra}"


def render_engines() -> str:
    """One row per engine or trainer: where it reads the ids, versions checked, default version."""
    out = [
        "| key | name | reads the ids from | versions checked | default `--engine-version` |",
        "|---|---|---|---|---|",
    ]
    for e in ENGINE_INFO.values():
        vs = VERSIONS[e.key]
        checked = vs[0] if len(vs) == 1 else f"{vs[0]}–{vs[-1]}"
        out.append(f"| `{e.key}` | {e.title} | {_cell(e.reads)} | {checked} | {default_version(e.key)} |")
    return "\n".join(out)


def render_kinds() -> str:
    """One row per draft kind (``--draft-kind``): the architectures that select it, ids it takes, source."""
    out = [
        "| `--draft-kind` | name | read with | selected by architectures containing | ids | source |",
        "|---|---|---|---|---|---|",
    ]
    for k in DRAFT_KINDS.values():
        read = {"": "— (refused: " + k.note + ")"}.get(k.reading, f"the {k.reading} rows")
        ids = "none" if k.counts == (0, 0) else f"{k.counts[0]}–{k.counts[1]}"
        out.append(
            f"| `{k.key}` | {k.title} | {_cell(read)} | {', '.join(k.architectures)} | {ids} | {_cell(k.source)} |"
        )
    return "\n".join(out)


def render_keys() -> str:
    """Where each engine reads the ids, by draft kind and model runner, first match wins; the key fix-config writes."""
    out = [
        "| engine (runner) | draft kinds | keys read, first match wins | key written | default when none |",
        "|---|---|---|---|---|",
    ]
    for key, paths in CONFIG_KEYS.items():
        engine, runner = (key, "") if key in ENGINE_INFO else (key.split("-")[0], key)  # vllm-v2: a runner's
        read = ", ".join(".".join(p) + _meaning(runner, p) for p in paths) or "none (not the draft config)"
        writes = ".".join(ENGINE_INFO[engine].writes) or "—"
        out.append(
            f"| `{key}` | {', '.join(EAGLE3_KINDS)}{' and every other' if runner else ''} | {read} | {writes} | — |"
        )
    for key in dict.fromkeys([*DFLASH_KEYS, *DFLASH_WRITES]):
        engine, _, kind = key.partition(":")
        kinds = kind or "the DFlash family"
        found = DFLASH_KEYS.get(key, DFLASH_KEYS.get(engine))
        read = ", ".join(".".join(p) for p in found) if found else "as for EAGLE-3, by runner (rows above)"
        writes = ".".join(DFLASH_WRITES.get(key, DFLASH_WRITES.get(engine, ())))
        default = DFLASH_DEFAULTS.get(key, DFLASH_DEFAULTS.get(engine, "")) if kind or key == engine else ""
        out.append(f"| `{engine}` | {kinds} | {read} | {writes} | {_cell(default)} |")
    return "\n".join(out)


def _meaning(runner: str, path: tuple[str, ...]) -> str:
    index = KEY_INDEX.get((runner, tuple(path)), "")
    return {"output": " (+1)", "boundary": " (raw)"}.get(index, "")


def render_rules() -> str:
    """One row per rule: engine, draft kinds, family, versions, reading, capturable range, label and source."""
    out = [
        "| engine | draft kinds | model family | versions | B for an id | capturable | rule (as reports name it) "
        "| source |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in TABLE:
        fam = ", ".join(r.families) or "(any other)"
        kinds = ", ".join(r.kinds or EAGLE3_KINDS)
        reading = _READING[r.reading] + (" — default B[3, L//2+1, L-2]" if r.default == "shifted" else "")
        if r.fixed:
            reading = "none: B[2, L//2, L-3] whatever the ids say"
        if r.note:
            reading += f" — {r.note}"
        out.append(
            f"| `{r.engine}` | {kinds} | {fam} | {_versions(r)} | {_cell(reading)} | {_range(r)} "
            f"| {_cell(r.label)} | {_cell(r.source)} |"
        )
    return "\n".join(out)


def render_block() -> str:
    """The generated block, markers included."""
    return "\n".join([BEGIN, "", render_engines(), "", render_kinds(), "", render_keys(), "", render_rules(), "", END])


def update(path: str | Path) -> bool:
    """Rewrite the generated block in ``path``; ``True`` when it changed."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    start, stop = text.index(BEGIN), text.index(END) + len(END)
    new = text[:start] + render_block() + text[stop:]
    if new != text:
        p.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":  # pragma: no cover - the docs' regeneration command
    update(sys.argv[1] if len(sys.argv) > 1 else "docs/conventions.md")
