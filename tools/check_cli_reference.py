"""Run by ``make docs`` after the build: the CLI reference page lists every command and every option.

    python tools/check_cli_reference.py out/site/cli/index.html

Prints what is missing and exits 1, or prints ``N passed, 0 failed`` (commands and options found).
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import click

from hsdiff.cli import cli


def main(page: Path) -> int:
    text = html.unescape(re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8")))
    wanted = []
    for name, command in sorted(cli.load_all().items()):
        wanted.append(f"hsdiff {name}")
        wanted += [max(p.opts, key=len) for p in command.params if isinstance(p, click.Option)]
    missing = sorted({w for w in wanted if w not in text})
    for w in missing:
        print(f"not in {page}: {w}")
    print(f"{len(wanted) - len(missing)} passed, {len(missing)} failed")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
