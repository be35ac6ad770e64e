"""Writing report files for the commands (JSON, plots); never into the dump directories."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import click

from ..errors import InputError
from ..extras import require
from ..model import Report


def write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` ('-' for stdout): a regular file is replaced atomically, keeping its
    mode (a new one gets the umask's); a symlink's target is written, not the link; a device or a pipe
    (``/dev/null``, a FIFO) is written through, never replaced by a file."""
    if path == "-":
        click.echo(text)
        return
    p = Path(path)
    if p.is_dir():
        raise InputError("is a directory", path=p, hint="give a file name for the output")
    data = text if text.endswith("\n") else text + "\n"
    target = Path(os.path.realpath(p))
    try:
        if target.exists() and not target.is_file():
            with open(target, "w", encoding="utf-8") as f:
                f.write(data)
            return
        if not target.parent.is_dir():
            raise InputError("the folder for this output does not exist", path=p, hint="create it first")
        mode = target.stat().st_mode & 0o7777 if target.exists() else 0o666 & ~_umask()
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            os.fchmod(fd, mode)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as e:
        raise InputError(
            f"cannot write the output ({e.strerror or e})", path=p, hint="check the folder's permissions and free space"
        ) from None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json(report: Report, path: str) -> None:
    write_text(path, report.to_json())


def write_plot(report: Report, path: str) -> list[Path]:
    """``--plot``: a folder gets the three pictures; a path ending in ``.png`` gets the heatmap alone."""
    require("matplotlib", "plot", "--plot").use("Agg")
    from ..report.pictures import heatmap, png_bytes, write_pictures

    p = Path(path)
    if p.suffix.lower() == ".png":
        if not (p.parent if str(p.parent) else Path(".")).is_dir():
            raise InputError("the folder for this picture does not exist", path=p, hint="create it first")
        p.write_bytes(png_bytes(heatmap(report), dpi=110))
        return [p]
    if p.exists() and not p.is_dir():
        raise InputError(
            "--plot wants a folder (for the three pictures) or a .png file name, and this is a file",
            path=p,
            hint="give a folder, or a name ending in .png for the heatmap alone",
        )
    if not p.parent.is_dir():
        raise InputError("the folder above this --plot folder does not exist", path=p, hint="create it first")
    return write_pictures(report, p)


def write_documents(report: Report, markdown_path: str | None, html_path: str | None) -> None:
    """``--markdown`` and ``--html``: the report to paste into an issue, and one self-contained page."""
    if markdown_path is None and html_path is None:
        return
    from ..report import document

    if markdown_path:
        write_text(markdown_path, document.render_report_markdown(report))
    if html_path:
        if document.has_pictures():
            require("matplotlib", "plot", "--html").use("Agg")
        else:
            click.echo(f"hsdiff: warning: {html_path}: {document.NO_PICTURES}", err=True)
        write_text(html_path, document.render_html(report))


def write_gate_html(result: object, html_path: str) -> None:
    """``gate --html``: the gate's verdict and checks, then its comparison with the pictures, as one page."""
    from ..report import document

    if document.has_pictures():
        require("matplotlib", "plot", "--html").use("Agg")
    elif getattr(result, "report", None) is not None:
        click.echo(f"hsdiff: warning: {html_path}: {document.NO_PICTURES}", err=True)
    write_text(html_path, document.render_html(result))  # type: ignore[arg-type]
