"""Launch: a sweep from its spec to its finished runs, top to bottom. Set up the cluster
(the tracking store checked, Ray up), the inputs (the data tokenized once), the plan
(trials at once, checked against the cluster), the forecast and budget, the sweep
folder and the tracker; then the search, fit, finish. `run_sweep` and `resume_sweep`
differ only in how the tuner is obtained: made anew, or restored with the sweep's state.
Every step reads and fills one `SweepContext`."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from sweeper import driver_log
from sweeper.cluster import storage
from sweeper.cluster.connect import (
    LOCAL_CLUSTER, check_address, job_metadata, start_ray, starts_own_cluster,
)
from sweeper.cost.disk import check_room_for
from sweeper.cost.prices import SweepCost
from sweeper.errors import UserError
from sweeper.plan.inputs import SweepInputs, prepare_inputs
from sweeper.plan.sweep_plan import ClusterResources, SweepPlan, make_plan
from sweeper.budget import SweepBudget
from sweeper.run.janitor import AdapterJanitor
from sweeper.run.sweep_dir import (
    DRIVER_LOG,
    DRIVER_PID_FILE,
    prepare_sweep_dir,
    publish_sweep_files,
    refuse_existing_sweep,
    refuse_if_read_only,
    refuse_if_running,
)
from sweeper.spec.schema import SweepSpec, trials_text
from sweeper.track.book import SweepBook
from trainables.models import DEFAULT_CACHE_ROOT

logger = logging.getLogger(__name__)

__all__ = ["SweepRun", "run_sweep", "resume_sweep", "rebuild_sweep", "trainable_name", "trial_name"]


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
    stop_signal: int = signal.SIGINT  # what stopped an interrupted sweep (`sweep stop` sends SIGINT)
    stopped_for: str | None = None  # a fault that stopped it (a full disk), in one line with what to do


@dataclass
class SweepContext:
    """What the launch's steps share, filled in the order they run."""

    spec: SweepSpec
    address: str  # resolved at the CLI/API edge: LOCAL_CLUSTER or a cluster to join
    console: Console
    cache_root: Path
    started: float = field(default_factory=time.time)
    tracking_uri: str = ""
    inputs: SweepInputs | None = None
    dashboard_url: str | None = None
    plan: SweepPlan | None = None
    hardware: str = ""
    budget: SweepBudget | None = None
    book: SweepBook | None = None
    tracker: object = None  # sweeper.track.tracker.MlflowTracker


def run_sweep(
    spec: SweepSpec,
    *,
    yaml_folder: Path,
    address: str | None = LOCAL_CLUSTER,
    overwrite: bool = False,
    console: Console | None = None,
    cache_root: Path = DEFAULT_CACHE_ROOT,
    extra_callbacks: list | None = None,
) -> SweepRun:
    """Start a new sweep on the cluster at `address` (resolved by the caller, as the CLI
    resolves --address and RAY_ADDRESS; None: a local cluster of its own). Every input check (tracking store, cluster fit, data files)
    happens before the sweep folder or any MLflow run is written. `extra_callbacks` are
    more Tune callbacks for the driver (the benchmarks time results with one)."""
    from sweeper.search.warm_start import read_warm_start

    context = SweepContext(spec, address or LOCAL_CLUSTER, console or Console(), cache_root)
    refuse_existing_sweep(spec, overwrite)
    warm_start = read_warm_start(spec)
    _print_warm_start(warm_start, context.console)
    _setup_cluster_inputs_and_plan(context)
    _print_sweep(context)
    context.budget = SweepBudget.forecast_sweep(context.plan, context.inputs, context.console)
    sweep_dir = prepare_sweep_dir(spec, overwrite)
    driver_log.write_to(sweep_dir / DRIVER_LOG)
    context.inputs.tokenizer.save_pretrained(sweep_dir / "tokenizer")
    publish_sweep_files(spec)
    _setup_tracker(context)
    context.tracker.start_sweep(yaml_folder)
    context.budget.attach(context.book, context.tracker)  # forecast on the parent run, caps measured on the book

    def new_tuner(trainable, callbacks):
        from ray import tune

        from sweeper.cluster.ray_adapter import reuse_trial_actors
        from sweeper.search.searcher import make_search

        search_alg, scheduler, max_concurrent_trials = make_search(context.plan, sweep_dir, warm_start)
        _hand_the_driver_its_marks(search_alg, callbacks)
        storage_filesystem, storage_path = storage.filesystem(spec.storage_uri)
        return tune.Tuner(
            trainable,
            tune_config=tune.TuneConfig(
                search_alg=context.budget.searcher(search_alg),
                scheduler=scheduler,
                num_samples=context.plan.trials or -1,  # -1: until the budget's guard says no more
                max_concurrent_trials=max_concurrent_trials,
                # A trial's actor runs the next trial (run_trial aborts its Train run
                # when Tune stops it), instead of a new process importing torch per trial;
                # not on ray_adapter's public fallback, where a stop ends the actor.
                reuse_actors=reuse_trial_actors(),
                trial_name_creator=functools.partial(trial_name, spec.name),
            ),
            run_config=tune.RunConfig(
                name="tune",
                storage_path=storage_path,
                storage_filesystem=storage_filesystem,
                callbacks=callbacks,
                verbose=0,
                stop=context.budget.stopper(),
            ),
        )

    return _fit_and_finish(context, new_tuner, extra_callbacks or [])


