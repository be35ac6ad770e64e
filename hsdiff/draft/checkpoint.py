"""Reading an EAGLE-3 draft checkpoint the way SGLang and vLLM load it, safely.

A draft folder holds ``config.json`` (``architectures: [LlamaForCausalLMEagle3]``, ``eagle_config``,
``draft_vocab_size``) and weights as safetensors or ``.bin``. The tensor names and shapes checked
here are those the engines' loaders accept:

- SGLang 0.5.23 ``python/sglang/srt/models/llama_eagle3.py``: ``load_weights`` maps ``midlayer`` to
  ``layers.0`` (l.338-343), accepts names with or without ``model.`` (l.362, l.372), turns ``d2t``
  into ``hot_token_id = d2t + arange`` (l.350-353) and skips ``t2d`` (l.355); the input layer's
  q/k/v read ``2 * hidden_size`` (l.62-75); ``fc`` is ``target_hidden_size * num_aux`` wide
  (l.151-167), ``num_aux`` from ``num_aux_hidden_states``, else ``len(eagle_config ids)``, else 3
  (l.156-161); ``lm_head`` has ``draft_vocab_size`` rows (l.306-314).
- vLLM 0.33.0 ``vllm/model_executor/models/llama_eagle3.py``: the same names (``midlayer.`` ->
  ``layers.0.``, l.290-299; ``model.`` is prepended to everything but ``lm_head``, l.443-444),
  ``d2t`` -> ``draft_id_to_target_id`` (l.428-430), ``embed_tokens`` optional (l.445, l.460-461: the
  target's embeddings are used when absent), q/k/v bias with ``attention_bias`` (l.84-96).

Weights are read through the repository's safe containers: safetensors headers are validated and
``.bin``/``.pt`` go through ``torch.load(weights_only=True)`` with the pickle scan, so a pickle that
references a global is refused by name and never executed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from ..arrays import to_torch
from ..configs import load_config, num_aux, stated_ids
from ..errors import ConfigError, FormatError, InputError
from ..extras import needs
from ..rules.kinds import DRAFT_NORMS, MISSING_NORM_WEIGHT, draft_norms

with needs("draft", "--draft (the draft's forward, hsdiff.draft)"):
    import torch

__all__ = ["Draft", "TargetHead", "load_draft", "load_target_head", "DRAFT_ARCHITECTURES"]

log = logging.getLogger(__name__)

#: Architecture names the engines register for a Llama-style EAGLE-3 draft.
DRAFT_ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_LEGACY = {
    "midlayer.": "layers.0.",
    "aux_norm_low.": "fc_norm.0.",
    "aux_norm_mid.": "fc_norm.1.",
    "aux_norm_high.": "fc_norm.2.",
}
_FIX = "export the draft as SpecForge/ModelOpt do for SGLang and vLLM (fc, midlayer.*, norm, lm_head, d2t)"


@dataclass(frozen=True, eq=False)
class Draft:
    """A loaded EAGLE-3 draft: its shape, its options and its tensors under canonical names.

    Canonical names drop ``model.`` and spell the decoder layer ``layers.0.`` (``midlayer.`` in
    SpecForge exports). ``d2t`` maps a draft token id ``d`` to the target id ``d + d2t[d]``.
    """

    path: str
    hidden_size: int
    target_hidden_size: int
    num_aux: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None
    vocab_size: int
    draft_vocab_size: int
    layer_ids: tuple[int, ...] | None
    weights: dict[str, torch.Tensor] = field(repr=False)
    d2t: torch.Tensor | None = field(default=None, repr=False)
    norm_before_fc: bool = False
    fc_norm: bool = False
    norm_output: bool = False  # the hidden state fed back from the second step on is the post-norm one
    norm_before_residual: bool = False
    embeddings_from: str = "draft"
    warnings: tuple[str, ...] = ()

    @property
    def norms(self) -> tuple[str, ...]:
        """The EAGLE-3.1 norms it runs with, by their config names."""
        return tuple(n for n in ("norm_before_fc", "fc_norm", "norm_output") if getattr(self, n))

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids if self.d2t is None else draft_ids + self.d2t[draft_ids]

    def describe(self) -> str:
        return (
            f"EAGLE-3 draft {self.path}: {self.num_aux} aux slots x {self.target_hidden_size}, hidden "
            f"{self.hidden_size}, {self.num_heads} heads, draft vocabulary {self.draft_vocab_size}"
            f"/{self.vocab_size}, embeddings from {self.embeddings_from}"
        )

    def __repr__(self) -> str:
        return f"<Draft {self.num_aux}x{self.target_hidden_size} -> {self.hidden_size}, vocab {self.draft_vocab_size}>"


@dataclass(frozen=True, eq=False)
class TargetHead:
    """What the target model lends the draft: embeddings, and (when found) final norm and lm_head."""

    embed: torch.Tensor = field(repr=False)
    norm: torch.Tensor | None = field(default=None, repr=False)
    lm_head: torch.Tensor | None = field(default=None, repr=False)
    rms_norm_eps: float = 1e-6
    path: str = ""


def _weight_files(folder: Path) -> list[Path]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in _WEIGHT_SUFFIXES)
    st = [p for p in files if p.suffix.lower() == ".safetensors"]
    return st or files


def _tables(folder: Path, what: str) -> list[Any]:
    from ..readers._container import open_table, sniff_container

    files = _weight_files(folder)
    if not files:
        raise FormatError(
            f"no weights found in this {what} folder (.safetensors, .bin, .pt)",
            path=folder,
            hint="point at the folder holding config.json and the weight files",
        )
    tables = []
    for p in files:
        container = sniff_container(p)
        if container not in ("safetensors", "torch", "torch-legacy"):
            raise FormatError(
                f"not a safetensors or torch weights file ({container})",
                path=p,
                hint="re-copy the file or remove it from the folder",
            )
        tables.append(open_table(p, container))
    return tables


def _canonical(name: str) -> str:
    if name.startswith("model."):
        name = name[len("model.") :]
    for old, new in _LEGACY.items():
        if name.startswith(old):
            name = new + name[len(old) :]
    return name


def _int(cfg: dict, key: str, path: Path, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(
            f"draft config needs a positive integer {key!r} (found {value!r})",
            path=path,
            hint="the draft's config.json is incomplete; copy it from the training run",
        )
    return value


def _rope(cfg: dict) -> tuple[float, dict | None]:
    params = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else None
    scaling = cfg.get("rope_scaling") if isinstance(cfg.get("rope_scaling"), dict) else params
    theta = cfg.get("rope_theta", (params or {}).get("rope_theta", 10000.0))
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    return float(theta), None if kind in ("default", None) else dict(scaling or {})


class _Dims(NamedTuple):
    """The sizes config.json states for the draft (defaults as the engines apply them)."""

    hidden: int
    target_hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    draft_vocab: int
    aux: int


def _draft_folder(path: str | os.PathLike) -> Path:
    """The draft's folder: ``path`` itself, or the folder of a file inside it; refuses a missing folder."""
    folder = Path(path)
    if folder.is_file():
        folder = folder.parent
    if not folder.is_dir():
        raise InputError("no such draft folder", path=folder, hint="give the folder holding the draft's config.json")
    return folder


