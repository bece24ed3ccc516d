"""Launch: start (or join) the Ray cluster, prepare the data once, and run the Tune sweep
in which every trial is a Ray Train TorchTrainer."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from rich.console import Console

from sweeper.cost.prices import SweepCost
from sweeper.errors import UserError
from sweeper.plan.sweep_plan import ClusterResources, SweepPlan, make_plan
from sweeper.track.book import SweepBook
from sweeper.run.janitor import AdapterJanitor
from sweeper.spec.schema import SweepSpec, spec_to_yaml
from trainables.models import DEFAULT_CACHE_ROOT


@dataclass
class SweepRun:
    spec: SweepSpec
    plan: SweepPlan
    book: SweepBook
    dashboard_url: str | None
    wall_seconds: float
    cost: SweepCost
    tracking_uri: str
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)  # lines for the summary (forecast vs actual, budget)


def refuse_existing_sweep(spec: SweepSpec, overwrite: bool) -> None:
    """An existing sweep is never replaced unless asked (checked before Ray starts)."""
    sweep_dir = spec.sweep_dir
    if not overwrite and _sweep_files(sweep_dir):
        raise UserError(
            f"name: a sweep named {spec.name!r} already exists in {sweep_dir}; "
            f"continue it with sweep resume {spec.name}, pick a new name, or pass --overwrite to replace it"
        )


def prepare_sweep_dir(spec: SweepSpec, overwrite: bool) -> Path:
    """The sweep's folder, new. An existing sweep is never deleted unless asked."""
    refuse_existing_sweep(spec, overwrite)
    sweep_dir = spec.sweep_dir
    for path in _sweep_files(sweep_dir):
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    sweep_dir.mkdir(parents=True, exist_ok=True)
    # With its folder pinned, so that `sweep resume --sweep-dir` works from any directory.
    (sweep_dir / "sweep.yaml").write_text(spec_to_yaml(spec.model_copy(update={"output_dir": sweep_dir})))
    return sweep_dir


# What `sweep promote` and `sweep resume` need from a sweep besides its Tune state and
# checkpoints, copied beside them when storage.uri is not the sweep folder.
PUBLISHED_FILES = ("sweep.yaml", "tokenizer")


def publish_sweep_files(spec: SweepSpec) -> None:
    from sweeper.cluster import storage

    if spec.storage_uri == str(spec.sweep_dir):
        return
    for name in PUBLISHED_FILES:
        storage.upload(spec.sweep_dir / name, storage.join(spec.storage_uri, name))


# The warm-start server's log (sweeper/cluster/fork_server.py), in the sweep folder: the server
# starts, and may write it, before the folder is prepared, so preparing keeps it.
WARM_START_LOG = "warm_start.log"


def _sweep_files(sweep_dir: Path) -> list[Path]:
    """What a sweep left in its folder (the warm-start log of this start aside)."""
    if not sweep_dir.is_dir():
        return []
    return [path for path in sweep_dir.iterdir() if path.name != WARM_START_LOG]


def _first_missing_folder(folder: Path) -> Path | None:
    """The outermost of `folder` and its parents that does not exist yet, if any."""
    missing = None
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            return missing
        missing = candidate
    return missing


def _forget_warm_start_log(sweep_dir: Path, made_for_the_log: Path | None) -> None:
    """A start refused before the sweep began leaves nothing behind: the warm-start log,
    written before the inputs were checked, goes, and so do the folders made for it."""
    (sweep_dir / WARM_START_LOG).unlink(missing_ok=True)
    if made_for_the_log is not None and not any(p.is_file() for p in made_for_the_log.rglob("*")):
        shutil.rmtree(made_for_the_log, ignore_errors=True)


