"""Faults a long sweep meets, each once with real processes: SIGTERM to the driver, a full
disk, a corrupted sweep state, the tracking server away. Each test asserts the end state a
user relies on: the line printed, the exit status, every trial finished once in MLflow and
no run left RUNNING."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import small_sweep, wait_for, write_yaml
from tests.integration.conftest import run_cli, start_driver, sweep_runs
from tests.ports import free_port

pytestmark = [pytest.mark.integration]

# These tests assert a fault's end state, not the losses. Where it measured shorter, their
# trials evaluate on 32 of the eval split's 200 rows (data.eval_samples: the same seeded
# rows every evaluation; all 200 took about as long as 17 training steps).
FEW_EVAL_ROWS = {"eval_samples": 32}


def _children(uri: str, name: str):
    try:
        return sweep_runs(uri, name)[1]
    except Exception:  # the store is being created
        return []


def _reported(uri: str, name: str) -> bool:
    return any("eval_loss" in c.data.metrics for c in _children(uri, name))


def _assert_every_trial_ended_once(uri: str, name: str, trials: int) -> None:
    (parent,), children = sweep_runs(uri, name)
    trial_ids = [c.data.tags["sweeper.trial_id"] for c in children]
    assert len(trial_ids) == len(set(trial_ids)) == trials, trial_ids
    assert all(r.info.status != "RUNNING" for r in [parent, *children])
    assert parent.info.status == "FINISHED"
    assert {c.data.tags["sweeper.state"] for c in children} <= {"completed", "pruned"}


def test_sigterm_stops_start_and_resume_a_corrupted_state_is_said_and_a_broken_checkpoint_restarts_its_trial(tmp_path):
    """One 4-trial sweep: `start` and then `resume` stopped with SIGTERM as SIGINT stops them
    (exit 143, the resume line, no run left RUNNING); Tune's state cut in half refused
    before anything starts; a stopped trial's adapter truncated to 0 bytes restarted from
    step 0, said and tagged; the last resume finishes every trial once."""
    name, trials = "sigterm", 4
    raw = small_sweep(name, data=FEW_EVAL_ROWS, search={"num_trials": trials, "seed": 6},
                      training={"max_steps": 40, "eval_every": 10},
                      early_stopping={"scheduler": "none"})
    path = write_yaml(tmp_path / f"{name}.yaml", raw)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    # 1. SIGTERM once a new checkpoint is written, in `start` and in `resume`.
    folder = tmp_path / "sweeps" / name
    for command in (("start", str(path)), ("resume", name)):
        checkpoints = _Checkpoints(folder)
        driver = start_driver(*command, cwd=tmp_path)
        wait_for(lambda: checkpoints.new() or driver.poll() is not None, 600, "a report", every=0.2)
        driver.send_signal(signal.SIGTERM)
        out, _ = driver.communicate(timeout=180)
        print(out)
        assert driver.returncode == 143, out
        assert f"Sweep stopped; continue it with: sweep resume {name}" in out
        assert "Traceback" not in out, out
        (parent,), children = sweep_runs(uri, name)
        assert parent.info.status == "KILLED" and parent.data.tags["sweeper.status"] == "stopped"
        assert all(c.info.status != "RUNNING" for c in children)

    # 2. Tune's experiment state cut in half: one line naming it, nothing started.
    tune = folder / "tune"
    (state,) = sorted(tune.glob("experiment_state-*.json"))[-1:]
    whole = state.read_bytes()
    state.write_bytes(whole[: len(whole) // 2])
    result = run_cli("resume", name, cwd=tmp_path, timeout=300)
    print(result.stdout, result.stderr)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"error: NAME: Tune's state {state} is unreadable (not JSON" in " ".join(result.stderr.split())
    assert "Traceback" not in result.stdout + result.stderr
    assert "Ray dashboard" not in result.stdout  # refused before the cluster started
    state.write_bytes(whole)

    # 3. A stopped trial's adapter truncated to 0 bytes: it starts again from step 0, said and tagged.
    _, children = sweep_runs(uri, name)
    trials_folder = folder / "trials"

    def adapters(child):
        return sorted((trials_folder / child.data.tags["sweeper.trial_id"]).glob("checkpoint_*/adapter_model.safetensors"))

    stopped = [c for c in children if c.data.tags["sweeper.state"] == "stopped" and adapters(c)]
    assert stopped, [c.data.tags for c in children]
    victim = stopped[0]
    adapters(victim)[-1].write_bytes(b"")
    result = run_cli("resume", name, cwd=tmp_path, timeout=900)
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr
    flat = " ".join(result.stdout.split())
    number = victim.data.tags["sweeper.trial_number"]
    assert f"note: trial {number}: its checkpoint " in flat and "it starts again from step 0" in flat, result.stdout
    assert f"Sweep '{name}' finished in" in flat and "Sweep stopped" not in flat
    _assert_every_trial_ended_once(uri, name, trials)
    (_,), children = sweep_runs(uri, name)
    again = next(c for c in children if c.info.run_id == victim.info.run_id)
    assert again.data.tags["sweeper.restarted"].startswith("from step 0: checkpoint unreadable")
    assert again.data.tags["sweeper.state"] == "completed" and again.data.metrics["steps_trained"] == 40


@contextlib.contextmanager
def _small_file_system(folder: Path, size: str):
    """A tmpfs of `size` mounted at `folder` (root only: skipped elsewhere)."""
    folder.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(folder: Path) -> Path:
    """Write into `folder` until its file system is full, as another program would."""
    filler = folder / "filler"
    with contextlib.suppress(OSError), filler.open("wb", buffering=0) as file:
        while True:
            file.write(b"\0" * 65536)
    return filler


def test_a_sweep_that_cannot_fit_its_disk_is_refused_before_it_starts(tmp_path):
    with _small_file_system(tmp_path / "small", "2m") as small:
        raw = small_sweep("tight", output_dir=str(small / "tight"))
        result = run_cli("start", str(write_yaml(tmp_path / "tight.yaml", raw)), cwd=tmp_path, timeout=300)
        assert result.returncode == 2, result.stdout + result.stderr
        flat = " ".join(result.stderr.split())
        assert f"error: output_dir: {small}" in flat and " has 2.0 MiB free" in flat, result.stderr
        assert "free, and the sweep writes up to" in flat
        assert "Traceback" not in result.stdout + result.stderr
        assert not (small / "tight").exists()


def test_a_disk_that_fills_mid_sweep_stops_it_with_a_line_and_resume_finishes_it(tmp_path):
    name, trials = "fills", 4
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with _small_file_system(tmp_path / "disk", "32m") as disk:
        raw = small_sweep(name, output_dir=str(disk / name), search={"num_trials": trials, "seed": 4},
                          training={"max_steps": 40, "eval_every": 10})
        path = write_yaml(tmp_path / f"{name}.yaml", raw)
        driver = start_driver("start", str(path), cwd=tmp_path)
        wait_for(lambda: _reported(uri, name) or driver.poll() is not None, 600, "a report", every=0.5)
        filler = _fill(disk)
        out, _ = driver.communicate(timeout=300)
        print(out)
        flat = " ".join(out.split())
        assert driver.returncode == 1, out
        assert f"error: output_dir: the file system of {disk / name} is full (" in flat, out
        assert f"continue it with: sweep resume {name}" in flat
        # driver.log is on the full disk too: the records it could not write are counted in
        # one note, never printed as logging's tracebacks, and the keyed line is the last word.
        assert "--- Logging error ---" not in out and "Traceback" not in out, out
        lines = [line for line in out.splitlines() if line.strip()]
        last_error = max(i for i, line in enumerate(lines) if line.startswith("error: output_dir:"))
        assert not [line for line in lines[last_error:] if line.startswith(("note:", "warning:"))], lines[last_error:]
        (parent,), children = sweep_runs(uri, name)
        assert parent.info.status == "KILLED"
        assert all(c.info.status != "RUNNING" for c in children)
        assert not any(c.data.tags["sweeper.state"] == "failed" for c in children), [c.data.tags for c in children]

        filler.unlink()
        result = run_cli("resume", name, "--sweep-dir", str(disk / name), cwd=tmp_path, timeout=900)
        if result.returncode == 2 and "Tune's state" in result.stderr:
            # The disk filled while Tune wrote its state (a moment the filler cannot pick):
            # resume said so in its keyed line, and the rebuild it names finishes the sweep
            # from MLflow and the study.
            assert f"sweep resume {name} --rebuild" in " ".join(result.stderr.split()), result.stderr
            result = run_cli("resume", name, "--rebuild", "--sweep-dir", str(disk / name), cwd=tmp_path, timeout=900)
        assert result.returncode == 0, result.stdout + result.stderr
        _assert_every_trial_ended_once(uri, name, trials)


class _MlflowServer:
    """`mlflow server` on loopback over a SQLite store in `folder`, killed (-9, with its
    workers) and started again on the same port and store."""

    def __init__(self, folder: Path):
        self.folder, self.port, self.process = folder, free_port(), None
        self.uri = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        from mlflow.tracking import MlflowClient

        self.process = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port),
             "--backend-store-uri", f"sqlite:///{self.folder / 'server.db'}",
             "--artifacts-destination", str(self.folder / "server-artifacts"), "--workers", "1"],
            cwd=self.folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        wait_for(lambda: _answers(MlflowClient(self.uri)), 120, "the mlflow server", every=0.5)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)


def _answers(client) -> bool:
    try:
        client.search_experiments()
        return True
    except Exception:
        return False


def _server_runs(uri: str, name: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("sweeper")
    runs = client.search_runs([experiment.experiment_id], filter_string=f"tags.`sweeper.sweep_name` = '{name}'")
    return ([r for r in runs if r.data.tags["sweeper.kind"] == "sweep"], [r for r in runs if r.data.tags["sweeper.kind"] == "trial"])


class _Checkpoints:
    """The Train checkpoints that have appeared in a sweep folder since this was made (a
    trial writes one with each report, and keeps only its latest: names are collected)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.before = self._now()
        self.seen: set[str] = set()

    def _now(self) -> set[str]:
        return {str(p) for p in self.folder.glob("trials/*/checkpoint_*")}

    def new(self) -> int:
        self.seen |= self._now() - self.before
        return len(self.seen)


