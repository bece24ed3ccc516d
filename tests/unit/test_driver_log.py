"""The sweep's driver.log (sweeper/driver_log.py): the libraries' logging is held until the
sweep's folder exists, then written there; nothing of it reaches the terminal unless
--verbose; on a failure before the folder exists it is shown after all; a record it cannot
write (a full disk, a removed folder) is counted, never a traceback, and said in one line."""

import logging
import os
import warnings

import pytest

from sweeper import driver_log
from sweeper.driver_log import QUIET_ENVIRONMENT, DriverLog


@pytest.fixture
def optuna_at_info():
    """Optuna at its default verbosity (INFO), whatever an earlier test in this process set
    (reading a study's front sets WARNING)."""
    import optuna

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.INFO)
    yield optuna
    optuna.logging.set_verbosity(verbosity)


def test_library_logging_goes_to_the_sweeps_driver_log_not_the_terminal(tmp_path, capsys, optuna_at_info):
    optuna = optuna_at_info
    before = {name: os.environ.get(name) for name in QUIET_ENVIRONMENT}
    with DriverLog():
        logging.getLogger("some.library").warning("a note before the folder exists")
        optuna.logging.get_logger("optuna").info("A new study created in memory with name: x")
        warnings.warn("an old argument", FutureWarning, stacklevel=1)
        driver_log.write_to(tmp_path / "driver.log")
        logging.getLogger("ray.tune").warning("a note after")
        assert all(os.environ[name] == value for name, value in QUIET_ENVIRONMENT.items())
    written = (tmp_path / "driver.log").read_text()
    for text in ("a note before the folder exists", "A new study created", "an old argument", "a note after"):
        assert text in written
    seen = capsys.readouterr()
    assert "note" not in seen.out + seen.err and "study" not in seen.out + seen.err
    assert {name: os.environ.get(name) for name in QUIET_ENVIRONMENT} == before


def test_verbose_shows_it_on_the_terminal_too(tmp_path, capsys):
    with DriverLog(verbose=True):
        driver_log.write_to(tmp_path / "driver.log")
        logging.getLogger("some.library").warning("a warning")
    assert "a warning" in capsys.readouterr().err
    assert "a warning" in (tmp_path / "driver.log").read_text()


def test_a_failure_before_the_folder_exists_shows_what_was_held(capsys):
    with pytest.raises(RuntimeError), DriverLog():
        logging.getLogger("ray").warning("the cluster did not start: port taken")
        raise RuntimeError("no cluster")
    assert "the cluster did not start: port taken" in capsys.readouterr().err


def test_sweep_start_prints_the_forecast_in_one_line_and_logs_its_detail(tmp_path, caplog):
    from rich.console import Console

    from sweeper.plan._command import print_forecast
    from sweeper.plan._forecast import forecast_sweep
    from sweeper.plan._sweep_plan import make_plan
    from tests.unit.test_forecast import CPU_BOX, TIMING, quickstart_like

    plan = make_plan(quickstart_like(), CPU_BOX)
    forecast = forecast_sweep(plan, TIMING)
    console = Console(file=(out := tmp_path / "out.txt").open("w"), width=300)
    with caplog.at_level(logging.INFO, logger="sweeper.plan._command"):
        print_forecast(forecast, plan.spec, console, brief=True)
    console.file.close()
    (line,) = out.read_text().splitlines()
    expected, worst = forecast.expected, forecast.worst
    assert line.startswith(f"Forecast: {expected.wall_seconds:.0f} s, ${expected.usd:.6f} expected (")
    assert f"${worst.usd:.6f} without early stopping" in line and line.endswith(f"({TIMING.source})")
    logged = [record.getMessage() for record in caplog.records]
    assert any(message.startswith("Step budget by rung") for message in logged)
    assert any(message.startswith("Expected:") for message in logged)


def test_what_the_libraries_print_while_the_tiny_model_is_built_goes_to_the_log(tmp_path, capsys, monkeypatch):
    """The first run builds the tiny model in the driver; saving it imports DeepSpeed, whose
    logger prints an accelerator note on stdout as it loads. That note, and any progress
    bar, belong in driver.log; a handler the library made meanwhile still prints later."""
    import sys

    from trainables import models

    made = logging.getLogger("a.library.made.while.building")

    def build(target):
        handler = logging.StreamHandler(sys.stdout)  # as DeepSpeed's logger makes its handler
        made.addHandler(handler)
        made.propagate = False
        made.warning("Setting accelerator to CPU")
        print("Writing model shards: 100%", file=sys.stderr)
        (target / "config.json").parent.mkdir(parents=True)
        (target / "config.json").write_text("{}")

    monkeypatch.setattr(models.tiny, "build", build)
    with DriverLog():
        driver_log.write_to(tmp_path / "driver.log")
        models.resolve_model_source(models.BUILTIN_TINY_MODEL, tmp_path / "cache")
    seen = capsys.readouterr()
    assert seen.out == "" and seen.err == ""
    written = (tmp_path / "driver.log").read_text()
    assert "Setting accelerator to CPU" in written and "Writing model shards" in written
    made.warning("a later note")
    assert "a later note" in capsys.readouterr().out
    made.handlers.clear()


# ---------------------------------------------------------------- a log that cannot be written


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_a_log_file_on_a_full_disk_counts_what_it_could_not_write_without_a_traceback(capsys):
    handler = driver_log.LogFile("/dev/full")  # every write: "No space left on device"
    handler.setFormatter(logging.Formatter(driver_log.FORMAT))
    logger = logging.getLogger("test.full.disk")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        for n in range(3):
            logger.warning("the checkpoint syncer's warning %d", n)
    finally:
        logger.removeHandler(handler)
        handler.close()
    seen = capsys.readouterr()
    assert seen.err == "" and seen.out == ""
    assert handler.unwritten == 3
    assert handler.lost_line() == "note: 3 log record(s) could not be written to /dev/full: No space left on device"


def test_a_removed_sweep_folder_costs_one_line_at_the_end_and_no_traceback(tmp_path, capsys):
    folder = tmp_path / "sweep"
    folder.mkdir()
    with DriverLog():
        logging.getLogger("some.library").warning("held before the folder exists")
        folder.rmdir()  # gone before the log is opened in it (an open file would take writes)
        driver_log.write_to(folder / "driver.log")  # the held record cannot be written
        logging.getLogger("ray.train").warning("after the folder is gone")
    seen = capsys.readouterr()
    assert "Logging error" not in seen.err and "Traceback" not in seen.err
    assert seen.err.splitlines() == [
        f"note: 2 log record(s) could not be written to {folder / 'driver.log'}: No such file or directory"
    ]


def test_a_freed_disk_is_written_to_again(tmp_path, capsys):
    folder = tmp_path / "sweep"
    handler = driver_log.LogFile(folder / "driver.log")
    handler.emit(logging.makeLogRecord({"msg": "lost: the folder is not there"}))
    folder.mkdir()
    handler.emit(logging.makeLogRecord({"msg": "written: it is back"}))
    handler.close()
    assert handler.unwritten == 1 and (folder / "driver.log").read_text() == "written: it is back\n"
    assert capsys.readouterr().err == ""
