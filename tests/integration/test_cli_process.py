"""The test harness that forks `sweep` commands from one process (cli_process.py): a forked
command must be what the tests take it for, a process of its own with the exit status,
streams and signals a new interpreter would have."""

from __future__ import annotations

import os
import signal

import pytest

from tests.conftest import small_sweep, write_yaml
from tests.integration import cli_process
from tests.integration.conftest import CLI_ENV

pytestmark = pytest.mark.integration


@pytest.fixture
def zygote(cli_zygote):
    if cli_zygote is None:
        pytest.skip("SWEEPER_TESTS_FORK=0: every command is a new interpreter")
    return cli_process.ready_zygote(120)


def test_a_forked_command_has_the_status_and_streams_of_a_new_interpreter(zygote, tmp_path):
    env = {**os.environ, **CLI_ENV}
    before = dict(cli_process.COMMANDS)
    listed = cli_process.run(["list"], cwd=tmp_path, env=env, timeout=60)
    missing = cli_process.run(["start", "missing.yaml"], cwd=tmp_path, env=env, timeout=60)
    assert cli_process.COMMANDS["forked"] == before["forked"] + 2
    assert (listed.returncode, listed.stderr) == (0, "")
    assert listed.stdout.splitlines()[0].rstrip() == "Sweeps" and len(listed.stdout.splitlines()[1]) < 200
    assert (missing.returncode, missing.stdout) == (2, "")
    assert missing.stderr == "error: missing.yaml: no such file; give the path of a sweep YAML file\n"


def test_a_forked_driver_is_a_session_of_its_own_that_dies_by_kill_9(zygote, tmp_path):
    path = write_yaml(tmp_path / "k.yaml", small_sweep("k", output_dir=str(tmp_path / "sweeps" / "k")))
    driver = cli_process.start(["start", str(path)], cwd=tmp_path, env={**os.environ, **CLI_ENV})
    assert isinstance(driver, cli_process.ForkedCommand)
    assert os.getsid(driver.pid) == driver.pid  # killpg(driver.pid) ends it and nothing of ours
    os.kill(driver.pid, signal.SIGKILL)
    assert driver.wait(timeout=30) == -signal.SIGKILL
    driver.communicate(timeout=60)


def test_an_environment_a_module_reads_at_import_gets_a_new_interpreter(zygote, tmp_path):
    before = dict(cli_process.COMMANDS)
    shown = cli_process.run(["list"], cwd=tmp_path, env={**os.environ, **CLI_ENV, "RAY_DEDUP_LOGS": "0"}, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert cli_process.COMMANDS["new interpreter"] == before["new interpreter"] + 1
