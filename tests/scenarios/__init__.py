"""Comparison scenarios with known ground truth, generated from real SmolLM2-135M hidden states.

>>> sc = generate(7)                    # doctest: +SKIP
>>> train, infer = write(sc, tmp_path)  # doctest: +SKIP
>>> hsdiff.compare(train, infer, **sc.kwargs)  # doctest: +SKIP

``sc.truth`` holds the boundary of every training slot (``None`` where neither values nor labels
determine it) and ``sc.should_pass`` whether a correct gate passes the deployment.
"""

from __future__ import annotations

from .generate import Scenario, generate, to_ids
from .write import write

__all__ = ["Scenario", "generate", "to_ids", "write"]
