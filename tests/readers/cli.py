"""What the new-format tests share: the command line run in-process, and the one-line refusal it promises."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from hsdiff.cli import cli


def refusal(argv: list[str]) -> str:
    """Run ``hsdiff argv``; assert exit 2 with one line on stderr and nothing on stdout; return that line."""
    r = CliRunner().invoke(cli, argv)
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and not r.stdout, (r.exit_code, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    return lines[0]


def all_layers(root: Path) -> Path:
    """An SGLang dumper run that dumped the input of every layer of SmolLM2 (B 0..29) for sample 1."""
    from .. import builders as B

    return B.sglang_dump(root, 1, list(range(30)), concat_slots=False, tag_layers=True)


def inspected(path: Path, fmt: str, *why: str) -> str:
    """``hsdiff.inspect(path)``: assert it names the one format ``fmt`` with the words ``why`` in its reason;
    return its first summary sentence."""
    import hsdiff

    info = hsdiff.inspect(path)
    (found,) = info.formats
    assert found["format"] == fmt and all(w in found["why"] for w in why), found
    return info.summary[0]
