"""Launch: start (or join) the Ray cluster, prepare the data once, and run the Tune sweep
in which every trial is a Ray Train TorchTrainer."""

from __future__ import annotations

import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from sweeper.cost import SweepCost
from sweeper.errors import UserError
from sweeper.plan import ClusterResources, SweepPlan, make_plan
from sweeper.progress import AdapterJanitor, BookKeeper, SweepBook
from sweeper.spec import SweepSpec, spec_to_yaml
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


def refuse_existing_sweep(spec: SweepSpec, overwrite: bool) -> None:
    """An existing sweep is never replaced unless asked (checked before Ray starts)."""
    sweep_dir = spec.sweep_dir
    if not overwrite and sweep_dir.exists() and any(sweep_dir.iterdir()):
        raise UserError(
            f"name: a sweep named {spec.name!r} already exists in {sweep_dir}; "
            f"continue it with sweep resume {spec.name}, pick a new name, or pass --overwrite to replace it"
        )


def prepare_sweep_dir(spec: SweepSpec, overwrite: bool) -> Path:
    """The sweep's folder, new. An existing sweep is never deleted unless asked."""
    refuse_existing_sweep(spec, overwrite)
    sweep_dir = spec.sweep_dir
    if sweep_dir.exists():
        shutil.rmtree(sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    # With its folder pinned, so that `sweep resume --sweep-dir` works from any directory.
    (sweep_dir / "sweep.yaml").write_text(spec_to_yaml(spec.model_copy(update={"output_dir": sweep_dir})))
    return sweep_dir


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
    # trial aborts its Train run first (sweeper/trial.py), which takes about a second.
    "TUNE_FUNCTION_THREAD_TIMEOUT_S": "20",
}


def start_warm_server(address: str | None):
    """The warm-start server for a local sweep on Linux (sweeper/warm_start.py), started
    first so that it imports torch while the data is tokenized and Ray starts; None when
    the sweep joins a cluster or the platform cannot host it."""
    from sweeper import warm_start

    local = not (address or os.environ.get("RAY_ADDRESS"))
    if not local or not warm_start.supported():
        return None
    return warm_start.Server(warm_start.new_socket_path())


def start_ray(address: str | None, warm_server=None):
    """Join `address` (or RAY_ADDRESS), else start a local cluster with its dashboard.
    The dashboard stays on: besides monitoring, Ray Train's placement-group cleanup
    needs it (without it finished trials kept their resources and sweeps hung).

    With a `warm_server` every worker process of the sweep's job is forked from it, with
    Ray, torch, transformers and peft imported already: a trial's new Train worker skips
    8-10 CPU-seconds of imports."""
    import ray

    if ray.is_initialized():
        if warm_server:
            warm_server.stop()  # the workers of a running Ray are started already
        return ray.get_runtime_context(), None
    from sweeper import warm_start

    runtime_env = {"env_vars": dict(TRIAL_SETTINGS)}
    if warm_server:
        warm_env = warm_start.runtime_env(warm_server.socket_path)
        runtime_env = {"py_executable": warm_env["py_executable"], "env_vars": {**TRIAL_SETTINGS, **warm_env["env_vars"]}}
    context = ray.init(
        address=address,
        include_dashboard=True,
        dashboard_host="127.0.0.1",
        log_to_driver=False,
        logging_level="WARNING",
        configure_logging=True,
        runtime_env=runtime_env,
    )
    url = context.dashboard_url
    return context, (f"http://{url}" if url and not url.startswith("http") else url)


