"""Renderers: a report or gate result in as text, JUnit XML, Markdown, GitHub annotations, an HTML
page or pictures (:mod:`.pictures`: heatmap, norm trajectory, per-token error; :mod:`.document`:
the compare report as Markdown for an issue and as one self-contained HTML page), and the text of
``hsdiff inspect`` (:mod:`.inspect`).

Each renderer is a pure function of the result's JSON document (a result object is turned into
one with ``to_dict()``), so a saved ``--json`` file renders exactly like a fresh result and
rendering imports neither torch nor the comparison pipeline. None of them computes a verdict.

>>> from hsdiff.report import load_doc, render_text
>>> print(render_text(load_doc("report.json")))        # doctest: +SKIP
"""

from __future__ import annotations

from ._doc import as_doc, load_doc
from .gate import render_gate_text
from .github import render_github
from .junit import render_junit
from .markdown import render_markdown
from .text import render_text

__all__ = ["as_doc", "load_doc", "render_text", "render_gate_text", "render_junit", "render_markdown", "render_github"]