# Ray Train and Tune settings for sweeps of many short trials. Ray reads them from the
# environment of the trial processes (which run the Train controllers), so they are
# given to every process of the sweep's Ray job as its runtime_env.
TRIAL_SETTINGS = {
    # The Train controller polls its workers this often: a report reaches Tune and ASHA,
    # and a finished run is noticed, at most this late (Ray's default: 2 s, which let a
    # pruned trial train on for seconds and left every finished trial's CPUs idle). A
    # slower poll did not raise a trial's tokens/s measurably (benchmarks/README.md).
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.1",
    # A watcher actor per trial for node preemption: a process per trial. A preempted
    # node's workers die, which Train's retry (search.max_failures) already handles.
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    # How long Tune waits for a stopped trial's thread before reusing its actor; the
    # trial aborts its Train run first (sweeper/run/trial.py), which takes about a second.
    "TUNE_FUNCTION_THREAD_TIMEOUT_S": "20",
}


LOCAL_CLUSTER = "local"
AUTH_MODE_ENV = "RAY_AUTH_MODE"
PROBE_TIMEOUT_S = 10.0


def cluster_address(address: str | None, environ: Mapping[str, str]) -> str:
    """The Ray address a sweep uses: `--address`, else RAY_ADDRESS, else "local" (a new
    cluster of its own). Never Ray's implicit join: `ray.init()` without an address joins
    whatever `ray start` left in Ray's address file, even a head that is gone."""
    return address or environ.get("RAY_ADDRESS") or LOCAL_CLUSTER


def starts_own_cluster(address: str) -> bool:
    return address == LOCAL_CLUSTER


def auth_token_source(environ: Mapping[str, str], home: Path) -> str | None:
    """Where Ray would find a cluster token for a client, in Ray's order (the variable's
    name or the file's path, never the token itself); None when there is none."""
    if environ.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    for path in (environ.get("RAY_AUTH_TOKEN_PATH"), home / ".ray" / "auth_token"):
        if path and Path(path).is_file():
            return str(path)
    return None


def client_auth_settings(environ: Mapping[str, str], home: Path) -> dict[str, str]:
    """Environment for a client joining a cluster: token mode when a token is where Ray
    looks (a joining client defaults to RAY_AUTH_MODE=disabled and a `ray start --head`
    cluster refuses it); an explicit RAY_AUTH_MODE is the user's choice and stays."""
    if AUTH_MODE_ENV in environ or auth_token_source(environ, home) is None:
        return {}
    return {AUTH_MODE_ENV: "token"}


def bootstrap_endpoint(address: str, address_file: Path | None = None) -> tuple[str, int] | None:
    """The (host, port) a join first talks to: the GCS (HOST:PORT, or for "auto" the
    address `ray start` wrote in Ray's address file) or the Ray Client server
    (ray://HOST:PORT). None when there is nothing to probe (no address file for "auto")."""
    if address == "auto":
        if address_file is None or not address_file.is_file():
            return None
        address = address_file.read_text().strip()
    address = address.removeprefix("ray://")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--address: expected auto, HOST:PORT or ray://HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