def resume_sweep(
    sweep_dir: Path,
    *,
    address: str | None = LOCAL_CLUSTER,
    console: Console | None = None,
    cache_root: Path = DEFAULT_CACHE_ROOT,
) -> SweepRun:
    """Continue a sweep whose driver died or was stopped: finished trials stay as they
    are, unfinished ones continue from their latest checkpoint, the search continues
    with its history, and the same MLflow runs are reused."""
    from sweeper.spec.load import load_spec

    spec = load_spec(sweep_dir / "sweep.yaml")
    context = SweepContext(spec, address or LOCAL_CLUSTER, console or Console(), cache_root)
    refuse_if_read_only(sweep_dir)
    refuse_if_running(spec)
    driver_log.write_to(sweep_dir / DRIVER_LOG)
    experiment = storage.join(spec.storage_uri, "tune")
    if not storage.exists(storage.join(experiment, "tuner.pkl")):
        raise UserError(
            f"NAME: {experiment} has no Tune experiment to resume; rebuild the sweep from its MLflow runs and Optuna "
            f"study with: sweep resume {spec.name} --rebuild (or start it again with sweep start --overwrite)"
        )
    unreadable = []
    if not storage.is_remote(spec.storage_uri):  # before anything starts: every file resume reads
        from sweeper.run.sweep_state import check_study, check_tune_state, unreadable_checkpoints
        from sweeper.search.study import study_file

        check_tune_state(Path(experiment), spec.name)
        check_study(study_file(spec.sweep_dir), Path(experiment), spec.name)
        unreadable = unreadable_checkpoints(Path(storage.join(spec.storage_uri, "trials")))
    _setup_cluster_inputs_and_plan(context)
    _print_sweep(context)
    # No forecast of its own: the first driver logged it. The caps come back with the searcher.
    context.budget = SweepBudget(context.spec, context.plan, forecast=None)
    _setup_tracker(context)

    def restored_tuner(trainable, callbacks):
        from sweeper.cluster.ray_adapter import restore_tuner
        from sweeper.names import TrialState
        from sweeper.run.driver import DISK_FULL, rebuild_for_resume
        from sweeper.search.study import study_url

        storage_filesystem, experiment_path = storage.filesystem(experiment)
        # The book first: a trial a full disk stopped is an error to Tune, to continue all the same.
        context.tracker.reattach()
        _restart_unreadable_trials(context, unreadable)
        disk_full_trials = any(t.state == TrialState.STOPPED and t.error == DISK_FULL for t in context.book.trials.values())
        tuner, scheduler, searcher, stopper = restore_tuner(
            experiment_path, trainable, callbacks, storage_filesystem, resume_errored=disk_full_trials
        )
        # The caps keep counting what the killed driver's trials spent (the book is rebuilt from MLflow).
        searcher = context.budget.reattach(searcher, stopper, context.book)
        rebuild_for_resume(context.tracker, scheduler, searcher, study_url(spec.sweep_dir))
        _hand_the_driver_its_marks(searcher, callbacks)
        return tuner

    return _fit_and_finish(context, restored_tuner, [])


