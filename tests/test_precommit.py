"""The pre-commit hook (.pre-commit-hooks.yaml), run by the real pre-commit: ``pre-commit try-repo`` on a
temporary repository holding a draft config, as a user's repository would.

pre-commit installs hsdiff from this checkout into a hook environment of its own (a pip install: about a
minute, once for both cases). Without pre-commit (the `test` extra brings it) the test is skipped, except
under ``CI=true``, where a missing tool is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "fixtures" / "seed"


def _pre_commit() -> list[str]:
    try:
        import pre_commit  # noqa: F401
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("pre-commit is not installed, and CI must run this test (pip install -e '.[test]')")
        pytest.skip("pre-commit is not installed (pip install -e '.[test]')")
    return [sys.executable, "-m", "pre_commit"]


@pytest.fixture(scope="module")
def try_repo(tmp_path_factory):
    pre_commit = _pre_commit()
    home = tmp_path_factory.mktemp("pre-commit-home")  # the hook's environment, built once

    def run(config: Path, name: str = "draft/config.json") -> subprocess.CompletedProcess:
        repo = tmp_path_factory.mktemp("user-repo")
        env = {**os.environ, "PRE_COMMIT_HOME": str(home), "HSDIFF_NO_C": "1", "GIT_CONFIG_NOSYSTEM": "1"}
        env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t")
        env.update(GIT_COMMITTER_EMAIL="t@example.com")
        subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(config, repo / name)
        shutil.copy(SEED / "model" / "config.json", repo / "config.json")  # a target's config: passed over
        subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
        return subprocess.run(
            [*pre_commit, "try-repo", str(ROOT), "hsdiff-check-config", "--all-files", "--color", "never"],
            cwd=repo, env=env, capture_output=True, text=True, timeout=1200,
        )  # fmt: skip

    return run


def test_the_incident_config_fails_the_commit_with_one_line_saying_why(try_repo):
    r = try_repo(SEED / "draft-wrong" / "config.json")
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("draft/config.json: ")]
    assert len(lines) == 1 and lines[0].startswith("draft/config.json: FAIL — ids-embeddings: id -1"), r.stdout
    assert "config.json: " not in r.stdout.replace("draft/config.json: ", "")  # the target's config passed over


def test_the_fixed_config_passes(try_repo):
    r = try_repo(SEED / "draft-fixed" / "config.json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Passed" in r.stdout
