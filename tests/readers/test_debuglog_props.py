"""Property tests of the log parser: whatever PyTorch or numpy prints, with whatever print options,
inside whatever noise, comes back as the printed values at the right positions."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hsdiff.errors import FormatError
from hsdiff.readers import debuglog
from hsdiff.readers._common import ReadContext

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

NOISE_LINES = st.lists(
    st.sampled_from(
        [
            "[2026-11-30 01:15:02 TP0] Decode batch. #running-req: 1, #token: 26, token usage: 0.00",
            '\x1b[32mINFO\x1b[0m:     127.0.0.1:51234 - "POST /generate HTTP/1.1" 200 OK',
            "Loading safetensors checkpoint shards: 100% Completed | 2/2 [00:01<00:00,  1.50it/s]",
            "cuda_graph_bs=[1, 2, 4, 8, 16] input_ids=[1, 9690, 198, 6077]",
            "WARNING 11-30 01:15:09 [config.py:1913] Chunked prefill is enabled.",
            "",
        ]
    ),
    max_size=4,
)


def _tol(y: np.ndarray, precision: int) -> np.ndarray:
    # the print's own rounding, plus float32's: numpy prints the shortest repr of a float32
    with np.errstate(invalid="ignore"):
        return 0.51 * 10.0 ** (-precision) * np.maximum(1.0, np.abs(y)) + 1.2e-7 * np.abs(y) + 1e-12


def _check(cap, t: np.ndarray, precision: int) -> None:
    obs = cap.observation
    rows = [r if r >= 0 else t.shape[0] + r for r in obs.rows]
    cols = [c if c >= 0 else t.shape[1] + c for c in obs.cols]
    want = t[np.ix_(rows, cols)]
    got = obs.values
    both_nan = np.isnan(got) & np.isnan(want)
    same_inf = np.isinf(got) & np.isinf(want) & (np.sign(got) == np.sign(want))
    with np.errstate(invalid="ignore"):
        close = np.abs(got - want) <= _tol(want, precision)
    assert bool((both_nan | same_inf | close).all()), (got, want)


@st.composite
def tensors(draw):
    rows = draw(st.integers(1, 12))
    cols = draw(st.integers(2, 40))
    scale = 10.0 ** draw(st.integers(-3, 4))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(rows, cols, generator=g) * scale
    if draw(st.booleans()):  # an attention-sink-like massive activation
        t[0, draw(st.integers(0, cols - 1))] = scale * 3000
    specials = draw(st.lists(st.sampled_from([math.nan, math.inf, -math.inf]), max_size=2))
    for k, v in enumerate(specials):
        t[min(k + 1, rows - 1), k] = v
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16, torch.float16]))
    return t.to(dtype)


@SETTINGS
@given(
    t=tensors(),
    precision=st.integers(2, 8),
    sci=st.sampled_from([None, True, False]),
    linewidth=st.integers(40, 200),
    threshold=st.sampled_from([10, 50, 1000]),
    edgeitems=st.integers(1, 4),
    batch=st.booleans(),
    before=NOISE_LINES,
    after=NOISE_LINES,
)
def test_pytorch_prints_round_trip(tmp_path, t, precision, sci, linewidth, threshold, edgeitems, batch, before, after):
    shown = t[None] if batch else t
    torch.set_printoptions(
        precision=precision, sci_mode=sci, linewidth=linewidth, threshold=threshold, edgeitems=edgeitems
    )
    try:
        text = repr(shown)
    finally:
        torch.set_printoptions(profile="default")
        torch.set_printoptions(sci_mode=None)
    ref = t.float().numpy().astype(np.float64)
    if not np.isfinite(ref).any():
        return
    log = "\n".join(before + [f"[2026-11-30 01:15:02 TP0] aux_hidden_states[1] layer=7 h={text}"] + after) + "\n"
    p = tmp_path / "p.log"
    p.write_text(log)
    caps = debuglog.read(p, ReadContext(side="infer", root=tmp_path))
    (cap,) = [c for c in caps if c.slot == 1]
    assert cap.boundary == 7
    want_dtype = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[t.dtype]
    assert cap.dtype == want_dtype
    _check(cap, ref, precision)


@SETTINGS
@given(
    t=tensors(),
    precision=st.integers(2, 8),
    threshold=st.sampled_from([10, 1000]),
    edgeitems=st.integers(1, 3),
    as_repr=st.booleans(),
    linewidth=st.integers(40, 160),
)
def test_numpy_prints_round_trip(tmp_path, t, precision, threshold, edgeitems, as_repr, linewidth):
    arr = t.float().numpy()
    with np.printoptions(precision=precision, threshold=threshold, edgeitems=edgeitems, linewidth=linewidth):
        text = repr(arr) if as_repr else str(arr)
    ref = arr.astype(np.float64)
    if not np.isfinite(ref).any():
        return
    p = tmp_path / "n.log"
    p.write_text(f"INFO capture layer 3: {text}\n")
    (cap,) = debuglog.read(p, ReadContext(side="infer", root=tmp_path))
    assert cap.boundary == 3
    # numpy rounds to `precision` digits after the point, or to that many significant digits in e-notation
    _check(cap, ref, precision)


@SETTINGS
@given(data=st.binary(max_size=4000))
def test_arbitrary_bytes_never_crash(tmp_path, data):
    p = tmp_path / "b.log"
    p.write_bytes(data)
    try:
        caps = debuglog.read(p, ReadContext(side="infer", root=tmp_path))
    except FormatError:
        return
    for c in caps:
        assert c.observation is not None and np.isfinite(c.observation.values).any()


@SETTINGS
@given(
    values=st.lists(
        st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False).filter(lambda v: abs(v) > 1e-6),
        min_size=4,
        max_size=12,
    ),
    fmt=st.sampled_from(["{:.4g}", "{:.6e}", "{!r}", "{:.3f}"]),
    sep=st.sampled_from([", ", " ", ",", "  "]),
    line_start=st.sampled_from(
        ["", "[2026-11-30 01:15:02 TP0] ", "\x1b[33mDEBUG\x1b[0m ", "(VllmWorker rank=0 pid=7) "]
    ),
)
def test_flat_lists_in_any_notation(tmp_path, values, fmt, sep, line_start):
    texts = [fmt.format(v) for v in values]
    if not any(("." in x or "e" in x) for x in texts):
        texts[0] = texts[0] + ".0"
    p = tmp_path / "f.log"
    p.write_text(f"{line_start}slot 2 first{len(texts)}=[{sep.join(texts)}]\n")
    (cap,) = debuglog.read(p, ReadContext(side="infer", root=tmp_path))
    assert cap.slot == 2 and cap.observation.rows == (0,)
    assert cap.observation.cols == tuple(range(len(texts)))
    np.testing.assert_allclose(cap.observation.values[0], [float(x) for x in texts], rtol=0, atol=0)


def test_a_large_log_streams(tmp_path: Path):
    """Many megabytes of noise around one print: read line by line, the print found at its line."""
    p = tmp_path / "big.log"
    noise = "[2026-11-30 01:15:02 TP0] Decode batch. #running-req: 1, #token: 26, accept len: 1.18\n"
    with open(p, "w") as f:
        for _ in range(60_000):
            f.write(noise)
        f.write("aux_hidden_states[0] layer=2 first5=[0.5, -0.25, 1.5, 2.25, -3.0]\n")
    (cap,) = debuglog.read(p, ReadContext(side="infer", root=tmp_path))
    assert cap.origin.line == 60_001 and cap.boundary == 2
