"""The investigation notebook runs top to bottom and reaches the recommended ids."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def test_checked_in_notebook_matches_its_builder():
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_notebook", NOTEBOOKS / "build_notebook.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    built = [c.source for c in mod.build().cells]
    stored = [c.source for c in nbformat.read(NOTEBOOKS / "investigate.ipynb", as_version=4).cells]
    assert built == stored, "run: python notebooks/build_notebook.py"


def test_investigate_notebook_executes(tmp_path):
    nb = nbformat.read(NOTEBOOKS / "investigate.ipynb", as_version=4)
    env = dict(os.environ)
    os.environ["HSDIFF_ROOT"] = str(NOTEBOOKS.parent)
    os.environ.pop("MPLBACKEND", None)  # the kernel's inline backend, as in Jupyter
    try:
        client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(env)
    outputs = {i: c.get("outputs", []) for i, c in enumerate(nb.cells) if c.cell_type == "code"}
    text = "\n".join(
        o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for outs in outputs.values() for o in outs
    )
    assert "shifted by 1 slot" in text
    assert "'sglang': [2, 30, 58]" in text and "'vllm': [3, 31, 59]" in text
    assert "('ok', (2, 30, 58))" in text
    assert any("image/png" in o.get("data", {}) for outs in outputs.values() for o in outs)
