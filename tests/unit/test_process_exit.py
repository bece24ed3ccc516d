"""The `sweep` process ends without Python's teardown (sweeper/cli/_process_exit.py): what
the normal exit does must still happen, in the same order, with the same status."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from sweeper.cli._process_exit import exit_status

SCRIPT = textwrap.dedent(
    """
    import atexit, sys, threading, time
    from pathlib import Path
    from sweeper.cli._process_exit import exit_process

    events = Path(sys.argv[1])

    def note(what):
        with events.open("a") as file:
            file.write(what + "\\n")

    atexit.register(note, "registered first, runs last")
    atexit.register(note, "registered last, runs first")

    def late_worker():
        time.sleep(0.3)
        note("non-daemon thread finished")

    threading.Thread(target=late_worker).start()
    sys.stdout.write("buffered output without a newline")
    exit_process(3)
    """
)


def test_exit_runs_what_a_normal_exit_runs_in_its_order_and_keeps_the_status(tmp_path):
    events = tmp_path / "events.txt"
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(events)], capture_output=True, text=True, timeout=60)

    assert done.returncode == 3, done.stderr
    assert done.stdout == "buffered output without a newline"
    assert events.read_text().splitlines() == [
        "non-daemon thread finished", "registered last, runs first", "registered first, runs last",
    ]


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (2, 2), ("a message", 1)])
def test_exit_status_is_the_one_python_gives_system_exit(code, status, capsys):
    assert exit_status(code) == status
    assert capsys.readouterr().err == ("a message\n" if isinstance(code, str) else "")


def test_a_process_not_ended_through_exit_process_gets_pythons_whole_exit(tmp_path):
    script = "import sweeper.cli._process_exit\nraise RuntimeError('a bug')\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)

    assert done.returncode == 1
    assert "RuntimeError: a bug" in done.stderr
