"""Renderers: a :class:`~hsdiff.model.Report` in as text, JSON, JUnit XML, Markdown or a plot.

Each renderer is a pure function of the report; none of them computes a verdict.
"""

from __future__ import annotations

from .text import render_text

__all__ = ["render_text"]