def _assert_served_trials_ended_once(uri: str, name: str, trials: int) -> None:
    (parent,), children = _server_runs(uri, name)
    assert len({c.data.tags["sweeper.trial_id"] for c in children}) == len(children) == trials
    assert all(r.info.status != "RUNNING" for r in [parent, *children])
    assert parent.info.status == "FINISHED"
    assert {c.data.tags["sweeper.state"] for c in children} <= {"completed", "pruned"}
    for child in children:  # every evaluation it made is in its run, once
        assert "eval_loss" in child.data.metrics and "steps_trained" in child.data.metrics


@pytest.mark.fresh_store
def test_the_tracking_server_away_for_a_while_loses_nothing_and_the_summary_says_so(tmp_path):
    """A sweep logged to `mlflow server` over HTTP (its runs, and its files as the server's
    artifacts, nothing in a local store), with the server killed -9 mid-sweep and started
    again a while later."""
    name, trials = "away", 3
    server = _MlflowServer(tmp_path)
    server.start()
    try:
        raw = small_sweep(name, search={"num_trials": trials, "seed": 7}, training={"max_steps": 200, "eval_every": 20},
                          early_stopping={"scheduler": "none"}, tracking={"uri": server.uri})
        driver = start_driver("start", str(write_yaml(tmp_path / f"{name}.yaml", raw)), cwd=tmp_path)
        wait_for(lambda: _reported_to(server.uri, name) or driver.poll() is not None, 600, "a report", every=0.5)
        server.kill()
        folder = tmp_path / "sweeps" / name
        checkpoints = _Checkpoints(folder)
        wait_for(lambda: checkpoints.new() >= 2 or driver.poll() is not None, 300, "training while away", every=0.2)
        assert driver.poll() is None  # training went on
        server.start()
        out, _ = driver.communicate(timeout=600)
        print(out)
        assert driver.returncode == 0, out
        flat = " ".join(out.split())
        assert f"MLflow server {server.uri} away for " in flat, out
        assert "were kept here and logged once it was back: nothing lost" in flat
        assert not (folder / "tracking_backlog.pkl").exists()
        _assert_served_trials_ended_once(server.uri, name, trials)
        (parent,), _ = _server_runs(server.uri, name)
        # sweep.yaml and best_config.yaml went to the server's artifacts; no local store.
        from mlflow.tracking import MlflowClient

        artifacts = {a.path for a in MlflowClient(server.uri).list_artifacts(parent.info.run_id)}
        assert artifacts >= {"sweep.yaml", "best_config.yaml"}, artifacts
        assert not (tmp_path / "mlflow.db").exists()
    finally:
        server.kill()