def check_reachable(address: str, endpoint: tuple[str, int] | None, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Refuse, as one keyed line, an address whose cluster does not answer (ray.init
    would retry "Failed to connect to GCS" without end)."""
    import socket

    if endpoint is None:
        raise UserError(
            f"--address: {address} found no running Ray cluster on this machine (no `ray start` address file); "
            "start one with `ray start --head`, give HOST:PORT, or leave --address out to start a local cluster"
        )
    host, port = endpoint
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(
            f"--address: no Ray cluster answers at {host}:{port} ({reason}); check that its head is running "
            "(ray status on the head), give its address, or leave --address out to start a local cluster"
        ) from None


def auth_refused(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}"
    words = ("InvalidAuthToken", "UNAUTHENTICATED", "authentication token", "AuthenticationError", "Authentication required", "Authentication failed")
    return any(word in text for word in words)


def start_warm_server(address: str, log_path: Path, use_gpu: bool = False):
    """The warm-start server for a CPU sweep on a cluster it starts itself, on Linux
    (sweeper/cluster/fork_server.py), started first so that it imports torch while the data is
    tokenized and Ray starts; None when the sweep joins a cluster (the job's
    py_executable would route every node's workers through a server that only this node
    has), trains on GPUs (forked CUDA workers are not proven safe yet) or the platform
    cannot host it. Its log goes to `log_path`."""
    from sweeper.cluster import fork_server as warm_start

    if not starts_own_cluster(address) or use_gpu or not warm_start.supported():
        return None
    return warm_start.Server(warm_start.new_socket_path(), log_path)


def job_metadata(spec: SweepSpec, tracking_uri: str) -> dict[str, str]:
    """The Ray job's metadata: the dashboard's Jobs page shows `job_name` as the job's
    name, the rest on the job's page and in its REST API (/api/jobs/)."""
    return {
        "job_name": spec.name,
        "sweeper.sweep": spec.name,
        "sweeper.task": spec.task,
        "sweeper.model": spec.model.name_or_path,
        "sweeper.num_trials": str(spec.search.num_trials),
        "sweeper.metric": f"{spec.search.metric} ({spec.search.goal})",
        "sweeper.parameters": ", ".join(spec.search.parameters) or "none",
        "sweeper.sweep_dir": str(spec.sweep_dir),
        "sweeper.mlflow": f"{tracking_uri} (experiment {spec.tracking.experiment})",
    }


def trainable_name(spec: SweepSpec) -> str:
    """Tune's name for the sweep's trainable: the dashboard shows it as each trial
    actor's Repr (Tune gives its function trainables no actor name; a trial actor runs
    several trials, and Ray reads a Repr once, so it names the sweep, not the trial)."""
    return f"sweep-{spec.name}"


def trial_name(sweep_name: str, trial) -> str:
    """Tune's name for a trial (TuneConfig's trial_name_creator), `sweep-<name>-trial-<N>`
    with N its number in the live table, MLflow and `sweep status`: the Repr of its Ray
    Train workers in the dashboard (sweeper/run/trial.py)."""
    from sweeper.cluster.ray_adapter import tune_trial_number

    return f"sweep-{sweep_name}-trial-{tune_trial_number(trial)}"


def start_ray(address: str, warm_server=None, metadata: dict[str, str] | None = None):
    """Start a local cluster with its dashboard (`address` "local"), or join `address`
    ("auto", HOST:PORT, ray://HOST:PORT) after checking that it answers, in token mode
    when a token is where Ray looks. The dashboard stays on: besides monitoring, Ray
    Train's placement-group cleanup needs it (without it finished trials kept their
    resources and sweeps hung). `metadata`: the job's (job_metadata), shown by the
    dashboard.

    With a `warm_server` every worker process of the sweep's job is forked from it, with
    Ray, torch, transformers and peft imported already: a trial's new Train worker skips
    8-10 CPU-seconds of imports.

    Raises:
        UserError: the address is malformed, does not answer, or refuses this client's token.
    """
    joining = not starts_own_cluster(address)
    if joining:
        # Ray reads the mode from the environment of the process that joins, when loaded.
        os.environ.update(client_auth_settings(os.environ, Path.home()))
    import ray

    if ray.is_initialized():
        if warm_server:
            warm_server.stop()  # the workers of a running Ray are started already
        return ray.get_runtime_context(), None
    from sweeper.cluster import fork_server as warm_start
    from sweeper.cluster.ray_adapter import ray_address_file

    if joining:
        check_reachable(address, bootstrap_endpoint(address, ray_address_file()))
    runtime_env = {"env_vars": dict(TRIAL_SETTINGS)}
    if warm_server:
        warm_env = warm_start.runtime_env(warm_server.socket_path)
        runtime_env = {"py_executable": warm_env["py_executable"], "env_vars": {**TRIAL_SETTINGS, **warm_env["env_vars"]}}
    from ray.job_config import JobConfig

    options = dict(
        job_config=JobConfig(metadata=metadata or {}),
        log_to_driver=False,
        logging_level="WARNING",
        configure_logging=True,
        runtime_env=runtime_env,
    )
    if not joining:
        options.update(include_dashboard=True, dashboard_host="127.0.0.1")
    try:
        context = ray.init(address=address, **options)
    except Exception as exc:
        # A refused token reaches ray.init only as "Failed to connect to Ray cluster" (the
        # InvalidAuthToken is logged); the probe has shown that the address answers.
        tokenless = isinstance(exc, ConnectionError) and auth_token_source(os.environ, Path.home()) is None
        if joining and (auth_refused(exc) or tokenless):
            raise UserError(_auth_problem(address)) from None
        raise
    url = context.dashboard_url
    return context, (f"http://{url}" if url and not url.startswith("http") else url)


def _auth_problem(address: str) -> str:
    source = auth_token_source(os.environ, Path.home())
    if source is None:
        return (
            f"--address: the Ray cluster at {address} requires an authentication token and none was found; "
            "run `ray get-auth-token` on its head and put the token in ~/.ray/auth_token here "
            "(or set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH)"
        )
    return (
        f"--address: the Ray cluster at {address} refused the token from {source}; "
        "run `ray get-auth-token` on its head and put that token there"
    )


def prepare_data(spec: SweepSpec, cache_root: Path):
    """Tokenize train and eval once for the whole sweep, as the task needs them (the
    tokenizer comes back too, to be saved with the sweep). Input errors (a model config
    or tokenizer that cannot load, bad data) surface here as InputError, before anything
    is written or started."""
    from trainables.data import tokenize_split
    from trainables.models import (
        adapter_base,
        check_model_config,
        check_target_modules,
        load_tokenizer,
        resolve_model_source,
    )

    source = resolve_model_source(spec.model.name_or_path, cache_root)
    base = adapter_base(source) or source
    check_model_config(base)
    check_target_modules(base, spec.lora.target_modules)
    tokenizer = load_tokenizer(base)
    trial = spec.trial_config()
    data = {split: tokenize_split(trial, split, tokenizer) for split in ("train", "eval")}
    return data, tokenizer


def run_sweep(
    spec: SweepSpec,
    *,
    yaml_folder: Path,
    address: str | None = None,
    overwrite: bool = False,
    console: Console | None = None,
    cache_root: Path = DEFAULT_CACHE_ROOT,
    extra_callbacks: list | None = None,
) -> SweepRun:
    """Start a new sweep. Every input check (tracking store, cluster fit, data files)
    happens before the sweep folder or any MLflow run is written. `extra_callbacks` are
    more Tune callbacks for the driver (the benchmarks time results with one)."""
    from rich.markup import escape

    from sweeper.cluster import storage
    from sweeper.search.warm_start import read_warm_start
    from sweeper.track.tracker import MlflowTracker

    console = console or Console()
    started = time.time()
    refuse_existing_sweep(spec, overwrite)
    warm_start = read_warm_start(spec)
    for note in warm_start.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False, soft_wrap=True)
    if warm_start:
        console.print(
            f"Warm start: {len(warm_start.trials)} earlier trials added to the search, "
            f"{len(warm_start.first_configs)} of their best configs run first"
        )
    # The forecast (calibrated, printed before the sweep starts) and the budget caps.
    from sweeper.plan.command import SweepBudget

    made_for_the_log = _first_missing_folder(spec.sweep_dir)
    try:
        session = _open_session(spec, address, console, cache_root)
        on_cluster = bool(address or os.environ.get("RAY_ADDRESS"))
        budget = SweepBudget.forecast_sweep(spec, session.plan, session.data, cache_root, console, on_cluster)
    except BaseException:
        _forget_warm_start_log(spec.sweep_dir, made_for_the_log)
        raise
    sweep_dir = prepare_sweep_dir(spec, overwrite)
    session.tokenizer.save_pretrained(sweep_dir / "tokenizer")
    publish_sweep_files(spec)
    book = SweepBook(metric=spec.search.metric, goal=spec.search.goal, max_steps=spec.training.max_steps)
    tracker = MlflowTracker(spec, book, session.tracking_uri, session.hardware, session.plan.trial_resources)
    tracker.start_sweep(yaml_folder)
    budget.attach(book, tracker)  # forecast on the parent run, caps measured on the book

    def new_tuner(trainable, callbacks):
        from ray import tune

        from sweeper.search.searcher import make_search

        search_alg, scheduler, max_concurrent_trials = make_search(session.plan, sweep_dir, warm_start)
        _trial_marks(search_alg, callbacks)
        search_alg = budget.searcher(search_alg)
        storage_filesystem, storage_path = storage.filesystem(spec.storage_uri)
        return tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(
                search_alg=search_alg,
                scheduler=scheduler,
                num_samples=spec.search.num_trials,
                max_concurrent_trials=max_concurrent_trials,
                # A trial's actor runs the next trial (run_trial aborts its Train run
                # when Tune stops it), instead of a new process importing torch per trial.
                reuse_actors=True,
                trial_name_creator=functools.partial(trial_name, spec.name),
            ),
            run_config=tune.RunConfig(
                name="tune",
                storage_path=storage_path,
                storage_filesystem=storage_filesystem,
                callbacks=callbacks,
                verbose=0,
                stop=budget.stopper(),
            ),
        )

    run = _drive(spec, session, book, tracker, new_tuner, console, started, cache_root, extra_callbacks or [], budget)
    budget.finish(tracker, run)
    return run


