"""A sweep never waits on what nobody uses (issue 32), on a real token-authenticated Ray
head started here (2 CPUs and one custom `trainer` resource) that the sweeps join with
--address, with the machine loaded by one low-priority CPU-bound process per core:

- every trial's placement group is removed once Tune is done with its trial: a watcher
  joined to the cluster samples the placement-group table (Ray's state) through the
  sweep, and never sees more placed groups than the sweep has trial slots (a pruned or
  paused trial's group kept alive while the next trial's waits to be placed is what hung
  sweeps on busy machines), nor any left at the end;
- a trial whose workers cannot be placed (the `trainer` resource it asks for is held by
  another program after the pre-flight saw it on the cluster) fails within its stated
  bound, with a reason naming what it asked for and what was free; the sweep ends with
  exit 1 and no MLflow run left RUNNING; what the driver's watchdog would write about
  that cluster names the held group and the free resources."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import small_sweep, wait_for, write_yaml
from tests.integration import cli_process
from tests.integration.conftest import NODE_ENV, RAY, end_process_group, sweep_runs, wait_for_port
from tests.ports import free_port

pytestmark = pytest.mark.integration

SLOTS = 2  # the head's CPUs; each trial's one worker takes one

# Joined to the cluster: every 0.1 s, the placement groups that reserve something and
# are placed or waiting to be (Train runs' groups), as one JSON line.
WATCHER = textwrap.dedent(
    """
    import json, sys, time, ray
    from sweeper.cluster._placement import reserving_groups
    ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
    print("WATCHING", flush=True)
    while True:
        groups = {group["placement_group_id"]: group["state"] for group in reserving_groups()}
        print(json.dumps({"t": time.time(), "groups": groups}), flush=True)
        time.sleep(0.1)
    """
)

# Joined to the cluster: holds every `trainer` of the cluster until killed.
HOLDER = textwrap.dedent(
    """
    import sys, time, ray
    from ray.util.placement_group import placement_group
    ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
    group = placement_group([{"trainer": 1}])
    ray.get(group.ready(), timeout=60)
    print("HOLDING", flush=True)
    time.sleep(3600)
    """
)


# Joined to the cluster: the watchdog's lines (sweeper/run/_watchdog.py), one per line.
WAITING = textwrap.dedent(
    """
    import sys, ray
    from sweeper.cluster._placement import waiting_lines
    ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")
    print("\\n".join(waiting_lines()))
    """
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A token head with 2 CPUs and 1 trainer, ended by its pid; yields (address, env)."""
    root = tmp_path_factory.mktemp("never-hang")
    home = root / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS"))}
    env.update(HOME=str(home), **NODE_ENV)
    subprocess.run([RAY, "get-auth-token", "--generate"], env=env, capture_output=True, check=True, timeout=120)
    port = free_port()
    ray_temp = tempfile.mkdtemp(prefix="nhray-", dir="/tmp")  # Unix socket paths must stay short
    with open(root / "head.log", "wb") as log:
        head = subprocess.Popen(
            [RAY, "start", "--head", "--block", "--port", str(port), "--dashboard-port", str(free_port()),
             "--num-cpus", str(SLOTS), "--resources", '{"trainer": 1}', "--temp-dir", ray_temp,
             "--ray-client-server-port", str(free_port()), "--min-worker-port", "0", "--max-worker-port", "0",
             "--dashboard-agent-listen-port", str(free_port())],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        wait_for_port(port, head)
        client_env = {**env, "RAY_AUTH_TOKEN_PATH": str(home / ".ray" / "auth_token"), "COLUMNS": "200"}
        yield f"127.0.0.1:{port}", client_env
    finally:
        end_process_group(head)
        shutil.rmtree(ray_temp, ignore_errors=True)


@contextlib.contextmanager
def joined(script: str, address: str, env: dict, ready: str, out: Path):
    """`script` running joined to the cluster (its output in `out`) once it printed
    `ready`, ended by its pid afterwards."""
    with open(out, "w") as log:
        process = subprocess.Popen([sys.executable, "-c", script, address], env={**env, "RAY_AUTH_MODE": "token"},
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 120
        while ready not in out.read_text():
            assert process.poll() is None and time.time() < deadline, out.read_text()
            time.sleep(0.2)
        yield process
    finally:
        end_process_group(process, grace_s=5)


@contextlib.contextmanager
def loaded_machine():
    """One low-priority CPU-bound process per core, ended by pid."""
    burners = [
        subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", "while 1: pass"]) for _ in range(os.cpu_count() or 2)
    ]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def watched(samples_file: Path) -> list[dict]:
    """The watcher's samples so far (a line it is still writing is left for the next read)."""
    return [json.loads(line) for line in samples_file.read_text().splitlines(keepends=True)
            if line.startswith("{") and line.endswith("\n")]


def start(yaml_path: Path, address: str, env: dict, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    return cli_process.run(["start", str(yaml_path), "--address", address], cwd=cwd, env=env, timeout=timeout)


def test_a_trial_tune_is_done_with_gives_its_cpus_back_before_the_next_is_placed(cluster, tmp_path):
    address, env = cluster
    raw = small_sweep("released", search={"num_trials": 4, "seed": 1}, training={"max_steps": 20, "eval_every": 10},
                      cost={"calibrate": False})
    raw["output_dir"] = str(tmp_path / "sweeps" / "released")
    spec = write_yaml(tmp_path / "released.yaml", raw)
    samples_file = tmp_path / "watch.jsonl"
    with loaded_machine(), joined(WATCHER, address, env, "WATCHING", samples_file):
        done = start(spec, address, env, tmp_path, timeout=240)
        ended = time.time()
        # The watcher's first sample taken after the sweep ended (its last group is removed
        # as the sweep ends, so that sample is the one that must be empty).
        after = wait_for(lambda: [s for s in watched(samples_file) if s["t"] > ended], 120, "a sample after the sweep", every=0.2)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    samples = watched(samples_file)
    during = [s for s in samples if s["groups"]]
    assert during, "the watcher saw no trial's placement group"
    # Tune asks for the next trial's group ahead (PENDING, holding nothing); placed ones hold CPUs.
    most = max(during, key=lambda s: sum(state == "CREATED" for state in s["groups"].values()))
    placed = [group for group, state in most["groups"].items() if state == "CREATED"]
    assert len(placed) <= SLOTS, f"more placed groups than slots at {most['t']}: {most['groups']}"
    assert after[0]["groups"] == {}, f"left at the end: {after[0]['groups']}"
    # The case that hung: trials pruned or paused while others waited to start.
    assert "pruned at step 10" in done.stdout, done.stdout[-3000:]
    assert len({group for s in during for group in s["groups"]}) > SLOTS


def test_a_trial_whose_workers_cannot_be_placed_fails_within_its_bound_saying_why(cluster, tmp_path):
    address, env = cluster
    raw = small_sweep("unplaced", search={"num_trials": 1}, cost={"calibrate": False},
                      resources={"workers_per_trial": 2, "cpus_per_worker": 0.5, "custom": {"trainer": 0.5},
                                 "worker_start_timeout_s": 5})
    raw["output_dir"] = str(tmp_path / "sweeps" / "unplaced")
    spec = write_yaml(tmp_path / "unplaced.yaml", raw)
    with joined(HOLDER, address, env, "HOLDING", tmp_path / "holder.log"):
        done = start(spec, address, env, tmp_path, timeout=180)
        # What the driver's watchdog would write about this cluster now.
        seen = subprocess.run(
            [sys.executable, "-c", WAITING, address], env={**env, "RAY_AUTH_MODE": "token"},
            capture_output=True, text=True, timeout=120,
        )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    reason = (
        "WorkersNotPlaced: its 2 worker(s) of 0.5 CPU, 0.5 trainer each were not placed within 5 s "
        "(resources.worker_start_timeout_s); the cluster had free: "
    )
    assert "error: no trial completed (1 started)" in out and reason in " ".join(out.split()), out[-3000:]
    assert "holds 1 x (1 trainer)" in seen.stdout and "free: 2 CPU of 2 CPU, 1 trainer" in seen.stdout, (
        seen.stdout + seen.stderr
    )
    parents, children = sweep_runs(f"sqlite:///{tmp_path / 'mlflow.db'}", "unplaced")
    assert len(parents) == 1 and len(children) == 1
    assert all(run.info.status != "RUNNING" for run in parents + children), [
        (run.data.tags["sweeper.kind"], run.info.status) for run in parents + children
    ]