def rebuild_sweep(
    sweep_dir: Path,
    *,
    address: str | None = LOCAL_CLUSTER,
    console: Console | None = None,
    cache_root: Path = DEFAULT_CACHE_ROOT,
) -> SweepRun:
    """Continue a sweep whose Tune state is lost or unreadable from what outlives it, the
    MLflow runs and the Optuna study (`sweep resume --rebuild`): finished trials are kept as
    they are; unfinished ones start again from step 0 as new trials (their runs deleted,
    their Optuna trials told failed, their Train runs set aside); Tune's state is set aside
    (`tune.unreadable-<time>`) and a new Tune experiment runs the trials still to run, the
    search going on from the study's history."""
    from sweeper.run.sweep_state import set_aside
    from sweeper.spec.load import load_spec

    spec = load_spec(sweep_dir / "sweep.yaml")
    if storage.is_remote(spec.storage_uri):
        raise UserError(f"--rebuild: a sweep on object storage ({spec.storage_uri}) is resumed as Tune reads it; "
                        "run sweep resume without --rebuild")
    if spec.search.num_trials is None:
        raise UserError("--rebuild: a sweep without search.num_trials (trials until a budget cap) cannot be rebuilt: "
                        "its caps live in Tune's state; start it again with sweep start --overwrite")
    context = SweepContext(spec, address or LOCAL_CLUSTER, console or Console(), cache_root)
    refuse_if_read_only(sweep_dir)
    refuse_if_running(spec)
    _setup_cluster_inputs_and_plan(context)
    context.budget = SweepBudget(context.spec, context.plan, forecast=None)
    _setup_tracker(context)
    tracker, book = context.tracker, context.book
    tracker.reattach()
    unfinished = [record for record in book.trials.values() if not record.finished]
    tracker.discard_trials(unfinished)
    tune = Path(storage.join(spec.storage_uri, "tune"))
    if tune.exists():
        tune.rename(tune.with_name(f"tune.unreadable-{time.strftime('%Y%m%d-%H%M%S')}"))
    trials_folder = Path(storage.join(spec.storage_uri, "trials"))
    for record in unfinished:
        if (trials_folder / record.trial_id).exists():
            set_aside(trials_folder, record.trial_id)
    remaining = max(0, context.plan.trials - len(book.trials))
    context.console.print(
        f"Rebuilt from MLflow and the Optuna study: {len(book.trials)} finished trial(s) kept, {len(unfinished)} "
        f"unfinished started again as new trials; {remaining} trial(s) to run", highlight=False,
    )

    def new_tuner(trainable, callbacks):
        import optuna
        from ray import tune as ray_tune

        from sweeper.search.searcher import make_search, optuna_searcher

        search_alg, scheduler, max_concurrent_trials = make_search(context.plan, sweep_dir, None)
        searcher = optuna_searcher(search_alg)
        if searcher is not None:
            searcher.reconcile(book)
            for record in unfinished:  # started again as new trials: these Optuna trials end here
                if record.trial_id in searcher.trials and record.trial_id not in searcher.finished:
                    searcher.study.tell(searcher.trials[record.trial_id][0], state=optuna.trial.TrialState.FAIL)
                    searcher.finished.add(record.trial_id)
        _hand_the_driver_its_marks(search_alg, callbacks)
        storage_filesystem, storage_path = storage.filesystem(spec.storage_uri)
        return ray_tune.Tuner(
            trainable,
            tune_config=ray_tune.TuneConfig(
                search_alg=search_alg, scheduler=scheduler, num_samples=remaining,
                max_concurrent_trials=max_concurrent_trials, reuse_actors=True,
                trial_name_creator=functools.partial(trial_name, spec.name),
            ),
            run_config=ray_tune.RunConfig(
                name="tune", storage_path=storage_path, storage_filesystem=storage_filesystem, callbacks=callbacks,
                verbose=0,
            ),
        )

    return _fit_and_finish(context, new_tuner, [])