def resume_sweep(
    sweep_dir: Path,
    *,
    address: str | None = None,
    console: Console | None = None,
    cache_root: Path = DEFAULT_CACHE_ROOT,
) -> SweepRun:
    """Continue a sweep whose driver died or was stopped: finished trials stay as they
    are, unfinished ones continue from their latest checkpoint, the search continues
    with its history, and the same MLflow runs are reused."""
    from sweeper.cluster import storage
    from sweeper.spec.schema import load_spec
    from sweeper.track.tracker import MlflowTracker

    console = console or Console()
    started = time.time()
    spec = load_spec(sweep_dir / "sweep.yaml")
    _refuse_if_read_only(sweep_dir)
    _refuse_if_running(spec)
    experiment = storage.join(spec.storage_uri, "tune")
    if not storage.exists(storage.join(experiment, "tuner.pkl")):
        raise UserError(
            f"NAME: {experiment} has no Tune experiment to resume; start it again with sweep start --overwrite"
        )
    session = _open_session(spec, address, console, cache_root)
    book = SweepBook(metric=spec.search.metric, goal=spec.search.goal, max_steps=spec.training.max_steps)
    tracker = MlflowTracker(spec, book, session.tracking_uri, session.hardware, session.plan.trial_resources)

    from sweeper.plan.command import SweepBudget

    budget = SweepBudget(spec, session.plan, forecast=None, guard=None)

    def restored_tuner(trainable, callbacks):
        from sweeper.run.driver import rebuild_for_resume
        from sweeper.cluster.ray_adapter import restore_tuner
        from sweeper.search.study import study_url

        storage_filesystem, experiment_path = storage.filesystem(experiment)
        tuner, scheduler, searcher, stopper = restore_tuner(experiment_path, trainable, callbacks, storage_filesystem)
        # The caps keep counting what the killed driver's trials spent (the book is rebuilt from MLflow).
        searcher = budget.reattach(searcher, stopper, book)
        rebuild_for_resume(tracker, scheduler, searcher, study_url(spec.sweep_dir))
        _trial_marks(searcher, callbacks)
        return tuner

    run = _drive(spec, session, book, tracker, restored_tuner, console, started, cache_root, [], budget)
    budget.finish(tracker, run)
    return run