def _draft_config(cfg_path: Path) -> dict:
    """Read config.json and decide whether it describes a draft hsdiff runs: an EAGLE-3 architecture
    with a single layer."""
    cfg = load_config(cfg_path)
    archs = [str(a) for a in cfg.get("architectures") or []]
    if not any(a in DRAFT_ARCHITECTURES for a in archs):
        raise ConfigError(
            f"architectures {archs or 'missing'} is not an EAGLE-3 draft",
            path=cfg_path,
            hint=f"hsdiff runs Llama-style EAGLE-3 drafts ({', '.join(DRAFT_ARCHITECTURES)})",
        )
    if cfg.get("num_hidden_layers", 1) != 1:
        raise ConfigError(
            f"draft has num_hidden_layers={cfg.get('num_hidden_layers')}; hsdiff runs single-layer "
            "EAGLE-3 drafts (SGLang and vLLM differ on the norms of later layers)",
            path=cfg_path,
        )
    return cfg


def _dims(cfg: dict, cfg_path: Path) -> _Dims:
    """Read the draft's sizes from config.json, with the engines' defaults for those left out."""
    H = _int(cfg, "hidden_size", cfg_path)
    Ht = _int(cfg, "target_hidden_size", cfg_path, H)
    nh = _int(cfg, "num_attention_heads", cfg_path)
    nkv = _int(cfg, "num_key_value_heads", cfg_path, nh)
    hd = _int(cfg, "head_dim", cfg_path, H // nh)
    V = _int(cfg, "vocab_size", cfg_path)
    Vd = _int(cfg, "draft_vocab_size", cfg_path, V) if cfg.get("draft_vocab_size") is not None else V
    return _Dims(H, Ht, nh, nkv, hd, V, Vd, num_aux(cfg)[0])


def _supported_rotary(cfg: dict, cfg_path: Path, dims: _Dims) -> tuple[float, dict | None]:
    """Decide whether the activation, head grouping and rotary embedding are ones hsdiff computes;
    return the rotary theta and scaling."""
    if cfg.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"hidden_act {cfg.get('hidden_act')!r} is not supported (silu only)", path=cfg_path)
    if dims.heads % dims.kv_heads:
        raise ConfigError(
            f"num_attention_heads {dims.heads} is not a multiple of num_key_value_heads {dims.kv_heads}",
            path=cfg_path,
        )
    theta, scaling = _rope(cfg)
    if scaling is not None and scaling.get("rope_type", scaling.get("type")) != "llama3":
        raise ConfigError(
            f"rope scaling {scaling.get('rope_type', scaling.get('type'))!r} is not supported",
            path=cfg_path,
            hint="hsdiff runs default and llama3 rotary embeddings",
        )
    return theta, scaling


