"""Shared fixtures, and the core run (``make test-core``).

``make test-core`` runs the suite with ``HSDIFF_TEST_CORE=1`` in a venv holding only what
``pip install hsdiff`` installs (numpy, safetensors, click) and pytest. There, only the tests marked
``core`` run (a module with none is not even imported: most build their dumps with torch), and a core
test marked ``extra("NAME")`` is skipped: that extra is absent by design. Everywhere else every test
runs, the ``extra`` marks included, so a missing extra in the full venv is a failure, never a skip.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")

#: Set by ``make test-core``: this venv holds the core install only.
CORE = os.environ.get("HSDIFF_TEST_CORE") == "1"
#: What the core install must not hold (import names of the extras' packages and of the test tools).
NOT_IN_CORE = (
    "torch",
    "pandas",
    "matplotlib",
    "transformers",
    "dask",
    "fsspec",
    "zstandard",
    "prometheus_client",
    "tqdm",
    "jsonschema",
)


def pytest_configure(config: pytest.Config) -> None:
    if CORE:
        present = [m for m in NOT_IN_CORE if importlib.util.find_spec(m) is not None]
        if present:
            raise pytest.UsageError(
                f"HSDIFF_TEST_CORE=1 but this venv holds {', '.join(present)}: the core run needs a venv with "
                "the core install only (make test-core builds one)"
            )


#: Under CI=true a skipped test fails the run (a real part that cannot start is a failure there), except
#: for these reasons: what the run leaves out by design, or what no machine of this kind can run.
CI = os.environ.get("CI") == "true"
SKIPS_BY_DESIGN = (
    "core venv: ",  # make test-core: the extras are absent on purpose
    "starts an engine server, which this machine cannot run",  # SGLang/TensorRT-LLM need a GPU
    "HSDIFF_FUZZ_SECONDS=0",
    "HSDIFF_NO_C=1",  # make test-kernels: the numpy path on request
    "the C loop was not built here",  # ... and so the C loop's own tests
)


def _no_skip_under_ci(report: pytest.TestReport | pytest.CollectReport) -> None:
    if CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        if not reason.startswith(SKIPS_BY_DESIGN):
            report.outcome = "failed"
            report.longrepr = f"skipped under CI=true, where every part must run: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    _no_skip_under_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> object:
    outcome = yield
    _no_skip_under_ci(outcome.get_result())


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if not CORE:
        return None
    if collection_path.is_dir():  # nor a folder without one (its conftest.py may import torch)
        return not any(_has_core_tests(f) for f in collection_path.rglob("test_*.py"))
    if collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        return not _has_core_tests(collection_path)
    return None


def _has_core_tests(path: Path) -> bool:
    return "mark.core" in path.read_text(encoding="utf-8")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not CORE:
        return
    kept, dropped = [], []
    for item in items:
        (kept if item.get_closest_marker("core") else dropped).append(item)
        extra = item.get_closest_marker("extra")
        if extra is not None and item.get_closest_marker("core"):
            name = extra.args[0]
            item.add_marker(pytest.mark.skip(reason=f"core venv: the {name} extra is absent by design"))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture
def tmp(tmp_path):
    return tmp_path
