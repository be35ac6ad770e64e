from __future__ import annotations

import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture
def tmp(tmp_path):
    return tmp_path
