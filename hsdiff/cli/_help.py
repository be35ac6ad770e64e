"""``--help`` with the options in groups (engine and target, inputs, draft, checks, running, outputs), so that what
a user sets first is read first: every command of the group is built with :class:`GroupedCommand`."""

from __future__ import annotations

import click

#: Each group's title and the parameters it holds, groups and parameters in the order ``--help`` shows
#: them; any other option (``--help`` among them) is shown last, under "Other options".
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Engine and target",
        (
            "engine",
            "engine_versions",
            "model_family",
            "layer_ids",
            "draft_config",
            "target_config",
            "model_config",
            "num_layers",
            "hidden_size",
            "vllm_runner",
            "train_engine",
            "dst",
            "model",
            "device",
            "dtype",
            "device_map",
        ),
    ),
    (
        "Inputs",
        (
            "infer_format",
            "train_format",
            "infer_index",
            "train_index",
            "train_layer_ids",
            "log_pattern",
            "engine_log",
            "sample",
            "train",
            "metrics",
            "log_path",
            "model_dir",
            "src",
            "url",
            "hidden_states",
            "name",
            "fmt",
            "sample_rows",
            "state",
            "fingerprint",
            "from_dump",
            "noise_from",
            "probes",
            "probe_tokens",
            "drafts_only",
        ),
    ),
    (
        "Draft",
        (
            "draft_dir",
            "draft_dtype",
            "draft_kind",
            "num_draft_tokens",
            "num_steps",
            "topk",
            "target_model",
            "min_acceptance",
            "spec_tokens",
            "draft",
        ),
    ),
    (
        "Checks",
        (
            "tolerance",
            "strict",
            "baseline",
            "baseline_windows",
            "window_drafts",
            "max_windows",
            "max_failures",
            "on_alarm",
            "explain",
            "translate",
            "dry_run",
            "noise_dtype",
        ),
    ),
    (
        "Running",
        ("workers", "cluster", "resume", "checkpoint", "interval", "once", "retries", "timeout"),
    ),
    (
        "Outputs",
        (
            "json_path",
            "markdown_path",
            "html_path",
            "junit_path",
            "plot_path",
            "acceptance_plot",
            "github",
            "as_json",
            "events",
            "out_dir",
            "report",
            "quiet",
            "progress",
            "one_line",
            "out",
        ),
    ),
)
OTHER = "Other options"


def group_of(name: str | None) -> str:
    """The title of the group that shows the parameter ``name``."""
    return next((title for title, names in GROUPS if name in names), OTHER)


def _rank(param: click.Parameter) -> int:
    """Where ``param`` comes within its group (the others: in the order they were declared)."""
    names = dict(GROUPS).get(group_of(param.name), ())
    return names.index(param.name) if param.name in names else len(names)


class GroupedCommand(click.Command):
    """A click command whose ``--help`` shows its options group by group (one plain "Options" section
    when all of them fall in one group)."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows: dict[str, list[tuple[str, str]]] = {}
        for param in sorted(self.get_params(ctx), key=_rank):
            record = param.get_help_record(ctx)
            if record is not None:
                rows.setdefault(group_of(param.name), []).append(record)
        titles = [title for title, _ in GROUPS if title in rows] + ([OTHER] if OTHER in rows else [])
        if len(titles) == 1:
            with formatter.section("Options"):
                formatter.write_dl(rows[titles[0]])
            return
        for title in titles:
            with formatter.section(title):
                formatter.write_dl(rows[title])