def _restart_unreadable_trials(context: SweepContext, unreadable: list) -> None:
    """Trials to continue whose checkpoint does not read start again from step 0: said in
    the output, tagged on their run (Tag.RESTARTED), their book's curve begun anew. A
    finished trial's unreadable adapter is only said (promotion cannot use it)."""
    from sweeper.names import Tag
    from sweeper.run.sweep_state import set_aside

    trials_folder = Path(storage.join(context.spec.storage_uri, "trials"))
    for problem in unreadable:
        record = context.book.trials.get(problem.trial_id)
        if record is not None and record.finished:
            context.console.print(f"[yellow]note:[/yellow] trial {record.number}: its adapter checkpoint "
                                  f"{escape(str(problem.path))} is unreadable ({escape(problem.problem)})", soft_wrap=True)
            continue
        set_aside(trials_folder, problem.trial_id)
        context.console.print(f"[yellow]note:[/yellow] {escape(problem.note(record.number if record else None))}",
                              highlight=False, soft_wrap=True)
        if record is not None:
            record.history = []
            run_id = context.tracker.child_run_ids.get(problem.trial_id)
            if run_id:
                context.tracker.client.set_tag(run_id, Tag.RESTARTED, f"from step 0: checkpoint unreadable ({problem.problem})")


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


# ------------------------------------------------------------------ the steps


def _print_warm_start(warm_start, console: Console) -> None:
    for note in warm_start.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False, soft_wrap=True)
    if warm_start:
        console.print(
            f"Warm start: {len(warm_start.trials)} earlier trials added to the search, "
            f"{len(warm_start.first_configs)} of their best configs run first"
        )


def _setup_cluster_inputs_and_plan(context: SweepContext) -> None:
    """Checks and set-up shared by start and resume: the tracking store answers, the data
    is tokenized, Ray is up (on a cluster joined, object storage probed from every node),
    `resources.gpus_per_worker: auto` is sized on the cluster's GPU (context.spec then
    holds the number), the plan fits the cluster. Nothing is written yet."""
    from sweeper.cost.memory import check_before_launch, cluster_accelerator_types, launch_card_gib, with_gpu_packing
    from sweeper.cost.prices import priced_on_cluster
    from sweeper.track.mlflow_store import (
        check_tracking_uri,
        check_tracking_writable,
        hardware_description,
        resolve_tracking_uri,
    )

    spec, console = context.spec, context.console
    check_address(context.address)  # seconds, before the data is tokenized
    context.tracking_uri = resolve_tracking_uri(spec.tracking.uri)
    check_tracking_uri(context.tracking_uri)
    check_tracking_writable(context.tracking_uri)
    if storage.is_remote(spec.storage_uri):
        storage.check_writable(spec.storage_uri)
    context.inputs = prepare_inputs(spec, context.cache_root)
    # The storage's endpoint and region travel with the job (a node started before they
    # were set would write elsewhere); credentials never do.
    travelling = storage.travelling_settings(spec.storage_uri, os.environ)
    _, context.dashboard_url = start_ray(context.address, job_metadata(spec, context.tracking_uri), env_vars=travelling)
    if not starts_own_cluster(context.address):
        import ray

        nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
        storage.check_reachable_by_every_node(spec.storage_uri, nodes, storage.read_mounts())
        storage.check_from_every_node(spec.storage_uri)
        if travelling:
            console.print(
                f"Storage {spec.storage_uri}: written from every node (probed); sent with the job: "
                + ", ".join(f"{name}={value}" for name, value in sorted(travelling.items())),
                highlight=False, soft_wrap=True,
            )
    # resources.gpus_per_worker: auto, sized on the cluster's GPU: every step from here on
    # (plan, budget, tracking, the trials) reads the number it came to.
    context.spec, packing = with_gpu_packing(spec, launch_card_gib(spec))
    if packing is not None:
        console.print(packing.describe(), highlight=False, soft_wrap=True)
    # Priced by the card the trials run on (the forecast, budget and tracking read it).
    context.spec, priced = priced_on_cluster(context.spec, cluster_accelerator_types())
    spec = context.spec
    if priced is not None:
        console.print(priced, highlight=False, soft_wrap=True)
    cluster = ClusterResources.from_ray()
    context.plan = make_plan(spec, cluster)
    check_room_for(spec, context.plan.concurrent_trials)
    context.hardware = hardware_description(cluster)
    check_before_launch(spec, console)


def _setup_tracker(context: SweepContext) -> None:
    from sweeper.track.tracker import MlflowTracker

    spec = context.spec
    context.book = SweepBook(metric=spec.search.metric, goal=spec.search.goal, max_steps=spec.training.max_steps)
    context.tracker = MlflowTracker(spec, context.book, context.tracking_uri, context.hardware)


