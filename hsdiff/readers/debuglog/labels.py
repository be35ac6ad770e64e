"""Labels read from the text around a print: slot, layer, shape, dtype, norm, token and column positions.

:func:`find_labels` reads a print's own key text and its line; :func:`label_pattern` blanks the
numbers of a label so that repeated prints of one site match; :func:`strip_prefix` removes the log
prefixes (timestamps, levels, ranks, source locations) engines put before every line. The regular
expressions that tell hidden states from statistics (``NOT_VALUES_RE``, ``HIDDEN_WORDS``) and that
start a new forward pass (``PASS_RE``) live here too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .._common import layer_side
from .numbers import NUM_TEXT

_LOG_PREFIX = re.compile(
    r"^\s*(?:"
    r"\[[^\]]*(?:\d{1,2}:\d{2}|\bTP\d|\bDP\d|\brank\b|INFO|DEBUG|WARN|ERROR)[^\]]*\]"  # [2026-11-30 01:15:02 TP0]
    r"|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"  # ISO timestamps
    r"|(?:INFO|DEBUG|WARNING|WARN|ERROR|CRITICAL)\b:?"
    r"|\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?"  # vLLM: INFO 11-30 01:15:02
    r"|\[[\w./-]+\.py:\d+\]"  # [model_runner.py:123]
    r"|\([A-Za-z]\w*(?:\s+\w+=\w+)+\)"  # (VllmWorker rank=0 pid=123)
    r")\s*"
)


def strip_prefix(text: str) -> str:
    prev = None
    while prev != text:
        prev = text
        text = _LOG_PREFIX.sub("", text, count=1)
    return text


_SHAPE_RES = (
    re.compile(r"torch\.Size\(\s*\[([\d,\s]*)\]\s*\)"),
    re.compile(r"\bshape\s*[=:]\s*[\[(]([\d,\s]+)[\])]", re.I),
    re.compile(r"\bsize\s*[=:]\s*[\[(]([\d,\s]+)[\])]", re.I),
)
_DTYPE_RE = re.compile(r"\bdtype\s*[=:]\s*['\"]?(?:torch\.|np\.|numpy\.)?([A-Za-z]+\d*)", re.I)
_NORM_RE = re.compile(
    r"(?:\b\w*norm\w*|\bl2|\|\|\w*\|\|)(?:\([^()]*\))?(?:\.\w+\([^()]*\))*\s*[=:]\s*(?:tensor\(\s*)?("
    + NUM_TEXT
    + r")(?![\w.])",
    re.I,
)
_SLOT_RES = (
    re.compile(r"\b(?:aux\w*|captures?|slots?)\s*\[\s*(\d{1,9})\s*\]", re.I),
    re.compile(r"\b(?:slot|aux_idx|aux_index|aux_id|slot_idx|capture_idx)\s*[=:#]?\s*(\d{1,9})\b", re.I),
)
_LAYER_RES = (
    re.compile(r"\blayer(?:_id|_idx|_index|_no|_num)?\s*[=:#]?\s*(-?\d{1,9})\b", re.I),
    re.compile(r"\blayers?[._\[](\d{1,9})\]?", re.I),
    re.compile(r"\bcapture(?:_layer)?\s*[=:#]\s*(-?\d{1,9})\b", re.I),
)
_ROW_RE = re.compile(r"\b(?:token|tok|pos|position|row|token_idx|tok_idx)\s*[=:#]?\s*(-?\d{1,9})\b", re.I)
_LAST_TOKEN_RE = re.compile(r"\blast[_ ]?(?:token|tok|row)\b", re.I)
HEAD_RE = re.compile(r"(?<![A-Za-z])(?:first|head|begin|start)(?![a-z])", re.I)
TAIL_RE = re.compile(r"(?<![A-Za-z])(?:last|tail|end)(?![a-z])(?![_ ]?(?:token|tok|row|pos))", re.I)
SUBSCRIPT_RE = re.compile(r"([A-Za-z_][\w.]*(?:\(\))?)((?:\[[^\[\]]*\])+)")
NOT_VALUES_RE = re.compile(
    r"(?:\b(?:\w*norms?|mean|std|var|min|max|sum|amax|amin|abs_?max|loss|lr|prob\w*|logits?|scores?|"
    r"acc\w*|accept\w*|ids|input_ids|token_ids|positions?|seq_lens?|out_cache_loc|req_pool_indices|"
    r"shape|size|stride|topk\w*)\s*(?:\([^()]*\))?(?:\.\w+\([^()]*\))*\s*[=:]?\s*)$",
    re.I,
)
HIDDEN_WORDS = re.compile(
    r"hidden|aux|capture|layer|slot|residual|\bhs\b|\bh\d*\b|eagle|tensor|first|head|last|tail|sample", re.I
)
PASS_RE = re.compile(
    r"\b(?:prefill|decode|extend|verify|draft)\s+batch\b|\bforward[_ ]pass(?:_id)?\b|^\s*step\s*[=:]\s*\d+\s*$"
    r"|\bnew\s+request\b|={5,}",
    re.I,
)
_RANK_RE = re.compile(r"\b(?:TP|rank[ =]?)(\d+)\b")


_JSON_OBJECT = re.compile(r'^\s*\{\s*"[^"]*"\s*:')


def is_json_object(text: str) -> bool:
    """Whether a log line (after its prefix) is a JSON object: ``{"layer": 2, "token": 1, "norm": 105.5}``."""
    return bool(_JSON_OBJECT.match(strip_prefix(text)))


def ints(text: str) -> tuple[int, ...]:
    return tuple(int(t) for t in re.findall(r"\d{1,12}", text))


def _slice(part: str) -> tuple[int | None, int | None, bool] | None:
    """``3`` -> (3, None, False); ``1:4`` -> (1, 4, True); ``:`` -> (None, None, True)."""
    part = part.strip()
    if part in ("", ":", "::"):
        return None, None, True
    if re.fullmatch(r"-?\d{1,9}", part):
        return int(part), None, False
    m = re.fullmatch(r"(-?\d{0,9})\s*:\s*(-?\d{0,9})(?:\s*:\s*\d{0,9})?", part)
    if m:
        a = int(m.group(1)) if m.group(1) else None
        b = int(m.group(2)) if m.group(2) else None
        return a, b, True
    return None


@dataclass
class Labels:
    slot: int | None = None
    layer: int | None = None
    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    norm: float | None = None
    row_start: int | None = None  # row of the first printed row, when a position is printed
    row_from_end: bool = False
    col_start: int | None = None
    col_from_end: bool = False
    flat: bool = False  # values of x.flatten()[...]
    positions: tuple[int, ...] | None = None
    name: str = ""
    #: what the words around the layer number say it counts (``output of model.layers.3``: its output), or None
    layer_index: str | None = None


def _subscripts(text: str, lab: Labels) -> None:
    """Read ``name[i][a, b:c]`` index expressions: a slot for aux lists, else token/column positions."""
    for m in SUBSCRIPT_RE.finditer(text):
        name = m.group(1)
        subs = re.findall(r"\[([^\[\]]*)\]", m.group(2))
        if name.lower().startswith(("torch.size", "size")):
            continue
        lname = name.lower()
        if re.search(r"\blayers$|\.layers$", lname) and subs and re.fullmatch(r"\s*\d{1,9}\s*", subs[0]):
            lab.layer = int(subs[0]) if lab.layer is None else lab.layer
            subs = subs[1:]
        elif (
            re.match(r"(?:aux|captures?|slots?)", lname.rsplit(".", 1)[-1])
            and subs
            and re.fullmatch(r"\s*\d{1,9}\s*", subs[0])
        ):
            lab.slot = int(subs[0]) if lab.slot is None else lab.slot
            subs = subs[1:]
        parts: list[str] = []
        for s in subs:
            parts.extend(p for p in s.split(","))
        parts = [p for p in parts if p.strip() not in ("...", "None")]
        if not parts:
            continue
        sl = [_slice(p) for p in parts]
        if any(x is None for x in sl):
            continue
        lab.flat = lab.flat or "flatten" in lname or "view(-1)" in lname or "ravel" in lname
        if len(sl) >= 3:  # [batch, token, col]
            sl = sl[-2:]
        if len(sl) == 1 and not lab.flat:  # x[t] or x[a:b]: token positions
            a = sl[0][0]  # type: ignore[index]
            lab.row_start, lab.row_from_end = a, a is not None and a < 0
            continue
        if len(sl) == 1 and lab.flat:  # x.flatten()[a:b]: the first or the last values
            a = sl[0][0]  # type: ignore[index]
            lab.col_start = a if a is not None else 0
            lab.col_from_end = a is not None and a < 0
            lab.row_start, lab.row_from_end = (-1, True) if lab.col_from_end else (0, False)
            continue
        (ra, _, _), (ca, _, _) = sl[0], sl[1]  # type: ignore[misc]
        if ra is not None:
            lab.row_start, lab.row_from_end = ra, ra < 0
        if ca is not None:
            lab.col_start, lab.col_from_end = ca, ca < 0


def _first_number(res: tuple[re.Pattern[str], ...], text: str) -> int | None:
    """The number the first of ``res`` that matches ``text`` captures."""
    for r in res:
        m = r.search(text)
        if m:
            return int(m.group(1))
    return None


_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")


def _layer(text: str) -> tuple[int | None, str | None]:
    """The layer number ``text`` prints and what the words around it say it counts: the name holding it
    and the two words before it (``output of model.layers.3``, ``model.layers.3.output``) and the one
    after (``layer 3 input``); a value after ``=`` or ``[`` is not a word of the name."""
    for r in _LAYER_RES:
        m = r.search(text)
        if m:
            start = len(text[: m.start()].rstrip("".join(_NAME_CHARS)))  # the name that holds the number
            end = m.end() + len(text[m.end() :]) - len(text[m.end() :].lstrip("".join(_NAME_CHARS)))
            after = [w for w in text[end:].split()[:1] if not w.lower().startswith(("input_ids", "token_ids"))]
            words = [*text[:start].split()[-2:], text[start:end], *after]
            name = " ".join(re.split(r"[=\[(:]", w, maxsplit=1)[0] for w in words)
            return int(m.group(1)), layer_side(name)
    return None, None


def find_labels(text: str, local: str) -> Labels:
    """Labels from a print's own key text (``local``) and its line (``text``)."""
    lab = Labels()
    for src in (local, text):
        if lab.slot is None:
            lab.slot = _first_number(_SLOT_RES, src)
        if lab.layer is None:
            lab.layer, lab.layer_index = _layer(src)
    _subscripts(local or text, lab)
    if lab.row_start is None:
        m = _ROW_RE.search(local) or _ROW_RE.search(text)
        if m:
            lab.row_start = int(m.group(1))
            lab.row_from_end = lab.row_start < 0
        elif _LAST_TOKEN_RE.search(local) or _LAST_TOKEN_RE.search(text):
            lab.row_start, lab.row_from_end = -1, True
    key = key_words(local)
    if lab.col_start is None:
        if TAIL_RE.search(key) and not HEAD_RE.search(key):
            lab.flat = True
            lab.col_from_end = True
            if lab.row_start is None:
                lab.row_start, lab.row_from_end = -1, True
        elif HEAD_RE.search(key):
            lab.flat = True
    for r in _SHAPE_RES:
        m = r.search(text)
        if m:
            dims = ints(m.group(1))
            if dims:
                lab.shape = dims
                break
    m = _DTYPE_RE.search(text)
    if m:
        lab.dtype = m.group(1)
    m = _NORM_RE.search(text)
    if m:
        try:
            lab.norm = float(m.group(1))
        except ValueError:
            pass
    return lab


def key_words(local: str) -> str:
    """The key just before a print (``first5=``, ``x_sample_tail=``, ``first 5 values:``)."""
    return " ".join(local.replace("<printed>", " ").split()[-3:])


def label_pattern(text: str) -> str:
    """A label pattern: the words of a label with numbers blanked, so that repeated prints match."""
    text = strip_prefix(text)
    text = re.sub(r"<printed>", " ", text)
    text = _RANK_RE.sub(" ", text)
    words = re.findall(r"[A-Za-z_][A-Za-z_0-9.]*", text)
    return " ".join(re.sub(r"\d+", "#", w) for w in words if w.lower() not in ("tensor", "array", "nan", "inf"))


def short_key(text: str) -> str:
    """A short label for reports: the line's own words before its shape, dtype, norm or values."""
    t = strip_prefix(text).replace("<printed>", "\x00")
    t = re.split(
        r"\s(?=(?:type|shape|dtype|norm\w*|device|stride|size|first\w*|last\w*|head|tail)\s*[=:])|:\s|:$|\x00", t
    )[0]
    t = re.sub(r"\s+", " ", t).strip(" =:,")
    return t[:80] + ("…" if len(t) > 80 else "")


def base_name(key: str) -> str:
    """The tensor's name in a label: ``[eagle3] aux_hidden_states[1] layer=3`` -> ``aux_hidden_states``."""
    t = re.sub(r"^(?:\[[^\]]*\]\s*)+", "", key)
    m = re.search(r"[A-Za-z_][\w.]*", t)
    return m.group() if m else ""


def has_words(text: str) -> bool:
    return bool(re.search(r"[A-Za-z_]{2,}", strip_prefix(text)))


def norm_dtype(d: str | None, kind: str) -> str:
    """A printed dtype in the names hsdiff uses (``half`` -> ``float16``); PyTorch leaves float32 out."""
    if d:
        d = d.lower().replace("torch.", "")
        return {
            "half": "float16",
            "float": "float32",
            "double": "float64",
            "bf16": "bfloat16",
            "fp16": "float16",
            "fp32": "float32",
        }.get(d, d)
    if kind == "tensor":
        return "float32"  # PyTorch leaves the default dtype out of its print
    return "unknown"