def _refuse_if_read_only(sweep_dir: Path) -> None:
    """Resume writes the Tune state, checkpoints and the Optuna study into the sweep folder."""
    written = [sweep_dir, sweep_dir / "tune", sweep_dir / "trials", sweep_dir / "optuna.db"]
    read_only = [path for path in written if path.exists() and not os.access(path, os.W_OK)]
    if read_only:
        raise UserError(
            f"NAME: cannot resume: {read_only[0]} is read-only; resume writes into the sweep folder "
            f"{sweep_dir}; make it writable (chmod -R u+w, or remount it read-write)"
        )


@dataclass
class _Session:
    tracking_uri: str
    dashboard_url: str | None
    plan: SweepPlan
    hardware: str
    data: dict
    tokenizer: object


def _open_session(spec: SweepSpec, address: str | None, console: Console, cache_root: Path) -> _Session:
    """Checks and set-up shared by start and resume: store reachable, Ray up, plan fits
    the cluster, data tokenized. Nothing is written yet."""
    from sweeper.track.mlflow_store import check_tracking_uri, hardware_description, resolve_tracking_uri

    from sweeper.cluster import storage

    tracking_uri = resolve_tracking_uri(spec.tracking.uri)
    check_tracking_uri(tracking_uri)
    if storage.is_remote(spec.storage_uri):
        storage.check_writable(spec.storage_uri)
    address = cluster_address(address, os.environ)
    warm_server = start_warm_server(address, spec.sweep_dir / WARM_START_LOG, spec.resources.use_gpu)
    try:
        data, tokenizer = prepare_data(spec, cache_root)
    except BaseException:
        if warm_server:
            warm_server.stop()
        raise
    _, dashboard_url = start_ray(address, warm_server, job_metadata(spec, tracking_uri))
    if not starts_own_cluster(address):
        import ray

        nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
        storage.check_reachable_by_every_node(spec.storage_uri, nodes, storage.read_mounts())
    cluster = ClusterResources.from_ray()
    plan = make_plan(spec, cluster)
    from sweeper.cost.memory import check_before_launch

    check_before_launch(spec, console)
    if dashboard_url:
        # Ray 2.60 clusters ask for a token (on by default for local ones).
        console.print(
            f"Ray dashboard: {dashboard_url} (job {spec.name!r}; log in with the token that "
            "`ray get-auth-token` prints)", highlight=False, soft_wrap=True,
        )
    else:
        console.print("Ray dashboard: not available")
    return _Session(tracking_uri, dashboard_url, plan, hardware_description(cluster), data, tokenizer)


