"""``hsdiff request SAMPLE``."""

from __future__ import annotations

import json

import click

from ..request import advice, curl_command, request_body
from ..samples import load_sample
from ._group import cli

EPILOG = """\b
Examples:
  hsdiff request train/rows_0-2000/data_1.ckpt | curl -sS localhost:30000/generate -H 'Content-Type: application/json' -d @-
  hsdiff request train/ --sample data_1 --engine vllm --model my-target --url http://localhost:8000
  hsdiff request train/ --sample data_1 --hidden-states --url http://localhost:30000 > ask.sh   # then: sh ask.sh > resp.json
"""  # noqa: E501


@cli.command("request", epilog=EPILOG)
@click.argument("sample", type=click.Path(path_type=str))
@click.option(
    "--engine",
    type=click.Choice(["sglang", "vllm"]),
    default="sglang",
    show_default=True,
    help="sglang: POST /generate with input_ids; vllm: POST /v1/completions with the ids as prompt.",
)
@click.option("--sample", "name", default=None, help="Which sample, when SAMPLE is a directory or holds several.")
@click.option("--model", default=None, help='vLLM: the served model name (the request\'s "model").')
@click.option("--url", default=None, help="Print a curl command for this server instead of the bare JSON body.")
@click.option(
    "--hidden-states",
    is_flag=True,
    help="SGLang: ask for the aux hidden states in the response (save it as .json for hsdiff compare).",
)
def request_cmd(sample, engine, name, model, url, hidden_states) -> None:
    """Print the request body that replays SAMPLE's exact token ids against a running server."""
    s = load_sample(sample, name)
    body = request_body(s.token_ids, engine, model=model, hidden_states=hidden_states)
    click.echo(curl_command(body, url, engine) if url else json.dumps(body, separators=(",", ":")))
    click.echo(f"hsdiff: {len(s.token_ids)} token ids of sample {s.name}; {advice(engine, hidden_states)}", err=True)
