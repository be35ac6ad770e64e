"""The extras ``setup.cfg`` declares are the rows of :data:`hsdiff.extras.EXTRAS`, and the core is three
packages."""

from __future__ import annotations

import configparser
import re
import sys
from pathlib import Path

import pytest

from hsdiff.errors import HsdiffError, MissingExtraError
from hsdiff.extras import EXTRAS, needs, require

pytestmark = pytest.mark.core

ROOT = Path(__file__).resolve().parent.parent


def _setup_cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "setup.cfg")
    return cfg


def _lines(value: str) -> tuple[str, ...]:
    return tuple(line.strip() for line in value.splitlines() if line.strip() and not line.strip().startswith("#"))


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~ ]", requirement, maxsplit=1)[0]


def test_the_core_is_numpy_safetensors_and_click():
    """(and tomli on Python 3.10 alone, where the standard library has no tomllib)"""
    required = _lines(_setup_cfg()["options"]["install_requires"])
    assert sorted(_name(r) for r in required if "python_version" not in r) == ["click", "numpy", "safetensors"]
    assert [r for r in required if "python_version" in r] == ['tomli>=1.1; python_version < "3.11"']


def test_setup_cfg_declares_every_extra_of_the_table_and_all_is_their_union():
    declared = {k: _lines(v) for k, v in _setup_cfg()["options.extras_require"].items()}
    for name, extra in EXTRAS.items():
        assert declared[name] == extra.requirements, name
    union = {r for e in EXTRAS.values() for r in e.requirements}
    assert sorted(declared["all"]) == sorted(union)
    assert set(declared) - set(EXTRAS) == {"all", "fixtures", "test", "dev", "docs"}


def test_the_dev_venv_installs_every_extra():
    assert re.search(r"-e '\.\[all,test,dev,fixtures\]'", (ROOT / "Makefile").read_text())


def test_a_missing_package_is_an_hsdiff_error_naming_the_extra(monkeypatch):
    for name in [m for m in sys.modules if m.split(".")[0] == "matplotlib"] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed, even where another test imported it
    with pytest.raises(MissingExtraError) as e:
        require("matplotlib.pyplot", "plot", "the pictures")
    assert isinstance(e.value, HsdiffError)
    assert (e.value.package, e.value.extra) == ("matplotlib", "plot")
    assert str(e.value) == "matplotlib is needed for the pictures and is not installed — pip install 'hsdiff[plot]'"


def test_a_broken_install_is_not_read_as_a_missing_extra():
    with pytest.raises(ModuleNotFoundError, match="no_such_helper"), needs("plot", "the pictures"):
        import no_such_helper  # noqa: F401 - a package of no extra: raised as it is


def test_the_error_survives_a_worker_process():
    import pickle

    e = MissingExtraError("an audit", "dask", "audit", path="x.pt", alternative="use --workers 0")
    back = pickle.loads(pickle.dumps(e))
    assert (type(back), str(back), back.extra) == (MissingExtraError, str(e), "audit")
