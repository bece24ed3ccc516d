"""A sweep on a real multi-node Ray cluster on one machine: a head and two worker nodes,
each `ray start --block` in its own process with token authentication on as Ray 2.60
starts it, the worker nodes with a custom resource ("trainer") that every sweep here asks
for per Train worker (resources.custom), so that no Train worker runs on the head; an S3
server on loopback (moto) for `storage.uri`; an `mlflow server` over HTTP whose artifacts
go to that S3. Every process is ended by its pid (its whole session) when the module
ends, even when a test failed.

The scenarios: 2-worker trials spread over both worker nodes with Tune's state and their
checkpoints in S3 (the credentials in no output and no run); the driver killed with -9,
its sweep folder deleted, and `sweep resume --storage` from another folder finishing the
sweep without retraining a completed trial or leaving a run RUNNING; promote, export and
report from another folder, and promote without the credentials a keyed line; `sweep
submit`, `logs`, `stop` and a resume job with the storage on S3; a worker node's raylet
killed mid-trial, the trial retrying from its last checkpoint on the other node; a node
given notice."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import small_sweep, wait_for, write_yaml
from tests.integration import cli_process
from tests.integration.conftest import NODE_ENV, RAY, end_process_group, end_process_groups, wait_for_port
from tests.integration.s3_server import S3Server, s3_server
from tests.ports import free_port

pytestmark = pytest.mark.integration

BUCKET = "sweeps"
MLFLOW = str(Path(sys.executable).with_name("mlflow"))


@dataclass
class MultiNodeCluster:
    address: str
    dashboard: str
    token_file: Path
    s3: S3Server
    tracking_uri: str
    root: Path
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)  # node name -> its `ray start`
    temp_dirs: dict[str, str] = field(default_factory=dict)  # node name -> its Ray temp folder

    def env(self, **extra) -> dict:
        """A client's environment: the token where Ray looks, the S3 variables, nothing else of Ray's."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS", "AWS_", "MLFLOW_"))}
        env.update(self.s3.env, RAY_AUTH_TOKEN_PATH=str(self.token_file), COLUMNS="200", **extra)
        return env

    def query(self, script: str) -> object:
        """Run `script` joined to the cluster (a separate process: the test's own stays
        out of Ray); what it prints as JSON."""
        code = f"import json, ray\nray.init(address={self.address!r}, log_to_driver=False, logging_level='ERROR')\n" + script
        done = subprocess.run(
            [sys.executable, "-c", code], env=self.env(RAY_AUTH_MODE="token"), capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    def node_ids(self) -> dict[str, str]:
        """Node id -> "head" or the worker node's name (by its custom resource), live nodes only."""
        nodes = self.query("print(json.dumps([(n['NodeID'], sorted(n['Resources'])) for n in ray.nodes() if n['Alive']]))")
        named = {}
        for node_id, resources in nodes:
            names = [r.removeprefix("node_") for r in resources if r.startswith("node_")]
            named[node_id] = names[0] if names else "head"
        return named

    def job_status(self, sweep: str) -> str:
        """The status of the sweep's latest Ray Job, through the Jobs SDK (HTTP)."""
        code = textwrap.dedent(f"""
            from ray.job_submission import JobSubmissionClient
            from sweeper.cluster.jobs import latest_job
            jobs = JobSubmissionClient({self.dashboard!r})
            print(jobs.get_job_status(latest_job(jobs, {sweep!r})))
        """)
        done = subprocess.run(
            [sys.executable, "-c", code], env=self.env(RAY_AUTH_MODE="token"), capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip().splitlines()[-1].rpartition(".")[2]

    def train_workers(self, class_name: str = "RayTrainWorker") -> dict[str, str]:
        """Actor id -> node id of every actor of `class_name` the cluster has seen (dead
        ones too; no node id while one waits to be placed): the Train workers of several-
        worker trials, or with "ImplicitFunc" the trials' own processes, where a one-worker
        trial trains. By id: the state API lists actors in no particular order, so "the
        ones after the first N" are not the new ones."""
        return dict(self.query(textwrap.dedent(f"""
            from ray.util.state import list_actors
            actors = list_actors(filters=[("class_name", "=", {class_name!r})], detail=True, limit=10000)
            print(json.dumps([(a.actor_id, a.node_id) for a in actors]))
        """)))

    def new_train_worker_nodes(self, seen_before: dict[str, str], class_name: str = "RayTrainWorker") -> list[str]:
        """The node ids of the actors of `class_name` started since `seen_before` (train_workers())."""
        return [node for actor, node in self.train_workers(class_name).items() if actor not in seen_before]


def start_node(args: list[str], env: dict, log_path: Path) -> subprocess.Popen:
    log = open(log_path, "ab")
    try:
        return subprocess.Popen([RAY, "start", "--block", *args], env={**env, **NODE_ENV}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()  # the child keeps its own descriptor


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("multinode")
    home = root / "home"
    home.mkdir()
    temp_folders: list[str] = []
    servers: list[subprocess.Popen] = []  # the nodes and the mlflow server, ended together
    with contextlib.ExitStack() as stack:
        stack.callback(lambda: [shutil.rmtree(folder, ignore_errors=True) for folder in temp_folders])

        def ray_temp() -> str:
            """A node's own temp folder (short: Ray's Unix sockets live there), removed after
            every node ended. Nodes on one machine must not share one: a worker node's
            runtime-env agent deleted the job working_dir that the head's job driver ran
            in, when its own last use of it ended."""
            folder = tempfile.mkdtemp(prefix="h17ray-", dir="/tmp")
            temp_folders.append(folder)
            return folder

        def started(process: subprocess.Popen) -> subprocess.Popen:
            servers.append(process)
            return process

        s3 = stack.enter_context(s3_server(root / "moto.log"))
        stack.callback(end_process_groups, servers)
        s3.client().create_bucket(Bucket=BUCKET)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS", "AWS_", "MLFLOW_"))}
        base.update(s3.env, HOME=str(home), PATH=f"{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}")
        subprocess.run([RAY, "get-auth-token", "--generate"], env=base, capture_output=True, check=True, timeout=120)
        token_file = home / ".ray" / "auth_token"

        mlflow_port = free_port()
        mlflow_log = open(root / "mlflow.log", "wb")
        stack.callback(mlflow_log.close)
        mlflow_server = started(subprocess.Popen(
            [MLFLOW, "server", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
             "--artifacts-destination", f"s3://{BUCKET}/mlartifacts", "--host", "127.0.0.1",
             "--port", str(mlflow_port), "--workers", "1"],
            env=base, cwd=root, stdout=mlflow_log, stderr=subprocess.STDOUT, start_new_session=True,
        ))

        port, dashboard = free_port(), free_port()
        common = ["--min-worker-port", "0", "--max-worker-port", "0",
                  "--object-store-memory", str(200 * 1024**2)]
        head = started(start_node(
            ["--head", "--port", str(port), "--dashboard-port", str(dashboard), "--num-cpus", "1",
             "--ray-client-server-port", str(free_port()), "--temp-dir", ray_temp(), *common,
             # Not Ray's default 52365, which another Ray on the machine may hold: without
             # its agent the head refuses jobs ("No available agent to submit job").
             "--dashboard-agent-listen-port", str(free_port())],
            # Ray's own health checks (a node is dead after 5 failed asks, 3 s apart): a
            # shorter period called nodes of a busy 2-core machine dead while they lived.
            base, root / "head.log",
        ))
        wait_for_port(port, head)
        address = f"127.0.0.1:{port}"
        joined = {**base, "RAY_AUTH_MODE": "token"}
        result = MultiNodeCluster(address, f"http://127.0.0.1:{dashboard}", token_file, s3,
                                  f"http://127.0.0.1:{mlflow_port}", root)
        for name in ("a", "b"):
            # One at a time, and once more if its start timed out (a busy 2-core machine).
            for attempt in (1, 2):
                result.temp_dirs[name] = ray_temp()
                worker = started(start_node(
                    ["--address", address, "--num-cpus", "1", "--resources", json.dumps({f"node_{name}": 1, "trainer": 1}),
                     "--temp-dir", result.temp_dirs[name], *common],
                    joined, root / f"worker-{name}.log",
                ))
                result.workers[name] = worker
                deadline = time.time() + 120
                while name not in result.node_ids().values() and worker.poll() is None:
                    assert time.time() < deadline, f"worker node {name} did not join"
                    time.sleep(1)
                if worker.poll() is None:
                    break
                assert attempt == 1, f"worker node {name} exited twice while starting"
        wait_for_port(mlflow_port, mlflow_server)
        yield result


def multinode_sweep(cluster: MultiNodeCluster, workdir: Path, name: str, **sections) -> Path:
    """A tiny sweep with its checkpoints in S3, its runs in the mlflow server and its Train
    workers on the worker nodes (their custom resource)."""
    raw = small_sweep(
        name,
        resources={"custom": {"trainer": 1}},
        training={"max_steps": 20, "eval_every": 10},
        early_stopping={"scheduler": "none"},
        storage={"uri": f"s3://{BUCKET}/cluster/{name}"},
        tracking={"uri": cluster.tracking_uri, "experiment": "multinode"},
    )
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    workdir.mkdir(parents=True, exist_ok=True)
    return write_yaml(workdir / f"{name}.yaml", raw)


def sweep_cli(cluster: MultiNodeCluster, *args, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return cli_process.run(list(args), cwd=cwd, env=cluster.env(), timeout=timeout)


def sweep_runs(cluster: MultiNodeCluster, sweep: str) -> tuple[list, list]:
    """The sweep's (parent runs, trial runs) in the mlflow server."""
    import mlflow

    client = mlflow.MlflowClient(cluster.tracking_uri)
    experiment = client.get_experiment_by_name("multinode")
    if experiment is None:
        return [], []
    runs = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`sweeper.sweep_name` = '{sweep}'", max_results=1000
    )
    return ([r for r in runs if r.data.tags["sweeper.kind"] == "sweep"],
            [r for r in runs if r.data.tags["sweeper.kind"] == "trial"])


def eval_history(cluster: MultiNodeCluster, run_id: str) -> list[tuple[int, float]]:
    import mlflow

    points = mlflow.MlflowClient(cluster.tracking_uri).get_metric_history(run_id, "eval_loss")
    return sorted((p.step, p.value) for p in points)


def test_two_worker_trials_spread_over_both_worker_nodes_with_checkpoints_in_s3(cluster, tmp_path):
    workdir = tmp_path / "spread"
    path = multinode_sweep(
        cluster, workdir, "spread",
        search={"num_trials": 2, "seed": 2}, resources={"workers_per_trial": 2, "cpus_per_worker": 1},
        cost={"calibrate": True},  # `sweep start --address` calibrates as Ray tasks on the cluster (the others skip it)
    )
    seen_before = cluster.train_workers()
    started = sweep_cli(cluster, "start", str(path), "--address", cluster.address, cwd=workdir)
    assert started.returncode == 0, started.stdout + started.stderr
    assert "2 trials, 1 at a time (2 worker(s) per trial)" in started.stdout, started.stdout

    names = cluster.node_ids()
    used = [names.get(node, "gone") for node in cluster.new_train_worker_nodes(seen_before)]
    assert sorted(used) == ["a", "a", "b", "b"], used  # each trial: one worker on each worker node
    # The sweep's storage is the bucket: Tune's state, the spec, the tokenizer, one
    # checkpoint kept per trial; the local folder keeps the spec only.
    keys = cluster.s3.keys(BUCKET, "cluster/spread/")
    assert {"cluster/spread/tune/tuner.pkl", "cluster/spread/sweep.yaml", "cluster/spread/tokenizer/tokenizer_config.json"} <= set(keys), keys
    adapters = [k for k in keys if k.startswith("cluster/spread/trials/") and k.endswith("adapter_config.json")]
    assert len(adapters) == 2, keys
    local = workdir / "sweeps" / "spread"
    assert (local / "sweep.yaml").is_file() and not (local / "trials").exists() and not (local / "tune").exists()
    # The trial runs name their checkpoints in the bucket; no secret is printed or recorded.
    (parent,), children = sweep_runs(cluster, "spread")
    recorded = " ".join(f"{run.data.tags} {run.data.params}" for run in (parent, *children))
    assert f"s3://{BUCKET}/cluster/spread/trials/" in recorded
    secrets = (cluster.s3.env["AWS_SECRET_ACCESS_KEY"], cluster.token_file.read_text().strip())
    assert not any(secret in recorded + started.stdout + started.stderr for secret in secrets)


def test_promote_export_and_report_from_another_folder_read_the_checkpoint_from_s3(cluster, tmp_path):
    # The sweep of the test above, its folder gone: promote, export and report need only
    # MLflow and the bucket.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if not sweep_runs(cluster, "spread")[1]:
        pytest.skip("needs the sweep of test_two_worker_trials_spread_over_both_worker_nodes_with_checkpoints_in_s3")
    promoted = sweep_cli(cluster, "promote", "spread", "--tracking-uri", cluster.tracking_uri, cwd=elsewhere)
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr
    assert "registered spread version 1" in promoted.stdout
    mlartifacts = cluster.s3.keys(BUCKET, "mlartifacts/")
    assert any(k.endswith("artifacts/adapter/adapter_config.json") for k in mlartifacts), mlartifacts
    import mlflow

    # The registered model as a user fetches it (models:/ URIs resolve through the tracking URI).
    mlflow.set_tracking_uri(cluster.tracking_uri)
    try:
        model = Path(mlflow.artifacts.download_artifacts("models:/spread@champion", dst_path=str(tmp_path / "model")))
    finally:
        mlflow.set_tracking_uri(None)
    assert (model / "artifacts" / "adapter" / "adapter_config.json").is_file()
    exported = sweep_cli(cluster, "export", "spread", "--tracking-uri", cluster.tracking_uri, cwd=elsewhere)
    assert exported.returncode == 0 and "learning_rate" in exported.stdout, exported.stdout + exported.stderr
    reported = sweep_cli(cluster, "report", "spread", "--tracking-uri", cluster.tracking_uri, "--out", "r", cwd=elsewhere)
    assert reported.returncode == 0, reported.stdout + reported.stderr
    assert (elsewhere / "r" / "index.html").is_file() and (elsewhere / "r" / "report.md").is_file()
    # Without the credentials and the endpoint, the checkpoint cannot be read: a keyed line.
    blind_env = {k: v for k, v in cluster.env().items() if not k.startswith(("AWS_", "MLFLOW_S3_"))}
    blind = cli_process.run(["promote", "spread", "--tracking-uri", cluster.tracking_uri], cwd=elsewhere, env=blind_env,
                            timeout=600)
    assert blind.returncode == 2 and "error: --trial: the adapter checkpoint of trial" in blind.stderr, blind.stderr


def test_a_driver_killed_with_minus_9_is_resumed_without_retraining_a_completed_trial(cluster, tmp_path):
    workdir = tmp_path / "killed"
    path = multinode_sweep(cluster, workdir, "killed", search={"num_trials": 3, "seed": 4})

    def completed():
        # Ended too: the tracker tags a trial completed, then ends its run, and a kill -9
        # between the two leaves a completed trial whose run the resume ends (no end time
        # to compare with).
        return [
            c for c in sweep_runs(cluster, "killed")[1]
            if c.data.tags.get("sweeper.state") == "completed" and c.info.end_time is not None
        ]

    driver = cli_process.start(["start", str(path), "--address", cluster.address], cwd=workdir, env=cluster.env(),
                               quiet=True)
    try:
        wait_for(lambda: completed(), 400, "a completed trial", every=1)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and nothing else: its trials run on the cluster
        driver.wait(timeout=60)
    def checkpoints(trial_id: str) -> set[str]:
        return set(cluster.s3.keys(BUCKET, f"cluster/killed/trials/{trial_id}/"))

    before = {
        c.data.tags["sweeper.trial_id"]: (c.info.end_time, eval_history(cluster, c.info.run_id)) for c in completed()
    }
    assert 1 <= len(before) < 3, before
    written = {trial_id: checkpoints(trial_id) for trial_id in before}
    assert all(written.values()), written

    # Resumed from S3 alone: the sweep folder is gone, the resume runs in another folder.
    shutil.rmtree(workdir / "sweeps" / "killed")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    resumed = sweep_cli(
        cluster, "resume", "killed", "--storage", f"s3://{BUCKET}/cluster/killed", "--address", cluster.address, cwd=elsewhere
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    (parent,), children = sweep_runs(cluster, "killed")
    trial_ids = [c.data.tags["sweeper.trial_id"] for c in children]
    assert len(trial_ids) == len(set(trial_ids)) == 3, trial_ids
    still_running = [
        (r.data.tags.get("sweeper.kind"), r.data.tags.get("sweeper.trial_number"), r.data.tags.get("sweeper.state"))
        for r in [parent, *children] if r.info.status == "RUNNING"
    ]
    assert not still_running, f"runs left RUNNING (kind, trial, state): {still_running}\n{resumed.stdout}"
    assert parent.info.status == "FINISHED"
    assert {c.data.tags["sweeper.state"] for c in children} == {"completed"}
    after = {c.data.tags["sweeper.trial_id"]: c for c in children}
    for trial_id, (end_time, history) in before.items():
        # Not trained again: the same end, no checkpoint written, one value per step (the
        # resumed driver records the trial's final report again, the same value; the
        # janitor may remove a checkpoint that is not among the best).
        assert after[trial_id].info.end_time == end_time
        points = set(eval_history(cluster, after[trial_id].info.run_id))
        assert set(history) <= points and len({step for step, _ in points}) == len(points), points
        # A trial Tune had not yet recorded as finished when the driver died is restarted
        # at its last checkpoint and reports it again, which writes one more checkpoint
        # with the same report (trainables/worker.py); so no assertion on the bucket here.
    # The search went on with its history: the study fetched from S3 holds every trial.
    import optuna

    from sweeper.search._study import TUNE_TRIAL_ID_ATTR, study_url

    study = optuna.load_study(study_name="killed", storage=study_url(elsewhere / "sweeps" / "killed"))
    told = {t.user_attrs.get(TUNE_TRIAL_ID_ATTR): t.state.name for t in study.get_trials()}
    assert {trial_id: told.get(trial_id) for trial_id in trial_ids} == dict.fromkeys(trial_ids, "COMPLETE"), told


def test_a_worker_node_lost_mid_trial_retries_from_its_checkpoint(cluster, tmp_path):
    # It leaves the cluster one worker node short: only the submit test comes after it.
    import mlflow
    import psutil

    workdir = tmp_path / "nodeloss"
    path = multinode_sweep(
        cluster, workdir, "nodeloss",
        # Long enough that the node is lost mid-trial: at 60 steps the trial once ended
        # between its first evaluation reaching MLflow and the kill, with nothing to retry.
        search={"num_trials": 1, "seed": 6, "max_failures": 1}, training={"max_steps": 150, "eval_every": 10},
    )
    # A one-worker trial: it trains in its own process (Tune's trial actor), on a worker node.
    seen_before = cluster.train_workers("ImplicitFunc")
    driver = cli_process.start(["start", str(path), "--address", cluster.address], cwd=workdir, env=cluster.env())
    try:
        names = cluster.node_ids()
        # Placed: an actor waiting for its node has no node id yet.
        first = wait_for(lambda: [n for n in cluster.new_train_worker_nodes(seen_before, "ImplicitFunc") if n], 300,
                         "the trial's process", every=1)
        lost = names[first[0]]
        assert lost in ("a", "b"), names

        def evaluated():
            runs = sweep_runs(cluster, "nodeloss")[1]
            return runs and eval_history(cluster, runs[0].info.run_id)

        wait_for(evaluated, 300, "the trial's first evaluation and checkpoint", every=1)
        raylets = [p for p in psutil.Process(cluster.workers[lost].pid).children(recursive=True) if p.name() == "raylet"]
        assert len(raylets) == 1, raylets
        raylets[0].kill()
        output, _ = driver.communicate(timeout=600)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(timeout=60)
    assert driver.returncode == 0, output

    (parent,), (trial,) = sweep_runs(cluster, "nodeloss")
    assert trial.data.tags["sweeper.state"] == "completed", trial.data.tags
    steps = [step for step, _ in eval_history(cluster, trial.info.run_id)]
    # From its last checkpoint: no evaluation repeated, as a start from step 0 would.
    assert steps == sorted(set(steps)) and steps[-1] == 150, steps
    # The restart, as the trial's run records it: once, after the first evaluation. (The
    # state API's list of Train workers is no evidence: in CI it once listed one worker for
    # this sweep, and in another run both on the lost node's id.)
    restarts = mlflow.MlflowClient(cluster.tracking_uri).get_metric_history(trial.info.run_id, "restarts")
    assert restarts and {p.value for p in restarts} == {1.0}, (restarts, lost, names, output[-3000:])
    assert min(p.step for p in restarts) > steps[0], (restarts, steps)
    assert parent.info.status == "FINISHED"


def test_a_submitted_sweep_with_its_storage_on_s3_is_stopped_and_resumed_as_jobs(cluster, tmp_path):
    """`sweep submit`, `logs`, `stop`, `resume` with storage.uri on S3: the resumed job
    starts in a fresh working_dir and fetches the sweep from S3 (`resume --storage`).
    After the node-loss test, on one worker node: run before it, the node-loss trial's
    Train worker was never placed (something of the submitted jobs kept the worker
    nodes' resources; not diagnosed yet)."""
    workdir = tmp_path / "submitted"
    # Long enough that the stop lands mid-sweep (20-step trials finished before it did).
    path = multinode_sweep(
        cluster, workdir, "subs3", search={"num_trials": 2, "seed": 8}, training={"max_steps": 60, "eval_every": 10}
    )
    jobs = ("--address", cluster.dashboard)
    try:
        submitted = sweep_cli(cluster, "submit", path.name, *jobs, cwd=workdir, timeout=120)
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        assert "Submitted sweep 'subs3' as job sweep-subs3-" in submitted.stdout

        def evaluated():  # stopped once a trial has evaluated (and Tune has saved its state with it)
            if any(eval_history(cluster, run.info.run_id) for run in sweep_runs(cluster, "subs3")[1]):
                return True
            status = cluster.job_status("subs3")  # not yet: the job must still be going
            assert status in ("PENDING", "RUNNING"), (status, sweep_cli(cluster, "logs", "subs3", *jobs, cwd=workdir).stdout[-6000:])
            return False

        try:
            wait_for(evaluated, 300, "the submitted sweep's first evaluation", every=2)
        except AssertionError as timed_out:
            sweep_cli(cluster, "stop", "subs3", *jobs, cwd=workdir, timeout=120)
            output = sweep_cli(cluster, "logs", "subs3", *jobs, cwd=workdir, timeout=120).stdout
            raise AssertionError(f"{timed_out}; the job's output:\n{output[-6000:]}") from None
        stopped = sweep_cli(cluster, "stop", "subs3", *jobs, cwd=workdir, timeout=120)
        assert stopped.returncode == 0 and "Stopped job sweep-subs3-" in stopped.stdout, stopped.stdout + stopped.stderr
        logs = sweep_cli(cluster, "logs", "subs3", *jobs, cwd=workdir, timeout=180)
        assert logs.returncode == 0 and "Job of sweep 'subs3': STOPPED" in logs.stdout, logs.stdout + logs.stderr
        assert "Sweep 'subs3': 2 trials" in logs.stdout, logs.stdout
        resumed = sweep_cli(cluster, "resume", "subs3", *jobs, cwd=workdir, timeout=120)
        assert resumed.returncode == 0 and "Submitted the resume of sweep 'subs3' as job" in resumed.stdout, resumed.stdout + resumed.stderr
        finished = sweep_cli(cluster, "logs", "subs3", *jobs, cwd=workdir, timeout=480)
        assert finished.returncode == 0 and "Job of sweep 'subs3': SUCCEEDED" in finished.stdout, finished.stdout + finished.stderr
    except BaseException:
        sweep_cli(cluster, "stop", "subs3", *jobs, cwd=workdir, timeout=120)  # a job left running by the failure
        raise
    (parent,), children = sweep_runs(cluster, "subs3")
    still_running = [
        (r.data.tags.get("sweeper.kind"), r.data.tags.get("sweeper.trial_number"), r.data.tags.get("sweeper.state"))
        for r in [parent, *children] if r.info.status == "RUNNING"
    ]
    assert not still_running, f"runs left RUNNING (kind, trial, state): {still_running}\n{resumed.stdout}"
    assert parent.info.status == "FINISHED"
    assert sorted(c.data.tags["sweeper.state"] for c in children) == ["completed"] * 2


def test_a_trial_on_a_node_given_notice_keeps_its_step_and_moves_to_another_node(cluster, tmp_path):
    """A node drained with notice, as a spot reclaim (`ray drain-node --reason
    DRAIN_NODE_REASON_PREEMPTION` with a deadline, what the autoscaler does): the trial
    there keeps its step in a checkpoint between two evaluations and, at the deadline,
    goes on from that step on another node. Not a failure: `search.max_failures` is 0.
    Last in the module: it brings a node of its own (the node-loss test left one), and
    the drained node takes no more work. Two workers of half a node each: Ray Train tells
    its own workers of a drain; a one-worker trial's process is Tune's, which is not told,
    and is retried from its latest checkpoint as after a node's loss."""
    import mlflow

    home = cluster.token_file.parent.parent
    node_temp = tempfile.mkdtemp(prefix="h35ray-", dir="/tmp")
    node_env = cluster.env(RAY_AUTH_MODE="token", HOME=str(home))
    node_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{node_env.get('PATH', '')}"
    fresh = start_node(
        ["--address", cluster.address, "--num-cpus", "1", "--resources", json.dumps({"node_c": 1, "trainer": 1}),
         "--temp-dir", node_temp, "--min-worker-port", "0", "--max-worker-port", "0",
         "--object-store-memory", str(200 * 1024**2)],
        node_env, cluster.root / "worker-c.log",
    )
    workdir = tmp_path / "preempt"
    path = multinode_sweep(
        cluster, workdir, "preempt",
        search={"num_trials": 1, "seed": 9, "max_failures": 0}, training={"max_steps": 900, "eval_every": 300},
        resources={"workers_per_trial": 2, "cpus_per_worker": 0.5, "custom": {"trainer": 0.5}},
    )
    driver = None
    try:
        # The sweep starts while the fresh node joins: its trial trains on whichever of the
        # two worker nodes it is placed on, and the other one takes it after the move.
        seen_before = cluster.train_workers()
        driver = cli_process.start(["start", str(path), "--address", cluster.address], cwd=workdir, env=cluster.env())
        first = wait_for(lambda: [n for n in cluster.new_train_worker_nodes(seen_before) if n], 300, "the trial's Train worker", every=1)
        wait_for(lambda: "c" in cluster.node_ids().values(), 120, "the fresh worker node", every=1)

        def evaluated():
            runs = sweep_runs(cluster, "preempt")[1]
            return runs and eval_history(cluster, runs[0].info.run_id)

        before_notice = wait_for(evaluated, 300, "the trial's first evaluation", every=0.5)
        drained = subprocess.run(
            [RAY, "drain-node", "--address", cluster.address, "--node-id", first[0],
             "--reason", "DRAIN_NODE_REASON_PREEMPTION", "--reason-message", "spot reclaim (test)",
             "--deadline-remaining-seconds", "10"],
            env=cluster.env(RAY_AUTH_MODE="token"), capture_output=True, text=True, timeout=120,
        )
        assert drained.returncode == 0, drained.stdout + drained.stderr
        output, _ = driver.communicate(timeout=420)
    finally:
        if driver is not None and driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(timeout=60)
        end_process_group(fresh)
        shutil.rmtree(node_temp, ignore_errors=True)
    assert driver.returncode == 0, output

    (parent,), (trial,) = sweep_runs(cluster, "preempt")
    assert trial.data.tags["sweeper.state"] == "completed", (trial.data.tags, output[-3000:])
    steps = [step for step, _ in eval_history(cluster, trial.info.run_id)]
    assert steps == [300, 600, 900], steps  # every evaluation once: none repeated after the move
    client = mlflow.MlflowClient(cluster.tracking_uri)
    preemptions = client.get_metric_history(trial.info.run_id, "preemptions")
    moved_at = client.get_metric_history(trial.info.run_id, "preempted_at_step")
    assert preemptions and {p.value for p in preemptions} == {1.0}, (preemptions, output[-3000:])
    # Kept at the step the notice reached, not at an evaluation before it.
    (kept,) = {int(p.value) for p in moved_at}
    assert before_notice[-1][0] < kept < 900, (kept, before_notice)
    # Moved: its workers after the move ran on another node than the drained one.
    nodes_used = set(cluster.new_train_worker_nodes(seen_before))
    assert first[0] in nodes_used and len(nodes_used - {first[0], ""}) == 1, (nodes_used, first)
    assert parent.info.status == "FINISHED"
