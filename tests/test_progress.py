"""Feedback on the steps that take time: a bar with the rate and the time left on a terminal, nothing extra
when piped or with ``-q``; ``--debug``, ``-v`` and ``-q`` after the command as before it; the libraries' INFO
lines kept out of a normal run.

The comparison's steps run here on the seed fixture; the audit's, the ``--draft`` replay's and ``capture``'s
in their own test files (tests/audit/test_audit.py, tests/draft/test_predict.py, tests/test_capture.py), on
the fixtures built there.
"""

from __future__ import annotations

import pytest

from . import ptyrun as P

pytestmark = pytest.mark.core

SEED = "fixtures/seed"
ROOT_SEED = P.ROOT / SEED
WRONG = ["compare", f"{SEED}/train", f"{SEED}/infer-wrong", "--layer-ids=-1,2,30"]
#: The CLI with tqdm absent, as in the core install (``pip install hsdiff``).
NO_TQDM = "import sys; sys.modules['tqdm'] = None; from hsdiff.cli import main; main(sys.argv[1:])"


@pytest.mark.extra("draft")  # tqdm comes with the extras that have long steps
def test_compare_draws_its_steps_on_a_terminal_and_nothing_when_piped():
    rc, shown = P.on_tty(WRONG)
    assert rc == 1 and "verdict: MISMATCH" in shown
    assert {"reading training files", "reading inference files", "scoring pairs"} <= P.bars(shown)
    assert P.RATE_ETA.search(shown), shown[:2000]
    r = P.piped(WRONG)
    assert r.returncode == 1 and "verdict: MISMATCH" in r.stdout
    assert r.stderr == "" and "\r" not in r.stdout  # not one character more than the report


def test_without_tqdm_the_progress_is_a_plain_line_with_rate_and_time_left():
    rc, shown = P.on_tty(WRONG, code=NO_TQDM)
    assert rc == 1 and "verdict: MISMATCH" in shown
    assert {"reading training files", "reading inference files"} <= {m.group("what") for m in P.LINE.finditer(shown)}
    assert not P.bars(shown)


@pytest.mark.parametrize("where", ["before", "after"])
def test_quiet_before_or_after_the_command_draws_no_bar(where):
    args = ["-q", *WRONG] if where == "before" else [*WRONG, "-q"]
    rc, shown = P.on_tty(args, code=NO_TQDM)
    assert rc == 1 and "verdict: MISMATCH" in shown
    assert "hsdiff reading" not in shown and "\r" not in shown.replace("\r\n", "\n")


def test_debug_and_verbose_are_accepted_after_the_command():
    """The internal-error message says "rerun with --debug": that works wherever the flag is put."""
    level = (
        "import atexit, logging, sys\n"
        "atexit.register(lambda: print('log level', logging.getLogger().level, file=sys.stderr))\n"
        "from hsdiff.cli import main\nmain(sys.argv[1:])\n"
    )
    for flags, wanted in ((["--debug"], 10), (["-v"], 20), (["--verbose"], 20), ([], 30)):
        for args in ([*WRONG, *flags], [*flags, *WRONG]):
            r = P.piped(args, code=level)
            assert r.returncode == 1 and "verdict: MISMATCH" in r.stdout, (args, r.stderr)
            assert r.stderr.strip().splitlines()[-1] == f"log level {wanted}", (args, r.stderr)


def test_the_libraries_info_lines_show_only_with_debug():
    code = (
        "import logging, sys\n"
        "from hsdiff.cli import _group\n"
        "_group.configure_logging({'debug': '--debug' in sys.argv, 'verbose': '-v' in sys.argv})\n"
        "for name in ('distributed.scheduler', 'distributed.nanny', 'tornado.access', 'hsdiff.audit'):\n"
        "    logging.getLogger(name).info('%s started', name)\n"
        "logging.getLogger('distributed.worker').warning('worker lost')\n"
    )
    import subprocess
    import sys

    def stderr(*flags: str) -> list[str]:
        out = subprocess.run([sys.executable, "-c", code, *flags], capture_output=True, text=True, cwd=P.ROOT)
        return out.stderr.splitlines()

    assert stderr() == ["hsdiff: worker lost"]
    assert stderr("-v") == ["hsdiff: hsdiff.audit started", "hsdiff: worker lost"]
    assert len(stderr("--debug")) == 5


def test_an_error_mid_step_is_printed_on_a_line_of_its_own(tmp_path):
    import shutil

    dump = tmp_path / "infer"
    shutil.copytree(ROOT_SEED / "infer-wrong", dump)
    aux = next(dump.rglob("*name=aux_hidden_states*.pt"))
    aux.write_bytes(aux.read_bytes()[: aux.stat().st_size // 2])  # a copy cut short: exit 2 while reading
    rc, shown = P.on_tty(["compare", f"{SEED}/train", str(dump), "--layer-ids=-1,2,30"])
    assert rc == 2 and "hsdiff reading inference files" in shown
    before = shown.split("hsdiff: error: ")[0]
    assert before.rsplit("\r", 1)[-1].strip() == ""  # the bar was cleared first, not left in front of the error