def _drive(
    spec, session: _Session, book: SweepBook, tracker, make_tuner, console, started, cache_root, extra_callbacks, budget=None
) -> SweepRun:
    """Run the tuner with the driver callback (the book, then MLflow tracking, the adapter
    janitor and the terminal table; `extra_callbacks` after it); close every MLflow run
    whatever happens (a stop, an error, Ctrl-C). `make_tuner(trainable, callbacks)`
    builds the tuner, or restores it and the sweep's state (`sweep resume`). `budget`
    (a SweepBudget) says whether a cap, not a stop, ended the sweep."""
    import ray
    from ray import tune

    from sweeper.cluster import storage
    from sweeper.track.console import LiveTable
    from sweeper.run.driver import SweepDriver
    from sweeper.run.trial import run_trial

    sweep_dir = spec.sweep_dir
    console.print(
        f"Sweep {spec.name!r}: {spec.search.num_trials} trials, {session.plan.concurrent_trials} at a time "
        f"({session.plan.trial_resources.workers} worker(s) per trial), files in {sweep_dir}"
    )
    console.print(f"Budget: {session.plan.step_budget()}")
    console.print(f"MLflow: {session.tracking_uri} (experiment {spec.tracking.experiment!r}, run {spec.name!r})")
    trainable = tune.with_parameters(
        run_trial,
        trial_config=spec.trial_config(),
        max_failures=spec.search.max_failures,
        # Wrapped in a dict so that Ray passes the reference through configs un-fetched.
        data={"ref": ray.put(session.data)},
        cache_root=str(cache_root),
        trials_dir=storage.join(spec.storage_uri, "trials"),
    )
    # The trial's own process only waits on its TorchTrainer; the workers hold the CPUs
    # and GPUs. It stays on the head node (a lost worker node must not take it along).
    from sweeper.cluster.ray_adapter import ON_THE_HEAD_NODE

    trainable = tune.with_resources(trainable, {"cpu": 0, "memory": 1024**2, **ON_THE_HEAD_NODE})
    trainable.__name__ = trainable_name(spec)
    live_table = LiveTable(book, list(spec.search.parameters), console)
    listeners = [tracker, AdapterJanitor(book, spec.search.keep_best_adapters), live_table]
    driver = SweepDriver(book, listeners)  # make_tuner hands it the searcher's marks (_trial_marks)
    tuner = make_tuner(trainable, [driver, *extra_callbacks])
    pid_file = sweep_dir / DRIVER_PID_FILE
    pid_file.write_text(str(os.getpid()))
    interrupted = True
    try:
        with live_table:
            tuner.fit()
        tracker.discard_trials(driver.lost_trials())
        # A stop (SIGINT) makes fit() return early, with trials unfinished or unstarted.
        interrupted = book.unfinished(spec.search.num_trials)
        if budget is not None and budget.cut():  # a budget cap ended it, not a stop
            interrupted = False
    finally:
        cost = tracker.finish_sweep(interrupted=interrupted)
        pid_file.unlink(missing_ok=True)
    return SweepRun(spec, session.plan, book, session.dashboard_url, time.time() - started, cost, session.tracking_uri, interrupted)