def _raw_tensors(folder: Path, cfg: dict) -> dict[str, Any]:
    """Every tensor in the draft's weight files under its canonical name, with the file it is in;
    a tied ``lm_head`` is the embedding table."""
    raw: dict[str, Any] = {}
    for table in _tables(folder, "draft"):
        for name, entry in table.entries.items():
            raw[_canonical(name)] = (entry, table.path)
    if "embed_tokens.weight" in raw and "lm_head.weight" not in raw and cfg.get("tie_word_embeddings"):
        raw["lm_head.weight"] = raw["embed_tokens.weight"]
    return raw


def _expected_shapes(
    raw: dict[str, Any], cfg: dict, cfg_path: Path, dims: _Dims
) -> tuple[dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]:
    """The shapes the engines expect of the required and of the optional tensors; the MLP width is
    read from ``gate_proj`` when present, else from config.json."""
    H, Ht, nh, nkv, hd, V, Vd, k = dims
    inter = raw.get("layers.0.mlp.gate_proj.weight")
    ff = (
        inter[0].shape[0]
        if inter is not None and len(inter[0].shape) == 2
        else _int(cfg, "intermediate_size", cfg_path)
    )
    want = {
        "fc.weight": (H, k * Ht),
        "layers.0.hidden_norm.weight": (H,),
        "layers.0.input_layernorm.weight": (H,),
        "layers.0.post_attention_layernorm.weight": (H,),
        "layers.0.self_attn.q_proj.weight": (nh * hd, 2 * H),
        "layers.0.self_attn.k_proj.weight": (nkv * hd, 2 * H),
        "layers.0.self_attn.v_proj.weight": (nkv * hd, 2 * H),
        "layers.0.self_attn.o_proj.weight": (H, nh * hd),
        "layers.0.mlp.gate_proj.weight": (ff, H),
        "layers.0.mlp.up_proj.weight": (ff, H),
        "layers.0.mlp.down_proj.weight": (H, ff),
        "norm.weight": (H,),
        "lm_head.weight": (Vd, H),
    }
    optional = {
        "fc.bias": (H,),
        "embed_tokens.weight": (V, H),
        "input_norm.weight": (k * Ht,),
        "layers.0.self_attn.q_proj.bias": (nh * hd,),
        "layers.0.self_attn.k_proj.bias": (nkv * hd,),
        "layers.0.self_attn.v_proj.bias": (nkv * hd,),
    }
    optional.update({f"fc_norm.{i}.weight": (Ht,) for i in range(k)})
    return want, optional


def _norm_weights(
    norms: dict[str, bool],
    engine: str | None,
    want: dict[str, tuple[int, ...]],
    optional: dict[str, tuple[int, ...]],
    raw: dict[str, Any],
    k: int,
    cfg_path: Path,
) -> None:
    """Move the weights of the EAGLE-3.1 norms the config switches on from ``optional`` to ``want`` (refused
    when the checkpoint lacks them), and drop those of norms it leaves off: the engines do not load them."""
    for n in DRAFT_NORMS.get(engine or "", DRAFT_NORMS["sglang"]):
        names = [n.weights.format(i=i) for i in range(k if "{i}" in n.weights else 1)] if n.weights else []
        for name in names:
            shape = optional.pop(name)
            if norms[n.name]:
                want[name] = shape
        lacking = [x for x in names if x not in raw]
        if norms[n.name] and lacking:
            raise FormatError(
                f"the config switches {n.name} on but the weights lack {lacking[0]}: {MISSING_NORM_WEIGHT}",
                path=cfg_path,
                hint=f"export the draft with its {n.name} weights, or set {n.name} false if it was trained without",
            )


