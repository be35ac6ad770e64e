"""The debug-log reader on records SGLang's tensor dumper prints (:mod:`hsdiff.readers.debuglog.dumper`)."""

from __future__ import annotations

import torch

from hsdiff.readers import debuglog
from hsdiff.readers._common import ReadContext

from .. import builders as B
from .logs import LOGS, REAL_DIR, REAL_LOG


def test_real_sglang_dumper_log_gives_one_capture_per_layer_with_its_tags():
    ctx = ReadContext(side="infer", root=B.REAL)
    caps = debuglog.read(REAL_LOG, ctx)
    assert len(caps) == 30
    assert [c.boundary for c in caps] == list(range(30))
    assert {c.layer.source for c in caps} == {"log"}
    c = caps[0]
    assert c.shape == (61, 576) and c.width == 576 and c.dtype == "bfloat16"
    assert c.origin.line == 2 and c.origin.format == "debuglog"
    assert c.origin.key == "name=eagle3_aux layer_id=0"
    assert c.group == "sglang-dumper.log:dump_20261130_023047_011830:step=0"
    assert c.observation.rows == (0, 1, 2, 3, 4) and c.observation.cols == (0, 1, 2, 3, 4)
    assert c.observation.values[0].tolist() == [-0.0238, -0.0159, -0.0396, 0.0159, -0.1113]
    assert ctx.warnings == []


def test_real_dumper_log_sample_equals_the_saved_tensors_within_print_rounding():
    caps = debuglog.read(REAL_LOG, ReadContext(side="infer"))
    for c in caps:
        saved = torch.load(
            REAL_DIR
            / (
                f"step=0___rank=0___dump_index={c.boundary + 1}___name=eagle3_aux___recompute_status=disabled"
                f"___layer_id={c.boundary}.pt"
            ),
            weights_only=True,
        )["value"].float()
        printed = torch.as_tensor(c.observation.values, dtype=torch.float32)
        # PyTorch prints 4 decimals (or 5 significant digits in scientific notation)
        tol = 0.5e-4 + 0.5e-4 * saved[:5, :5].abs()
        assert bool(((printed - saved[:5, :5]).abs() <= tol).all()), c.origin


def test_sglang_dumper_ranks_collapse_and_int_tensors_are_skipped():
    caps = debuglog.read(LOGS / "seed-sglang-dumper.log", ReadContext(side="infer", root=LOGS))
    assert [c.boundary for c in caps] == [0, 3, 31]  # rank 1 printed the same values; input_ids are ints
    assert all(c.observation.values.shape == (25, 5) for c in caps)
    assert {c.group for c in caps} == {"seed-sglang-dumper.log:dump_20261130_011502_123456:step=0"}
