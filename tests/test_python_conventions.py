"""What a notebook user and a terminal user see of hsdiff's entry points: typed keyword arguments on
``compare`` and ``run_gate`` (no ``**kwargs``), and ``--help`` in groups with what is set first on top."""

from __future__ import annotations

import dataclasses
import inspect

import click
import pytest
from click.testing import CliRunner

import hsdiff
from hsdiff.cli import cli
from hsdiff.cli._help import OTHER, group_of
from hsdiff.comparison import Options, options_with

pytestmark = pytest.mark.core

#: Options fields the commands fill in themselves (from a draft config, the flags as typed, the
#: runner): set through an Options, not as keywords.
INTERNAL = {"configured_source", "engine_versions", "model_family_source", "vllm_runner", "configured_boundaries"}


@pytest.mark.parametrize("function", [hsdiff.compare, hsdiff.run_gate])
def test_the_public_entry_points_take_named_keywords_only(function):
    params = inspect.signature(function).parameters.values()
    assert not [p for p in params if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    keywords = {p.name for p in params if p.kind is p.KEYWORD_ONLY}
    fields = {f.name for f in dataclasses.fields(Options)}
    assert keywords - fields <= {"target_config", "strict", "vllm_runner"}  # run_gate's own
    if function is hsdiff.compare:
        assert keywords | INTERNAL == fields
    with pytest.raises(TypeError, match="unexpected keyword argument 'layer_idz'"):
        function("a", "b", layer_idz=[1])


def test_a_keyword_overrides_its_field_and_none_leaves_it():
    base = Options(engine="vllm", tolerance=0.2)
    opts = options_with(base, layer_ids="-1,2,30", engine=None, tolerance=0.05)
    assert (opts.engine, opts.tolerance, list(opts.layer_ids)) == ("vllm", 0.05, [-1, 2, 30])
    assert base.layer_ids is None


def test_compare_and_run_gate_use_their_keywords():
    report = hsdiff.compare("fixtures/seed/train", "fixtures/seed/infer-wrong", layer_ids="-1,2,30", engine="sglang")
    assert (report.verdict, report.recommended.ids) == ("mismatch", (2, 30, 58))
    result = hsdiff.run_gate(
        "fixtures/seed/train",
        "fixtures/seed/infer-wrong",
        "fixtures/seed/draft-wrong/config.json",
        engine="sglang",
        engine_version="0.5.23",
    )
    assert (result.verdict, result.exit_code, result.report.recommended.ids) == ("fail", 1, (2, 30, 58))


def _commands():
    ctx = click.Context(cli)
    return [(name, cli.get_command(ctx, name)) for name in cli.list_commands(ctx)]


def test_every_option_of_every_command_has_its_group():
    loose = {
        (name, p.name)
        for name, command in _commands()
        for p in command.params
        if isinstance(p, click.Option) and group_of(p.name) == OTHER and p.name not in ("help", "debug", "verbose")
    }
    assert not loose


def test_compare_help_starts_with_the_engine_and_the_ids():
    lines = CliRunner().invoke(cli, ["compare", "--help"], terminal_width=100).output.splitlines()
    sections = [line.rstrip(":") for line in lines if line and not line.startswith(" ") and line.endswith(":")]
    assert sections == ["Engine and target", "Inputs", "Draft", "Checks", "Outputs", OTHER]
    first = next(i for i, line in enumerate(lines) if line.lstrip().startswith("--layer-ids"))
    assert first < 30 and next(i for i, line in enumerate(lines) if line.lstrip().startswith("--engine ")) < first
    for flag in ("--json", "--markdown", "--html", "--draft "):
        assert sum(line.lstrip().startswith(flag) for line in lines) == 1, flag
