"""Faults a long sweep meets, the pieces that need no Ray: SIGTERM stops as SIGINT does,
the exit status and the summary say what happened."""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import pytest
import typer

from sweeper.cli._common import finish_run
from sweeper.names import TrialState
from sweeper.run._driver import sigterm_stops_like_sigint
from sweeper.track._book import SweepBook, TrialRecord


def test_sigterm_calls_the_sigint_handler_while_the_tuner_runs_and_is_put_back_after():
    calls = []
    before_sigint = signal.signal(signal.SIGINT, lambda signum, frame: calls.append(signum))
    before_sigterm = signal.getsignal(signal.SIGTERM)
    received: list[int] = []
    try:
        with sigterm_stops_like_sigint(received):
            os.kill(os.getpid(), signal.SIGTERM)
        assert calls == [signal.SIGINT]  # Tune's handler, as for Ctrl-C
        assert received == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is before_sigterm
    finally:
        signal.signal(signal.SIGINT, before_sigint)


def test_a_second_sigterm_after_tunes_handler_is_gone_interrupts_as_a_second_ctrl_c():
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), sigterm_stops_like_sigint([]):
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGINT, before)


def _run(states: list[TrialState], *, interrupted: bool, stop_signal=signal.SIGINT):
    book = SweepBook(metric="eval_loss", goal="minimize", max_steps=10)
    for number, state in enumerate(states):
        record = TrialRecord(trial_id=f"t{number}", number=number, params={"lr": 0.1})
        record.state = state
        if state == TrialState.COMPLETED:
            record.history.append({"step": 10, "eval_loss": 1.0})
        book.trials[record.trial_id] = record
    spec = SimpleNamespace(name="s", resources=SimpleNamespace(use_gpu=False),
                           tracking=SimpleNamespace(experiment="e"), sweep_dir="sweeps/s")
    cost = SimpleNamespace(usd=0.0, accelerator_hours=0.0, tokens=0, usd_per_million_tokens=0, saved_by_pruning_usd=0.0)
    return SimpleNamespace(spec=spec, book=book, interrupted=interrupted, stop_signal=stop_signal, stopped_for=None,
                           wall_seconds=3.0,
                           cost=cost, notes=[], tracking_uri="sqlite:///m.db")