def test_a_tracking_server_that_does_not_come_back_stops_the_sweep_resumable(tmp_path):
    name, trials = "gone", 3
    server = _MlflowServer(tmp_path)
    server.start()
    try:
        # Trials long enough (200 steps) to outlast the limit (2 s from the first write that
        # found the server gone, after MLflow's retries) once the server is gone.
        raw = small_sweep(name, data=FEW_EVAL_ROWS, search={"num_trials": trials, "seed": 8},
                          training={"max_steps": 200, "eval_every": 20},
                          early_stopping={"scheduler": "none"}, tracking={"uri": server.uri, "away_limit_s": 2})
        driver = start_driver("start", str(write_yaml(tmp_path / f"{name}.yaml", raw)), cwd=tmp_path)
        wait_for(lambda: _reported_to(server.uri, name) or driver.poll() is not None, 600, "a report", every=0.5)
        server.kill()
        out, _ = driver.communicate(timeout=600)
        print(out)
        flat = " ".join(out.split())
        assert driver.returncode == 1, out
        assert f"error: tracking.uri: the MLflow server at {server.uri} has not answered for " in flat, out
        assert f"Once the server answers, continue it with: sweep resume {name}" in flat
        assert (tmp_path / "sweeps" / name / "tracking_backlog.pkl").is_file()

        server.start()
        result = run_cli("resume", name, cwd=tmp_path, timeout=900)
        assert result.returncode == 0, result.stdout + result.stderr
        assert not (tmp_path / "sweeps" / name / "tracking_backlog.pkl").exists()
        _assert_served_trials_ended_once(server.uri, name, trials)
    finally:
        server.kill()


