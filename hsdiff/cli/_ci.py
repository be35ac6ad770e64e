"""CI outputs shared by ``gate`` and ``check-config``: JSON, JUnit, Markdown, GitHub annotations."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import click

from ..model.gate import GateResult
from ..rules import conventions as conv
from ._config import sources
from ._output import write_text

F = Callable[..., Any]


def ci_options(f: F) -> F:
    """``--junit``, ``--markdown``, ``--github``, ``--strict`` and ``--vllm-runner``."""
    for d in reversed(
        [
            click.option(
                "--vllm-runner",
                type=click.Choice(conv.VLLM_RUNNERS),
                default=conv.DEFAULT_RUNNER,
                show_default=True,
                help="vLLM model runner: v2 (the default in vLLM 0.29-0.33) reads only the top-level key; v1 "
                "(only when forced, VLLM_USE_V2_MODEL_RUNNER=0) reads the top-level key, then eagle_config's.",
            ),
            click.option(
                "--strict", is_flag=True, help="Fail on warnings too (silent fallback, ids the V2 runner ignores...)."
            ),
            click.option(
                "--junit",
                "junit_path",
                type=click.Path(path_type=str),
                default=None,
                help="Write JUnit XML to PATH: one testcase per check and per slot.",
            ),
            click.option(
                "--markdown",
                "markdown_path",
                type=click.Path(path_type=str),
                default=None,
                help="Write a Markdown summary to PATH (e.g. $GITHUB_STEP_SUMMARY; '-' for stdout).",
            ),
            click.option("--github", is_flag=True, help="Print GitHub Actions ::error:: / ::warning:: annotations."),
        ]
    ):
        f = d(f)
    return f


def emit(
    result: GateResult,
    *,
    json_path: str | None,
    junit_path: str | None,
    markdown_path: str | None,
    github: bool,
    quiet: bool = False,
) -> None:
    """Write the requested outputs, print the text report (unless JSON goes to stdout), then exit."""
    from ..report.gate import render_gate_text

    result = dataclasses.replace(result, inputs={**result.inputs, "sources": sources()})
    if json_path:
        write_text(json_path, result.to_json())
    if junit_path:
        from ..report.junit import render_junit

        write_text(junit_path, render_junit(result))
    if markdown_path:
        from ..report.markdown import render_markdown

        write_text(markdown_path, render_markdown(result))
    if json_path != "-" and markdown_path != "-":
        click.echo(render_gate_text(result, verbose=not quiet))
    if github:
        from ..report.github import render_github

        click.echo(render_github(result))
    click.get_current_context().exit(result.exit_code)