@pytest.mark.parametrize(("stop_signal", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stopped_sweep_says_stopped_not_finished_and_exits_128_plus_the_signal(stop_signal, status, capsys):
    run = _run([TrialState.COMPLETED, TrialState.STOPPED], interrupted=True, stop_signal=stop_signal)
    with pytest.raises(typer.Exit) as done:
        finish_run(run)
    out = " ".join(capsys.readouterr().out.split())  # as one line, whatever the terminal's width
    assert done.value.exit_code == status
    assert "Sweep 's' stopped after 3 s: 2 trials, 1 completed, 0 pruned, 0 failed, 1 unfinished" in out
    assert "finished" not in out.replace("unfinished", "")
    assert "Sweep stopped; continue it with: sweep resume s" in out


def test_a_finished_sweep_says_finished(capsys):
    finish_run(_run([TrialState.COMPLETED], interrupted=False))
    assert "Sweep 's' finished in 3 s: 1 trials, 1 completed" in capsys.readouterr().out


# ---------------------------------------------------------------- a full disk


class _Wrapper(Exception):
    """As Ray's WorkerGroupError: the workers' errors by rank."""

    def __init__(self, failures):
        super().__init__("Training failed on a worker")
        self.worker_failures = failures


def test_a_full_disk_is_seen_through_rays_wrappers_and_in_sqlites_words():
    import errno
    import sqlite3

    from sweeper.cluster.storage import disk_full

    assert disk_full(_Wrapper({0: OSError(errno.ENOSPC, "No space left on device")}))
    assert disk_full(sqlite3.OperationalError("database or disk is full"))
    try:
        try:
            raise OSError(errno.ENOSPC, "no room")
        except OSError as inner:
            raise RuntimeError("checkpoint failed") from inner
    except RuntimeError as outer:
        assert disk_full(outer)
    assert not disk_full(_Wrapper({0: ValueError("loss is nan at step 15")}))
    assert not disk_full(None)


def test_the_disk_full_line_names_the_folder_what_is_free_and_the_resume(tmp_path):
    from sweeper.cluster.storage import disk_full_line

    line = disk_full_line(tmp_path / "sweeps" / "s", "s")
    assert line.startswith(f"output_dir: the file system of {tmp_path / 'sweeps' / 's'} is full (")
    assert " free)" in line and line.endswith("continue it with: sweep resume s")


def test_a_sweep_that_cannot_fit_its_folders_disk_is_refused_with_a_keyed_line(tmp_path, monkeypatch):
    from sweeper.cluster import storage
    from sweeper.cost._disk import check_room_for, sweep_disk_need
    from sweeper.errors import UserError
    from sweeper.spec._load import load_spec
    from tests.conftest import small_sweep, write_yaml

    spec = load_spec(write_yaml(tmp_path / "d.yaml", small_sweep("d", output_dir=str(tmp_path / "sweeps" / "d"))))
    needed, checkpoints = sweep_disk_need(spec, 2)
    assert checkpoints == 2 * 2 + spec.search.keep_best_adapters
    monkeypatch.setattr(storage, "free_bytes", lambda folder: needed - 1)
    with pytest.raises(UserError, match=r"^output_dir: .* free, and the sweep writes up to .*keep_best_adapters$"):
        check_room_for(spec, 2)
    monkeypatch.setattr(storage, "free_bytes", lambda folder: needed)
    check_room_for(spec, 2)


# ---------------------------------------------------------------- a corrupted sweep state


def _checkpoint(folder, adapter: bytes | None = None):
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    save_file({"w": torch.zeros(4, 4)}, str(folder / "adapter_model.safetensors"))
    if adapter is not None:
        (folder / "adapter_model.safetensors").write_bytes(adapter)
    torch.save({"step": 10}, folder / "training_state.pt")
    (folder / "report.json").write_text('{"step": 10}')


def test_an_unreadable_tune_state_is_one_line_naming_the_file_and_what_to_do(tmp_path):
    import pickle

    from sweeper.errors import UserError
    from sweeper.run._sweep_state import check_tune_state

    tune = tmp_path / "tune"
    tune.mkdir()
    (tune / "tuner.pkl").write_bytes(pickle.dumps({"a": 1}))
    (tune / "experiment_state-2026.json").write_text('{"trials": []}')
    check_tune_state(tune, "s")
    (tune / "experiment_state-2026.json").write_text('{"trials": [')
    with pytest.raises(UserError, match=r"^NAME: Tune's state .*experiment_state-2026.json is unreadable \(not JSON"):
        check_tune_state(tune, "s")
    (tune / "experiment_state-2026.json").write_text('{}')
    (tune / "tuner.pkl").write_bytes(pickle.dumps({"a": 1})[:-3])
    with pytest.raises(UserError, match=r"tuner.pkl is unreadable \(not a whole pickle.*sweep resume s --rebuild$"):
        check_tune_state(tune, "s")


@pytest.mark.parametrize("broken", ["empty adapter", "cut adapter", "empty json", "empty training state"])
def test_a_trial_whose_checkpoint_does_not_read_is_found_and_set_aside_to_start_from_step_0(tmp_path, broken):
    from sweeper.run._sweep_state import set_aside, unreadable_checkpoints

    trials = tmp_path / "trials"
    _checkpoint(trials / "good" / "checkpoint_1")
    _checkpoint(trials / "bad" / "checkpoint_1")
    bad = trials / "bad" / "checkpoint_1"
    if broken == "empty adapter":
        (bad / "adapter_model.safetensors").write_bytes(b"")
    elif broken == "cut adapter":
        (bad / "adapter_model.safetensors").write_bytes((bad / "adapter_model.safetensors").read_bytes()[:-5])
    elif broken == "empty json":
        (bad / "report.json").write_text("")
    else:
        (bad / "training_state.pt").write_bytes(b"")
    assert unreadable_checkpoints(trials / "absent") == []
    (found,) = unreadable_checkpoints(trials)
    assert found.trial_id == "bad" and found.path.parent == bad
    assert found.note(3).startswith(f"trial 3: its checkpoint {found.path} is unreadable (")
    assert found.note(3).endswith("it starts again from step 0")
    set_aside(trials, "bad")
    assert not (trials / "bad").exists() and (trials / "bad.unreadable").is_dir()
    assert unreadable_checkpoints(trials) == []


# ---------------------------------------------------------------- the tracking server away


class _Server:
    """An MlflowClient's writes against a server that can be down."""

    def __init__(self):
        self.up, self.calls, self.runs = True, [], 0

    def _call(self, name, *args, **kwargs):
        from mlflow.exceptions import MlflowException

        if not self.up:
            raise MlflowException("API request to http://127.0.0.1:1/api/2.0/mlflow/runs/log-batch failed with "
                                  "exception HTTPConnectionPool: Max retries exceeded (Connection refused)")
        self.calls.append((name, args, kwargs))
        if name == "create_run":
            self.runs += 1
            return SimpleNamespace(info=SimpleNamespace(run_id=f"run{self.runs}"))
        return None

    def __getattr__(self, name):
        return lambda *args, **kwargs: self._call(name, *args, **kwargs)


def test_writes_while_the_server_is_away_are_kept_then_logged_in_order_with_the_runs_real_ids(tmp_path, monkeypatch):
    from sweeper.track import _backlog as backlog

    monkeypatch.setattr(backlog, "PROBE_EVERY_S", 0.0)
    server = _Server()
    client = backlog.DeferringClient(server, tmp_path / backlog.BACKLOG_FILE)
    client.log_batch("parent", metrics=[1])
    server.up = False
    client.log_batch("parent", metrics=[2])
    pending = client.create_run("experiment", run_name="trial-1")
    client.log_batch(pending.info.run_id, metrics=[3])
    assert client.away and (tmp_path / backlog.BACKLOG_FILE).is_file()
    assert len(server.calls) == 1  # the server saw only the write before it went away

    server.up = True
    client.set_terminated(pending.info.run_id, status="FINISHED")  # the next write finds it back
    assert not client.away and not (tmp_path / backlog.BACKLOG_FILE).exists()
    assert [(name, args) for name, args, _ in server.calls] == [
        ("log_batch", ("parent",)), ("log_batch", ("parent",)), ("create_run", ("experiment",)),
        ("log_batch", ("run1",)), ("set_terminated", ("run1",)),
    ]
    assert [kwargs.get("metrics") for name, _, kwargs in server.calls if name == "log_batch"] == [[1], [2], [3]]
    (outage,) = client.outages
    assert outage.ended is not None and outage.writes == 3


def test_a_backlog_left_by_a_stopped_driver_is_logged_by_the_next(tmp_path, monkeypatch):
    from sweeper.track import _backlog as backlog

    server = _Server()
    client = backlog.DeferringClient(server, tmp_path / backlog.BACKLOG_FILE)
    server.up = False
    run = client.create_run("experiment")
    client.log_batch(run.info.run_id, metrics=[5])
    assert backlog.replay_backlog(_Server(), tmp_path / "absent.pkl") == 0
    later = _Server()
    assert backlog.replay_backlog(later, tmp_path / backlog.BACKLOG_FILE) == 2
    assert [(name, args) for name, args, _ in later.calls] == [("create_run", ("experiment",)), ("log_batch", ("run1",))]
    assert not (tmp_path / backlog.BACKLOG_FILE).exists()


def test_other_mlflow_errors_are_not_an_outage(tmp_path):
    from mlflow.exceptions import MlflowException

    from sweeper.track import _backlog as backlog

    class Refusing:
        def log_batch(self, *args, **kwargs):
            raise MlflowException("INVALID_PARAMETER_VALUE: metric value is not a number")

    client = backlog.DeferringClient(Refusing(), tmp_path / backlog.BACKLOG_FILE)
    with pytest.raises(MlflowException, match="INVALID_PARAMETER_VALUE"):
        client.log_batch("run", metrics=[1])
    assert not client.outages


def test_tunes_traceback_of_a_full_disk_is_dropped_and_other_errors_keep_theirs(caplog):
    import errno
    import logging

    from sweeper.run._driver import disk_full_said_once

    logger = logging.getLogger("ray.tune.execution.tune_controller")
    with caplog.at_level(logging.ERROR), disk_full_said_once():
        for error in (OSError(errno.ENOSPC, "No space left on device"), ValueError("loss is nan at step 15")):
            try:
                raise error
            except Exception:
                logger.exception("Trial task failed for trial sweep-t-trial-1")
    assert [record.exc_info[1].__class__ for record in caplog.records] == [ValueError]
    assert not logger.filters  # only while the tuner runs


def test_a_submitted_sweeps_driver_is_given_time_to_stop_on_sigterm(monkeypatch, tmp_path):
    from sweeper.cluster import jobs

    submitted = {}

    class Jobs:
        def submit_job(self, **kwargs):
            submitted.update(kwargs)
            return kwargs["submission_id"]

        def get_address(self):
            return "http://head:8265"

    monkeypatch.setattr(jobs, "client", lambda address: Jobs())
    jobs.submit("s", (None, "s3://b/s"), "start", ["s.yaml"], "http://head:8265", tmp_path)
    # Ray's job supervisor sends SIGTERM, then SIGKILL after this many seconds (3 by default).
    assert int(submitted["runtime_env"]["env_vars"]["RAY_JOB_STOP_WAIT_TIME_S"]) >= 60


def test_an_unreadable_study_is_one_line_pointing_at_tunes_copy(tmp_path):
    import sqlite3

    from sweeper.errors import UserError
    from sweeper.run._sweep_state import check_study

    study, tune = tmp_path / "optuna.db", tmp_path / "tune"
    tune.mkdir()
    with sqlite3.connect(study) as connection:
        connection.execute("create table t (x)")
        connection.executemany("insert into t values (?)", [("x" * 500,)] * 200)
    check_study(study, tune, "s")
    (tune / "optuna.db").write_bytes(study.read_bytes())
    study.write_bytes(b"not a database at all" * 100)
    with pytest.raises(UserError, match=r"^NAME: the sweep's Optuna study .*optuna.db is unreadable \(.*\); copy Tune's copy"):
        check_study(study, tune, "s")