def _load_weights(
    raw: dict[str, Any],
    want: dict[str, tuple[int, ...]],
    optional: dict[str, tuple[int, ...]],
    folder: Path,
    dtype: torch.dtype,
) -> dict[str, torch.Tensor]:
    """Refuse a draft lacking a required tensor, or holding one of the wrong shape or not floating
    point; load the required tensors and the optional ones present, in ``dtype``."""
    missing = [n for n in want if n not in raw]
    if missing:
        shown = ", ".join(missing[:4]) + (" ..." if len(missing) > 4 else "")
        raise FormatError(
            f"draft weights lack {shown} (names as SGLang/vLLM llama_eagle3.py load them)", path=folder, hint=_FIX
        )
    weights: dict[str, torch.Tensor] = {}
    for name, shape in {**want, **{n: s for n, s in optional.items() if n in raw}}.items():
        entry, where = raw[name]
        if tuple(entry.shape) != shape:
            raise FormatError(
                f"draft tensor {name} has shape {list(entry.shape)}, the engines expect {list(shape)} from config.json",
                path=where,
                hint="config.json and the weights disagree (hidden size, heads, aux slots or vocabulary)",
            )
        if not entry.is_float:
            raise FormatError(f"draft tensor {name} is {entry.dtype}, not floating point", path=where, hint=_FIX)
        weights[name] = to_torch(entry.loader()).to(dtype)
    return weights


def _load_d2t(raw: dict[str, Any], dims: _Dims, folder: Path) -> torch.Tensor | None:
    """The draft-to-target id offsets (``d2t``), checked to map into the target vocabulary; None when
    the draft vocabulary is the target's. A smaller draft vocabulary without ``d2t`` is refused."""
    V, Vd = dims.vocab, dims.draft_vocab
    if "d2t" in raw:
        entry, where = raw["d2t"]
        if tuple(entry.shape) != (Vd,) or entry.is_float:
            raise FormatError(
                f"d2t has shape {list(entry.shape)} ({entry.dtype}); expected [{Vd}] integers", path=where, hint=_FIX
            )
        d2t = to_torch(entry.loader()).long()
        mapped = torch.arange(Vd) + d2t
        if int(mapped.min()) < 0 or int(mapped.max()) >= V:
            raise FormatError("d2t maps draft ids outside the target vocabulary", path=where, hint=_FIX)
        return d2t
    if Vd != V:
        raise FormatError(
            f"draft_vocab_size {Vd} differs from vocab_size {V} but the weights carry no d2t map",
            path=folder,
            hint=_FIX,
        )
    return None


def _ignored_warnings(raw: dict[str, Any], known: Collection[str], folder: Path) -> list[str]:
    """A warning naming the tensors in the files that the engines do not load (none if all are)."""
    extra = sorted(n for n in raw if n not in known)
    return [f"{folder}: tensors the engines do not load were ignored: {', '.join(extra[:5])}"] if extra else []


def _embeddings(
    weights: dict[str, torch.Tensor],
    target: str | os.PathLike | TargetHead | None,
    dims: _Dims,
    folder: Path,
    dtype: torch.dtype,
) -> str:
    """Where the token embeddings come from: the draft's own, else the target's (added to
    ``weights`` after checking their shape); a draft without them needs ``target``."""
    if "embed_tokens.weight" in weights:
        return "draft"
    if target is None:
        raise InputError(
            "the draft carries no embed_tokens; the engines take the target's",
            path=folder,
            hint="give the target model's folder (`target=DIR`)",
            options=("target",),
        )
    head = target if isinstance(target, TargetHead) else load_target_head(target, dtype=dtype)
    if tuple(head.embed.shape) != (dims.vocab, dims.hidden):
        raise FormatError(
            f"target embeddings have shape {list(head.embed.shape)}, the draft needs [{dims.vocab}, {dims.hidden}]",
            path=head.path,
            hint="give the target the draft was trained for",
        )
    weights["embed_tokens.weight"] = head.embed.to(dtype)
    return head.path


