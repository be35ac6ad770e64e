"""Whether an engine can serve a draft: can some id list make it feed the draft exactly the training
slots, in the training order? One function, :func:`serve`, decides it for every command (compare and
gate through :func:`hsdiff.decide.recommend`, check-config, ``hsdiff ids``, fix-config).

Three things stand in the way, each read from the engine's source through the convention table:

* a boundary the engine has no id for (B = L on SGLang's llama loop, which captures before each layer
  runs; the embeddings on TensorRT-LLM; the final post-norm state anywhere but TensorRT-LLM);
* the order: the engines capture in layer order (SGLang and vLLM test membership inside the layer
  loop, TensorRT-LLM sorts its set), so training slots that are not in that order cannot be
  reproduced by any id list — only by retraining or by permuting the blocks of the draft's ``fc``
  input columns;
* a layer repeated in the training slots, which an engine captures once.

SGLang's DeepSeek rule (``ids[0] == 1`` adds 1 to every id) needs no obstacle of its own: a list that
holds B1 is written with another id first (``[24, 1, 44]``), which the engine captures in layer order.
Only B1 alone cannot be written.

>>> s = serve([27, 2, 15], "sglang", num_layers=30)
>>> s.ok, s.ids, s.fc_order
(False, (None, None, None), (1, 2, 0))
>>> serve([1, 24, 44], "sglang", num_layers=61, model_family="deepseek").ids
(24, 1, 44)
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ..enums import StrEnum
from ..errors import InputError
from . import conventions as conv
from .profile import DEEPSEEK, FINAL_L

__all__ = [
    "ObstacleKind",
    "Obstacle",
    "Serving",
    "serve",
    "as_written",
    "serving_engines",
    "boundary_label",
    "boundary_list",
    "max_capturable",
]

#: The engines that serve a draft (the trainers only capture training data).
serving_engines: tuple[str, ...] = tuple(k for k, e in conv.ENGINE_INFO.items() if e.kind == "engine")


class ObstacleKind(StrEnum):
    """Why no id list reproduces some training slots."""

    UNCAPTURABLE = "uncapturable"  #: the engine cannot capture that boundary at all
    ORDER = "order"  #: the engine captures in an order the training slots do not follow
    REPEATED = "repeated"  #: the training slots repeat a layer the engine captures once
    FIXED = "fixed"  #: the engine captures layers of its own whatever the config says


@dataclass(frozen=True)
class Obstacle:
    """One reason no id list reproduces the training slots, and what would."""

    kind: ObstacleKind
    boundaries: tuple[int, ...]
    reason: str
    remedy: str

    def sentence(self) -> str:
        return f"{self.reason} {self.remedy}"


@dataclass(frozen=True)
class Serving:
    """What ``engine`` can do with the training slots ``boundaries`` (in training slot order)."""

    engine: str
    boundaries: tuple[int | None, ...]
    ids: tuple[int | None, ...]  # the list to configure; None where no id serves the slot
    obstacles: tuple[Obstacle, ...]
    rule: str  # the convention-table row applied
    fc_order: tuple[int, ...] | None = None  # for an order obstacle: new fc input block j = old block fc_order[j]
    notes: tuple[str, ...] = ()  # what to keep in mind when writing ``ids`` (warnings, not obstacles)

    @property
    def ok(self) -> bool:
        return not self.obstacles

    def sentences(self) -> list[str]:
        return [o.sentence() for o in self.obstacles]


def _family(engine: str, model_family: str | None) -> str | None:
    return conv.rule(engine).family_for(model_family)


def serve(
    boundaries: Sequence[int | None],
    engine: str,
    *,
    num_layers: int | None = None,
    model_family: str | None = None,
    version: str | None = None,
    kind: str | None = None,
    finals: Collection[int] = (),
) -> Serving:
    """Whether ``engine`` can feed the draft the training slots ``boundaries`` in their order, the ids
    that do it, and otherwise each obstacle with its reason (source cited) and what would work.

    ``finals``: the positions of slots that hold the final post-norm state while its boundary (L + 1) is
    not known, the layer count not being known: an engine whose convention has no id for that state
    cannot serve them, whatever L is.

    >>> s = serve([2, 15, 30], "sglang", num_layers=30)
    >>> s.ids, s.obstacles[0].kind
    ((1, 14, None), 'uncapturable')
    """
    key = conv.rule(engine).key
    fam = _family(key, model_family)
    ver = conv.parse_version(key, version)
    r = conv.applied(key, fam, ver, kind)
    title = conv.rule(key).title
    L = num_layers
    bs = list(boundaries)
    ids = list(conv.from_boundary(bs, key, num_layers=L, model_family=fam, version=ver, kind=kind))
    known = [b for b in bs if b is not None]
    obstacles: list[Obstacle] = []
    bad = [b for b in dict.fromkeys(known) if not conv.capturable(b, key, L, fam, ver, kind)]
    for b in bad:
        obstacles.append(
            Obstacle(ObstacleKind.UNCAPTURABLE, (b,), _why(b, key, r, L), _instead(b, key, fam, ver, L, kind))
        )
    open_finals = [s for s in finals if s < len(bs) and bs[s] is None]
    if open_finals and not r.names_final:
        obstacles.append(_no_final(open_finals, key, r))
    if r.reading == DEEPSEEK and not bad and known and any(i is None for b, i in zip(bs, ids) if b is not None):
        obstacles.append(
            Obstacle(
                ObstacleKind.UNCAPTURABLE,
                (1,),
                f"{r.label} adds 1 to every id when the first id is 1, so id 1 alone names "
                f"{conv.name_boundary(2, L)}: {conv.name_boundary(1, L)} cannot be captured on its own "
                f"(source: {r.source}).",
                "What would work: SGLang ≤ 0.5.12 (id 0), vLLM (id 1), or retraining with another layer beside it "
                "(written first, as in [15, 1]: the engine captures in layer order whatever the order of the list).",
            )
        )
    fc_order = None
    if conv.rule(key).sorts and known:
        known = [b for b in known if b not in bad]  # the order of what it can capture
        served = conv.slot_order(list(dict.fromkeys(known)), key, L, ver)
        if len(set(known)) < len(known):
            dup = sorted({b for b in known if known.count(b) > 1})
            obstacles.append(
                Obstacle(
                    ObstacleKind.REPEATED,
                    tuple(dup),
                    f"The training slots repeat {_listed(dup, L)}, but {title} captures each layer once: it delivers "
                    f"{len(served)} slots where the draft's fc takes {len(known)}.",
                    "What would work: retraining on distinct layers, or summing the draft's fc input blocks of the "
                    "repeated slots into one (exact, since both receive the same tensor) and lowering "
                    "num_aux_hidden_states to match.",
                )
            )
        elif known != served:
            order = tuple(known.index(b) for b in served) if len(known) == len(bs) else None
            fc_order = order
            fix = conv.from_boundary(served, key, num_layers=L, model_family=fam, version=ver, kind=kind)
            how = ""
            if order is not None:
                perm = "(" + ", ".join(map(str, order)) + ")"
                how = (
                    f"reordering the draft's fc input columns, one block of H (the hidden size) per slot, to "
                    f"{perm} — fc.weight = cat([W[:, j*H:(j+1)*H] for j in {perm}], dim=1) — and then "
                    f"configuring ids {list(fix)}, or "
                )
            obstacles.append(
                Obstacle(
                    ObstacleKind.ORDER,
                    tuple(known),
                    f"The training slots hold {_listed(known, L)} in that order, but {title} "
                    f"{_order_words(key, ver, L)}, so it feeds the draft {_listed(served, L)} whatever the order of "
                    f"the ids: no id list reproduces the training order (source: {_order_source(key)}).",
                    f"What would work: {how}retraining the draft on the layers in the order {title} delivers them.",
                )
            )
    notes = []
    if r.fixed and known:
        if L is None:
            raise InputError(
                f"{title} captures layers of its own whatever the config says ({r.label}): whether they are these "
                "depends on the target's layer count",
                hint="give the target's num_hidden_layers (`num_layers`)",
                options=("num_layers",),
            )
        fixed = conv.to_boundary(known, key, num_layers=L, model_family=fam, version=ver, kind=kind)  # its own
        if known != fixed:
            got = _listed(fixed, L)
            obstacles.append(
                Obstacle(
                    ObstacleKind.FIXED,
                    tuple(known),
                    f"{r.label}: {title} captures {got} whatever the config says (source: {r.source}).",
                    f"What would work: {r.note or 'another engine'}, or retraining the draft on {got}.",
                )
            )
        else:
            notes.append(f"{title} captures these layers whatever the config says ({r.label}): no id needs writing")
    if any(o.kind in (ObstacleKind.ORDER, ObstacleKind.REPEATED, ObstacleKind.FIXED) for o in obstacles):
        ids = [None] * len(bs)
    if r.reading == DEEPSEEK and not obstacles and 1 in known and ids and ids[0] is not None and ids[0] != 1:
        plain = conv.to_boundary(
            sorted(i for i in ids if i is not None), key, num_layers=L, model_family=fam, version=ver, check_range=False
        )
        notes.append(
            f"write the ids as {list(ids)}, id {ids[0]} first: {r.label} adds 1 to every id when "
            f"the first id is 1, so the ascending {sorted(i for i in ids if i is not None)} would capture "
            f"{_listed(plain, L)} instead; it captures in layer order whatever the order of the list "
            f"(source: {r.source})"
        )
    return Serving(key, tuple(bs), tuple(ids), tuple(obstacles), r.label, fc_order, tuple(notes))


def _no_final(slots: Sequence[int], key: str, r: conv.Rule) -> Obstacle:
    """The final post-norm state in training ``slots``, on an engine with no id for it (any layer count)."""
    which = ", ".join(map(str, slots))
    where = [
        f"{conv.rule(e).title} (id {conv.rule(e).final_id})"
        for e in serving_engines
        if conv.rule(e).final_id and conv.applied(e).names_final
    ]
    return Obstacle(
        ObstacleKind.UNCAPTURABLE,
        (),
        f"Training slot{'s' if len(slots) > 1 else ''} {which} hold{'' if len(slots) > 1 else 's'} the final hidden "
        f"state after the final norm, and {r.label} cannot capture it: no id of its convention names it, and the "
        f"last layer's output it can capture is taken before the final norm (source: {r.source}).",
        f"What would work: {'serving on ' + ' or '.join(where) + ', or ' if where else ''}retraining the draft on "
        "the last layer's output before the final norm (speculators #313: post-norm in training, pre-norm in "
        "serving; acceptance went from 25% to 40% once both took the same state).",
    )


def max_capturable(
    engine: str, num_layers: int, model_family: str | None = None, version: str | None = None, kind: str | None = None
) -> int:
    """The largest boundary before the final norm ``engine`` can capture (L-1 where nothing runs after
    the last layer)."""
    return (
        num_layers if conv.capturable(num_layers, engine, num_layers, model_family, version, kind) else num_layers - 1
    )


def as_written(
    ids: Sequence[int],
    engine: str,
    *,
    num_layers: int | None = None,
    model_family: str | None = None,
    version: str | None = None,
    kind: str | None = None,
) -> bool:
    """Whether ``ids`` are written the way :func:`serve` writes the layers the engine captures for them:
    ascending without repeats, or (SGLang's DeepSeek rule) with another id before 1.

    >>> as_written([24, 1, 44], "sglang", model_family="deepseek"), as_written([30, 2, 58], "sglang")
    (True, False)
    """
    ids = [int(i) for i in ids]
    if ids == sorted(set(ids)):
        return True
    key = conv.rule(engine).key
    fam = _family(key, model_family)
    try:
        captured = conv.to_boundary(ids, key, num_layers=num_layers, model_family=fam, version=version, kind=kind)
        return (
            len(set(ids)) == len(ids)
            and conv.from_boundary(captured, key, num_layers=num_layers, model_family=fam, version=version, kind=kind)
            == ids
        )
    except InputError:  # out of range: not a writing of anything the engine captures
        return False


def boundary_label(b: int | None, num_layers: int | None = None) -> str:
    """A short label for tables: ``"B3"``; the final post-norm state ``"final (post-norm)"``, not its
    internal index L + 1."""
    if b is None:
        return "?"
    return "final (post-norm)" if num_layers is not None and b == conv.final_boundary(num_layers) else f"B{b}"


def boundary_list(bs: Sequence[int | None], num_layers: int | None = None) -> str:
    """Boundaries for sentences: ``"B[3, 31]"``; the final post-norm state by name, not by its internal
    index L + 1: ``"[the final post-norm state, B3, B31]"``."""
    final = None if num_layers is None else conv.final_boundary(num_layers)
    if final is None or final not in bs:
        return "B[" + ", ".join("?" if b is None else str(b) for b in bs) + "]"
    return (
        "[" + ", ".join("?" if b is None else "the final post-norm state" if b == final else f"B{b}" for b in bs) + "]"
    )


def _listed(bs: Sequence[int], L: int | None) -> str:
    return boundary_list(bs, L)


def _order_words(key: str, version: str, L: int | None) -> str:
    info = conv.rule(key)
    first = info.final_first and version not in info.final_last_in
    return info.order_words + (f", the final post-norm state ({info.final_id}) first" if first else "")


def _order_source(key: str) -> str:
    return conv.rule(key).order_source or conv.applied(key).source


def _why(b: int, key: str, r: conv.Rule, L: int | None) -> str:
    what = conv.name_boundary(b, L)
    if L is not None and b == L and conv.rule(key).final_id == FINAL_L:  # its index L is the post-norm state
        return (
            f"{r.label} cannot capture {what}: its tuple index {L} is the state after the final norm, and the "
            f"pre-norm one has no index (source: {r.source})."
        )
    if L is not None and b == L and r.final_is_last:
        return (
            f"{r.label} cannot capture {what}: its id {L - 1} names the state after the final norm, and the "
            f"pre-norm one has no id (source: {r.source})."
        )
    if L is not None and b == L and r.last_fails:
        return (
            f"{r.label} cannot capture {what}: it marks each captured layer with a flag on that layer, and "
            f"there is no layer {L}, so the id for it makes the server fail at startup (source: {r.source})."
        )
    if L is not None and b == L:
        return (
            f"{r.label} cannot capture {what}: it captures each slot as the input of a layer, and no "
            f"layer runs after layer {L - 1}, so the id for it is dropped and the draft's fc gets fewer slots "
            f"than it was trained on (source: {r.source})."
        )
    if L is not None and b == conv.final_boundary(L):
        return (
            f"{r.label} cannot capture {what}: no id of its convention names it; of the engines only "
            f"TensorRT-LLM (-1) does (source: {r.source})."
        )
    return f"{r.label} cannot capture {what}: no id of its convention names it (source: {r.source})."


def _instead(b: int, key: str, family: str | None, version: str, L: int | None, kind: str | None = None) -> str:
    """Engines (or versions of this one) that capture ``b``, with the id, and the retraining way out."""
    where = []
    for e in serving_engines:
        fam = conv.rule(e).family_for(family, own_row=True)
        if e == key:
            later = [
                v
                for v in conv.VERSIONS[e]
                if conv.version_tuple(v) > conv.version_tuple(version) and _id_for(b, e, L, fam, v, kind) is not None
            ]
            if later:
                where.append(f"{conv.rule(e).title} ≥ {later[0]} (id {_id_for(b, e, L, fam, later[0], kind)})")
            continue
        i = _id_for(b, e, L, fam, None, kind)
        if i is not None:
            where.append(f"{conv.rule(e).title} (id {i})")
    near = ""
    if L is not None and b >= L:
        near = f" (e.g. {conv.name_boundary(max_capturable(key, L, family, version, kind), L)})"
    elif b == 0:
        near = f" (e.g. {conv.name_boundary(1, L)})"
    served_by = f"serving on {' or '.join(where)}, or " if where else ""
    return f"What would work: {served_by}retraining the draft on a layer {conv.rule(key).title} captures{near}."


def _id_for(
    b: int, engine: str, L: int | None, family: str | None, version: str | None, kind: str | None = None
) -> int | None:
    """The id that makes ``engine`` capture ``b`` alone; None where it cannot, or its rule cannot be applied
    without what is not known (or has no row for the draft kind)."""
    try:
        if not conv.capturable(b, engine, L, family, version, kind):
            return None
        return conv.from_boundary([b], engine, num_layers=L, model_family=family, version=version, kind=kind)[0]
    except InputError:
        return None