def _trainable(context: SweepContext):
    """The function each trial runs, with what every trial shares: its config before the
    sampled values, the tokenized data (in Ray's object store, once) and where to write."""
    import ray
    from ray import tune

    from sweeper.run.trial import TRIAL_ACTOR_RESOURCES, run_trial, worker_start_timeout

    spec = context.spec
    forecast = context.budget.forecast  # a resumed sweep has none: its first driver's
    timeout_s = worker_start_timeout(
        spec.resources.worker_start_timeout_s, forecast.timing.setup_seconds if forecast else None
    )
    logger.info(
        "A trial whose workers are not placed and started within %.0f s fails, saying why "
        "(resources.worker_start_timeout_s)", timeout_s,
    )
    trainable = tune.with_parameters(
        run_trial,
        trial_config=spec.trial_config(),
        max_failures=spec.search.max_failures,
        # Wrapped in a dict so that Ray passes the reference through configs un-fetched.
        data={"ref": ray.put(context.inputs.data)},
        cache_root=str(context.cache_root),
        trials_dir=storage.join(spec.storage_uri, "trials"),
        worker_start_timeout_s=timeout_s,
    )
    trainable = tune.with_resources(trainable, TRIAL_ACTOR_RESOURCES)
    trainable.__name__ = trainable_name(spec)
    return trainable


# Ray Tune's documented switch between its new output engine and the legacy reporter.
TUNE_NEW_OUTPUT_ENV = "RAY_AIR_NEW_OUTPUT"


def _fit_and_finish(context: SweepContext, make_tuner, extra_callbacks: list) -> SweepRun:
    """Run the tuner with the driver callback (the book, then MLflow tracking, the adapter
    janitor and the terminal table; `extra_callbacks` after it); close every MLflow run
    whatever happens (a stop, an error, Ctrl-C); then the forecast against actual and
    what the caps cut. `make_tuner(trainable, callbacks)` builds the tuner, or restores
    it and the sweep's state (`sweep resume`)."""
    from sweeper.run.driver import SweepDriver
    from sweeper.run.release import ReleaseFinishedRuns
    from sweeper.run.watchdog import StallWatchdog
    from sweeper.track.console import LiveTable

    spec, plan, book, tracker, console = context.spec, context.plan, context.book, context.tracker, context.console
    _print_where_to_look(context)
    live_table = LiveTable(book, list(spec.search.parameters), console)
    listeners = [tracker, AdapterJanitor(book, spec.search.keep_best_adapters), *context.budget.listeners(live_table), live_table]
    driver = SweepDriver(book, listeners)  # make_tuner hands it the searcher's marks
    watchdog = StallWatchdog(live_table, spec.sweep_dir / DRIVER_LOG)
    tuner = make_tuner(_trainable(context), [driver, ReleaseFinishedRuns(), watchdog, *extra_callbacks])
    pid_file = spec.sweep_dir / DRIVER_PID_FILE
    pid_file.write_text(str(os.getpid()))
    interrupted = True
    stop_signals: list[int] = []
    stopped_for = None  # a fault that stopped the sweep (a full disk), in one line
    try:
        # Tune's progress output (its experiment box, the results folder, a TensorBoard
        # hint) is its legacy reporter's at verbose=0 with RAY_AIR_NEW_OUTPUT=0: none;
        # the live table is the sweep's.
        os.environ[TUNE_NEW_OUTPUT_ENV] = "0"
        try:
            with live_table, _sigterm_stops_like_sigint(stop_signals), _disk_full_said_once():
                tuner.fit()
        except Exception as exc:  # the driver's own write to the full disk (Tune's state, the Optuna study)
            if not storage.disk_full(exc):
                raise
            stopped_for = storage.disk_full_line(spec.sweep_dir, spec.name)
        if driver.stopped_for_disk_full:  # a trial's checkpoint
            stopped_for = storage.disk_full_line(spec.sweep_dir, spec.name)
        stopped_for = stopped_for or tracker.gave_up  # the tracking server away too long
        tracker.discard_trials(driver.lost_trials())
        # A stop (SIGINT) makes fit() return early, with trials unfinished or unstarted;
        # a budget cap that ended it is no interruption.
        interrupted = stopped_for is not None or (book.unfinished(plan.trials) and not context.budget.cut())
    finally:
        try:
            cost = tracker.finish_sweep(interrupted=interrupted)
        except Exception as exc:  # a SQLite MLflow store on the full disk
            if not storage.disk_full(exc):
                raise
            raise UserError(
                f"tracking.uri: the MLflow store {context.tracking_uri} is on a full disk; the sweep stopped. Free "
                f"space there, then continue it with: sweep resume {spec.name}"
            ) from None
        finally:
            pid_file.unlink(missing_ok=True)
    run = SweepRun(
        spec, plan, book, context.dashboard_url, time.time() - context.started, cost, context.tracking_uri, interrupted,
        stop_signal=stop_signals[0] if stop_signals else signal.SIGINT, stopped_for=stopped_for,
    )
    context.budget.finish(tracker, run)
    run.notes.extend(tracker.outage_notes())
    return run