def load_draft(
    path: str | os.PathLike,
    target: str | os.PathLike | TargetHead | None = None,
    dtype: torch.dtype = torch.float32,
    engine: str | None = None,
) -> Draft:
    """Load the draft in ``path`` (a folder with ``config.json`` and weights) for a CPU forward.

    ``target`` is the target model's folder, read only for ``embed_tokens`` when the draft does not
    carry them (as the engines do). The EAGLE-3.1 norms are those ``engine`` switches on from the config
    (:data:`~hsdiff.rules.kinds.DRAFT_NORMS`; None: SGLang's reading), not those the weights happen to
    hold. Raises :class:`~hsdiff.errors.HsdiffError` subclasses naming the file and the fix for anything
    the engines would refuse.

    >>> draft = load_draft("fixtures/draft-smollm2", target=smollm2_dir)     # doctest: +SKIP
    >>> draft.num_aux, draft.draft_vocab_size
    (3, 1024)
    """
    folder = _draft_folder(path)
    cfg_path = folder / "config.json"
    cfg = _draft_config(cfg_path)
    dims = _dims(cfg, cfg_path)
    stated = stated_ids(cfg, ints_only=True)
    theta, scaling = _supported_rotary(cfg, cfg_path, dims)
    raw = _raw_tensors(folder, cfg)
    want, optional = _expected_shapes(raw, cfg, cfg_path, dims)
    norms = draft_norms(cfg, engine)
    _norm_weights(norms, engine, want, optional, raw, dims.aux, cfg_path)
    weights = _load_weights(raw, want, optional, folder, dtype)
    d2t = _load_d2t(raw, dims, folder)
    warns = _ignored_warnings(raw, set(want) | set(optional) | {"d2t", "t2d"}, folder)
    emb_from = _embeddings(weights, target, dims, folder, dtype)
    return Draft(
        path=str(folder),
        hidden_size=dims.hidden,
        target_hidden_size=dims.target_hidden,
        num_aux=dims.aux,
        num_heads=dims.heads,
        num_kv_heads=dims.kv_heads,
        head_dim=dims.head_dim,
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=theta,
        rope_scaling=scaling,
        vocab_size=dims.vocab,
        draft_vocab_size=dims.draft_vocab,
        layer_ids=None if stated is None else tuple(stated[1]),
        weights=weights,
        d2t=d2t,
        norm_before_fc=norms["norm_before_fc"],
        fc_norm=norms["fc_norm"],
        norm_output=norms["norm_output"],
        norm_before_residual=bool(cfg.get("norm_before_residual")),
        embeddings_from=emb_from,
        warnings=tuple(warns),
    )


_EMBED = ("model.embed_tokens.weight", "embed_tokens.weight", "model.language_model.embed_tokens.weight")
_NORM = ("model.norm.weight", "norm.weight", "model.language_model.norm.weight")
_HEAD = ("lm_head.weight",)


def load_target_head(path: str | os.PathLike, dtype: torch.dtype = torch.float32) -> TargetHead:
    """The target's ``embed_tokens`` (and final ``norm``/``lm_head`` when present) from its folder."""
    folder = Path(path)
    if folder.is_file():
        folder = folder.parent
    if not folder.is_dir():
        raise InputError("no such target model folder", path=folder, hint="give the folder of the target model")
    found: dict[str, Any] = {}
    for table in _tables(folder, "target model"):
        for names, key in ((_EMBED, "embed"), (_NORM, "norm"), (_HEAD, "lm_head")):
            for n in names:
                if n in table.entries and key not in found:
                    found[key] = table.entries[n]
    if "embed" not in found:
        raise FormatError(
            "no embed_tokens tensor in the target's weights",
            path=folder,
            hint="give the target model's folder (model.embed_tokens.weight)",
        )
    cfg = load_config(folder) if (folder / "config.json").exists() else {}
    head = found.get("lm_head")
    embed = to_torch(found["embed"].loader()).to(dtype)
    tied = head is None and cfg.get("tie_word_embeddings", True)
    return TargetHead(
        embed=embed,
        norm=to_torch(found["norm"].loader()).to(dtype) if "norm" in found else None,
        lm_head=to_torch(head.loader()).to(dtype) if head is not None else embed if tied else None,
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        path=str(folder),
    )