def _trial_marks(search_alg, callbacks: list) -> None:
    """Where the driver in `callbacks` reads what the searcher marked a trial with (a
    startup trial, a warm start's source): the sweep's searcher inside `search_alg`'s
    wrappers, from its memory; nowhere where nothing is searched."""
    from sweeper.run.driver import SweepDriver
    from sweeper.search.searcher import optuna_searcher

    searcher = optuna_searcher(search_alg)
    for callback in callbacks:
        if isinstance(callback, SweepDriver) and searcher is not None:
            callback.trial_marks = searcher.marks


DRIVER_PID_FILE = "driver.pid"


def running_driver_pid(spec: SweepSpec) -> int | None:
    """The pid of the live `sweep start/resume` process driving this sweep, if any."""
    pid_file = spec.sweep_dir / DRIVER_PID_FILE
    if not pid_file.is_file():
        return None
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return None
    except PermissionError:
        pass
    return pid


def _refuse_if_running(spec: SweepSpec) -> None:
    pid = running_driver_pid(spec)
    if pid is not None:
        raise UserError(f"NAME: sweep {spec.name!r} is still running (driver pid {pid}); stop it first: sweep stop {spec.name}")


def stop_sweep(spec: SweepSpec, timeout_s: float = 300) -> int:
    """Ask the sweep's driver to stop (SIGINT: Tune stops the trials and saves its
    state), then wait for it to close its runs and exit. Returns the driver's pid."""
    pid = running_driver_pid(spec)
    if pid is None:
        raise UserError(f"NAME: sweep {spec.name!r} is not running (no live driver for {spec.sweep_dir})")
    os.kill(pid, signal.SIGINT)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if running_driver_pid(spec) != pid:
            return pid
        time.sleep(0.5)
    raise UserError(f"NAME: sweep {spec.name!r} (driver pid {pid}) did not stop within {timeout_s:.0f} s")