def _reported_to(uri: str, name: str) -> bool:
    try:
        return any("eval_loss" in c.data.metrics for c in _server_runs(uri, name)[1])
    except Exception:
        return False


def test_a_sweep_whose_tune_state_is_gone_is_rebuilt_from_mlflow_and_the_study(tmp_path):
    name, trials = "rebuilt", 4
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    raw = small_sweep(name, search={"num_trials": trials, "seed": 9}, training={"max_steps": 30, "eval_every": 10},
                      early_stopping={"scheduler": "none"})
    driver = start_driver("start", str(write_yaml(tmp_path / f"{name}.yaml", raw)), cwd=tmp_path)

    def finished():
        return [c for c in _children(uri, name) if c.data.tags.get("sweeper.state") in ("completed", "pruned")]

    wait_for(lambda: finished() or driver.poll() is not None, 600, "a finished trial", every=0.5)
    driver.send_signal(signal.SIGINT)
    assert driver.wait(timeout=180) == 130
    kept = {c.data.tags["sweeper.trial_id"]: c.data.metrics["eval_loss"] for c in finished()}
    assert 0 < len(kept) < trials
    tune = tmp_path / "sweeps" / name / "tune"
    for state in tune.glob("experiment_state-*.json"):
        state.write_text("")

    refused = run_cli("resume", name, cwd=tmp_path, timeout=300)
    assert refused.returncode == 2 and f"sweep resume {name} --rebuild" in " ".join(refused.stderr.split())
    result = run_cli("resume", name, "--rebuild", cwd=tmp_path, timeout=900)
    print(result.stdout, result.stderr)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Rebuilt from MLflow and the Optuna study: {len(kept)} finished trial(s) kept" in " ".join(result.stdout.split())
    _assert_every_trial_ended_once(uri, name, trials)
    final = {c.data.tags["sweeper.trial_id"]: c for c in sweep_runs(uri, name)[1]}
    for trial_id, eval_loss in kept.items():
        assert final[trial_id].data.metrics["eval_loss"] == eval_loss