class _DiskFullTraceback(logging.Filter):
    """Drops Tune's and Ray's tracebacks of an error that is a full disk: the sweep says it
    in one line when it stops (sweeper/cluster/storage.py: disk_full_line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage() + ("".join(traceback.format_exception(*record.exc_info)) if record.exc_info else "")
        return not any(marker in text for marker in storage.DISK_FULL_TEXTS)


# Where Tune logs a failed trial's traceback, and Ray an error no one fetched.
_TRACEBACK_LOGGERS = ("ray.tune.execution.tune_controller", "ray._private.worker")


@contextlib.contextmanager
def _disk_full_said_once():
    quiet = _DiskFullTraceback()
    loggers = [logging.getLogger(name) for name in _TRACEBACK_LOGGERS]
    for each in loggers:
        each.addFilter(quiet)
    try:
        yield
    finally:
        for each in loggers:
            each.removeFilter(quiet)


@contextlib.contextmanager
def _sigterm_stops_like_sigint(received: list[int]):
    """While the tuner runs, SIGTERM (a job scheduler, `kill`, a container stop, a Ray Job
    stopped) does what SIGINT does: Tune's own SIGINT handler, which `fit()` installs, stops
    the trials, saves their checkpoints and Tune's state, and `fit()` returns; a second one
    skips that, as a second Ctrl-C does. `received` gets the signal's number, for the
    exit status (128 + 15). Ray's driver handler (`sys.exit` on SIGTERM, set by
    `ray.init`) is put back afterwards."""
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return

    def on_sigterm(signum, frame):
        received.append(signum)
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:  # SIG_DFL or SIG_IGN: none of Python's; stop as Python stops on SIGINT
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _print_sweep(context: SweepContext) -> None:
    """The sweep and its plan: trials, concurrency, the rungs and the training steps."""
    spec, plan = context.spec, context.plan
    context.console.print(
        f"Sweep {spec.name!r}: {trials_text(spec)}, {plan.concurrent_trials} at a time "
        f"({plan.trial_resources.workers} worker(s) per trial); {plan.step_budget()}",
        highlight=False, soft_wrap=True,
    )


def _print_where_to_look(context: SweepContext) -> None:
    """Where the sweep can be watched: the dashboard, MLflow, the sweep's folder."""
    spec, console = context.spec, context.console
    if context.dashboard_url:
        # Ray 2.60 clusters ask for a token (on by default for local ones).
        dashboard = f"{context.dashboard_url} (log in with the token `ray get-auth-token` prints)"
    else:
        dashboard = "not available"
    for line in (
        f"Ray dashboard: {dashboard}",
        f"MLflow: {context.tracking_uri} (experiment {spec.tracking.experiment!r}, run {spec.name!r})",
        f"Sweep folder: {spec.sweep_dir} (the libraries' own output: {DRIVER_LOG})",
    ):
        console.print(line, highlight=False, soft_wrap=True)


def _hand_the_driver_its_marks(search_alg, callbacks: list) -> None:
    """The driver in `callbacks` reads what the searcher marked each trial with (a startup
    trial, a warm start's source) from the sweep's searcher inside `search_alg`'s
    wrappers, in memory; nothing where nothing is searched. Called once the searcher
    exists: on resume, only `restore_tuner` (which needs the driver) makes it."""
    from sweeper.run.driver import SweepDriver
    from sweeper.search.searcher import optuna_searcher

    searcher = optuna_searcher(search_alg)
    for callback in callbacks:
        if isinstance(callback, SweepDriver) and searcher is not None:
            callback.trial_marks = searcher.marks