def prepare_data(spec: SweepSpec, cache_root: Path):
    """Tokenize train and eval once for the whole sweep, as the task needs them (the
    tokenizer comes back too, to be saved with the sweep). Input errors surface here,
    before anything is written."""
    from trainables.data import tokenize_split
    from trainables.models import adapter_base, load_tokenizer, resolve_model_source

    source = resolve_model_source(spec.model.name_or_path, cache_root)
    tokenizer = load_tokenizer(adapter_base(source) or source)
    data = {split: tokenize_split(spec, split, tokenizer) for split in ("train", "eval")}
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
    from sweeper.tracking import MlflowTracker

    console = console or Console()
    started = time.time()
    refuse_existing_sweep(spec, overwrite)
    session = _open_session(spec, address, console, cache_root)
    sweep_dir = prepare_sweep_dir(spec, overwrite)
    session.tokenizer.save_pretrained(sweep_dir / "tokenizer")
    book = SweepBook(metric=spec.search.metric, goal=spec.search.goal, max_steps=spec.training.max_steps)
    tracker = MlflowTracker(spec, book, session.tracking_uri, session.hardware, session.plan.trial_resources)
    tracker.start_sweep(yaml_folder)

    def new_tuner(trainable, callbacks):
        from ray import tune

        from sweeper.search import make_search

        search_alg, scheduler, max_concurrent_trials = make_search(session.plan, sweep_dir)
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
            ),
            run_config=tune.RunConfig(name="tune", storage_path=str(sweep_dir), callbacks=callbacks, verbose=0),
        )

    return _drive(spec, session, book, tracker, new_tuner, console, started, cache_root, extra_callbacks or [])


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
    from sweeper.spec import load_spec
    from sweeper.tracking import MlflowTracker

    console = console or Console()
    started = time.time()
    spec = load_spec(sweep_dir / "sweep.yaml")
    _refuse_if_running(spec)
    if not (sweep_dir / "tune" / "tuner.pkl").is_file():
        raise UserError(f"NAME: {sweep_dir} has no Tune experiment to resume; start it again with sweep start --overwrite")
    session = _open_session(spec, address, console, cache_root)
    book = SweepBook(metric=spec.search.metric, goal=spec.search.goal, max_steps=spec.training.max_steps)
    tracker = MlflowTracker(spec, book, session.tracking_uri, session.hardware, session.plan.trial_resources)
    tracker.reattach()

    def restored_tuner(trainable, callbacks):
        from ray import tune

        from sweeper.promotion import PromotionASHA

        tuner = tune.Tuner.restore(str(sweep_dir / "tune"), trainable=trainable, resume_unfinished=True)
        # The restored run config carries the callbacks pickled by the first driver;
        # this driver's live ones replace them (Tuner has no public setter for this).
        tuner._local_tuner.get_run_config().callbacks = callbacks
        # The scheduler comes back as pickled at the start; ASHA by promotion rebuilds
        # each trial's rungs from the book instead (paused trials wait at theirs).
        scheduler = tuner._local_tuner._tune_config.scheduler
        if isinstance(scheduler, PromotionASHA):
            scheduler.for_resume(book)
        return tuner

    return _drive(spec, session, book, tracker, restored_tuner, console, started, cache_root, [])


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
    from sweeper.tracking import check_tracking_uri, hardware_description, resolve_tracking_uri

    tracking_uri = resolve_tracking_uri(spec.tracking.uri)
    check_tracking_uri(tracking_uri)
    warm_server = start_warm_server(address)
    try:
        data, tokenizer = prepare_data(spec, cache_root)
    except BaseException:
        if warm_server:
            warm_server.stop()
        raise
    _, dashboard_url = start_ray(address, warm_server)
    cluster = ClusterResources.from_ray()
    plan = make_plan(spec, cluster)
    console.print(f"Ray dashboard: {dashboard_url or 'not available'}")
    return _Session(tracking_uri, dashboard_url, plan, hardware_description(cluster), data, tokenizer)


def _drive(spec, session: _Session, book: SweepBook, tracker, make_tuner, console, started, cache_root, extra_callbacks) -> SweepRun:
    """Run the tuner with the book-keeping, tracking and terminal callbacks; close every
    MLflow run whatever happens (a stop, an error, Ctrl-C)."""
    import ray
    from ray import tune

    from sweeper.console import LiveTable
    from sweeper.trial import run_trial

    sweep_dir = spec.sweep_dir
    console.print(
        f"Sweep {spec.name!r}: {spec.search.num_trials} trials, {session.plan.concurrent_trials} at a time "
        f"({session.plan.trial_resources.workers} worker(s) per trial), files in {sweep_dir}"
    )
    console.print(f"Budget: {session.plan.step_budget()}")
    console.print(f"MLflow: {session.tracking_uri} (experiment {spec.tracking.experiment!r}, run {spec.name!r})")
    trainable = tune.with_parameters(
        run_trial,
        spec_json=spec.model_dump(mode="json"),
        # Wrapped in a dict so that Ray passes the reference through configs un-fetched.
        data={"ref": ray.put(session.data)},
        cache_root=str(cache_root),
        trials_dir=str(sweep_dir / "trials"),
    )
    # The trial's own process only waits on its TorchTrainer; the workers hold the CPUs
    # and GPUs. A token memory request keeps its bundle non-empty.
    trainable = tune.with_resources(trainable, {"cpu": 0, "memory": 1024**2})
    pid_file = sweep_dir / DRIVER_PID_FILE
    pid_file.write_text(str(os.getpid()))
    interrupted = True
    try:
        with LiveTable(book, list(spec.search.parameters), console) as live_table:
            keeper = BookKeeper(book)
            callbacks = [keeper, tracker, AdapterJanitor(book, spec.search.keep_best_adapters), live_table]
            tuner = make_tuner(trainable, callbacks + extra_callbacks)
            tuner.fit()
        tracker.discard_trials(keeper.lost_trials())
        # A stop (SIGINT) makes fit() return early, with trials unfinished or unstarted.
        interrupted = book.unfinished(spec.search.num_trials)
    finally:
        cost = tracker.finish_sweep(interrupted=interrupted)
        pid_file.unlink(missing_ok=True)
    return SweepRun(spec, session.plan, book, session.dashboard_url, time.time() - started, cost, session.tracking_uri, interrupted)


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
