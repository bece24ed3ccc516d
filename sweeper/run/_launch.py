"""Launch: a sweep from its spec to its finished runs, top to bottom: set up (tracking
store checked, data tokenized once, Ray up, the plan checked against the cluster), the
forecast, the sweep folder, the tracker, the budget, the watchers, the tuner, fit. Each
step returns what the next needs; start, resume and rebuild differ in how the tuner is
obtained: made anew, restored with Tune's state, made anew over MLflow's runs and the study."""

from __future__ import annotations

import functools
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from sweeper import driver_log
from sweeper.budget import SweepBudget
from sweeper.cluster import (LOCAL_CLUSTER, check_address, job_metadata, set_auth_mode_before_ray_loads, start_ray,
                             starts_own_cluster, storage)
from sweeper.cost import check_room_for, SweepCost
from sweeper.errors import UserError
from sweeper.plan import start_forecast, SweepInputs, prepare_inputs, ClusterResources, SweepPlan, make_plan
from sweeper.run._janitor import AdapterJanitor
from sweeper.run._sweep_dir import (
    DRIVER_LOG,
    DRIVER_PID_FILE,
    prepare_sweep_dir,
    publish_sweep_files,
    refuse_existing_sweep,
    refuse_if_read_only,
    refuse_if_running,
)
from sweeper.spec import SweepSpec, searched_paths, trials_text
from sweeper.track import SweepBook
from trainables.models import DEFAULT_CACHE_ROOT

logger = logging.getLogger(__name__)

__all__ = ["SweepRun", "run_sweep", "resume_sweep", "rebuild_sweep"]


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


@dataclass(frozen=True)
class Setup:
    """What the checks and set-up before a sweep give the steps after them."""

    spec: SweepSpec  # as sized and priced on the cluster (resources.gpus_per_worker: auto, the card)
    inputs: SweepInputs
    plan: SweepPlan
    tracking_uri: str
    dashboard_url: str | None
    hardware: str
    webhooks: list = field(default_factory=list)  # sweeper.notify.Webhook: the notify section's, URLs read


@dataclass(frozen=True)
class Watch:
    """What watches the tuner run: the driver callback (the book and its listeners), the
    live table, every Tune callback of the run, the driver first, and the notifier (one of
    the driver's listeners, told when the sweep starts and ends)."""

    driver: object  # sweeper.run._driver.SweepDriver
    table: object  # sweeper.track._console.LiveTable
    callbacks: list
    notifier: object  # sweeper.notify.Notifier


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
    resolves --address and RAY_ADDRESS; None: a local cluster of its own). Every input
    check (tracking store, cluster fit, data files) happens before the sweep folder or any
    MLflow run is written. `extra_callbacks` are more Tune callbacks for the driver (the
    benchmarks time results with one)."""
    _settle_ray_auth(address)
    from sweeper.run._trial import make_trainable
    from sweeper.search import make_search, read_warm_start

    started, console = time.time(), console or Console()
    refuse_existing_sweep(spec, overwrite)
    warm_start = read_warm_start(spec)
    for line in warm_start.lines():
        console.print(line, highlight=False, soft_wrap=True)
    setup = _set_up(spec, address or LOCAL_CLUSTER, console, cache_root)
    _print_sweep(setup, console)
    forecast = start_forecast(setup.plan, setup.inputs, console)
    sweep_dir = prepare_sweep_dir(spec, overwrite)
    driver_log.write_to(sweep_dir / DRIVER_LOG)
    setup.inputs.tokenizer.save_pretrained(sweep_dir / "tokenizer")
    publish_sweep_files(spec)
    tracker = _open_tracker(setup)
    tracker.start_sweep(yaml_folder)
    budget = SweepBudget.start(setup.plan, forecast, tracker)  # the forecast on the parent run, the caps on the book
    watch = _watch(setup, tracker, budget, console, extra_callbacks or [])
    trainable = make_trainable(setup.spec, setup.inputs.data, cache_root, forecast)
    search_alg, scheduler, slots = make_search(setup.plan, sweep_dir, warm_start)
    search_alg, stopper = budget.guarded(search_alg, None, tracker.book)
    watch.driver.use_marks_of(search_alg)
    tuner = _new_tuner(setup, trainable, watch, search_alg, scheduler, slots, stopper, setup.plan.trials or -1)
    return _fit(setup, tuner, trainable, watch, tracker, budget, started, resumed=False)


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
    from sweeper.cluster.ray_adapter import restore_tuner
    _settle_ray_auth(address)
    from sweeper.names import TrialState
    from sweeper.run._driver import DISK_FULL, rebuild_for_resume
    from sweeper.run._sweep_state import restart_unreadable_trials
    from sweeper.run._trial import make_trainable
    from sweeper.search import study_url
    from sweeper.spec import load_spec

    spec = load_spec(sweep_dir / "sweep.yaml")
    started, console = time.time(), console or Console()
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
        from sweeper.run._sweep_state import check_study, check_tune_state, unreadable_checkpoints
        from sweeper.search import study_file

        check_tune_state(Path(experiment), spec.name)
        check_study(study_file(spec.sweep_dir), Path(experiment), spec.name)
        unreadable = unreadable_checkpoints(Path(storage.join(spec.storage_uri, "trials")))
    setup = _set_up(spec, address or LOCAL_CLUSTER, console, cache_root)
    _print_sweep(setup, console)
    budget = SweepBudget()  # no forecast of its own (the first driver logged it); the caps come back with the searcher
    tracker = _open_tracker(setup)
    watch = _watch(setup, tracker, budget, console, [])
    trainable = make_trainable(setup.spec, setup.inputs.data, cache_root, None)
    # The book first: a trial a full disk stopped is an error to Tune, to continue all the same.
    tracker.reattach()
    restart_unreadable_trials(spec, tracker, unreadable, console)
    disk_full_trials = any(t.state == TrialState.STOPPED and t.error == DISK_FULL for t in tracker.book.trials.values())
    storage_filesystem, experiment_path = storage.filesystem(experiment)
    tuner, scheduler, search_alg, stopper = restore_tuner(
        experiment_path, trainable, watch.callbacks, storage_filesystem, resume_errored=disk_full_trials
    )
    # The caps keep counting what the killed driver's trials spent (the book is rebuilt from MLflow).
    budget.guarded(search_alg, stopper, tracker.book)
    rebuild_for_resume(tracker, scheduler, search_alg, study_url(spec.sweep_dir))
    watch.driver.use_marks_of(search_alg)
    return _fit(setup, tuner, trainable, watch, tracker, budget, started, resumed=True)


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
    _settle_ray_auth(address)
    from sweeper.run._sweep_state import forget_unfinished, set_aside_for_rebuild
    from sweeper.run._trial import make_trainable
    from sweeper.search import make_search
    from sweeper.spec import load_spec

    spec = load_spec(sweep_dir / "sweep.yaml")
    if storage.is_remote(spec.storage_uri):
        raise UserError(f"--rebuild: a sweep on object storage ({spec.storage_uri}) is resumed as Tune reads it; "
                        "run sweep resume without --rebuild")
    if spec.search.num_trials is None:
        raise UserError("--rebuild: a sweep without search.num_trials (trials until a budget cap) cannot be rebuilt: "
                        "its caps live in Tune's state; start it again with sweep start --overwrite")
    started, console = time.time(), console or Console()
    refuse_if_read_only(sweep_dir)
    refuse_if_running(spec)
    setup = _set_up(spec, address or LOCAL_CLUSTER, console, cache_root)
    budget = SweepBudget()
    tracker = _open_tracker(setup)
    book = tracker.book
    tracker.reattach()
    unfinished = [record for record in book.trials.values() if not record.finished]
    tracker.discard_trials(unfinished)
    set_aside_for_rebuild(spec.storage_uri, [record.trial_id for record in unfinished])
    remaining = max(0, setup.plan.trials - len(book.trials))
    console.print(
        f"Rebuilt from MLflow and the Optuna study: {len(book.trials)} finished trial(s) kept, {len(unfinished)} "
        f"unfinished started again as new trials; {remaining} trial(s) to run", highlight=False,
    )
    watch = _watch(setup, tracker, budget, console, [])
    trainable = make_trainable(setup.spec, setup.inputs.data, cache_root, None)
    search_alg, scheduler, slots = make_search(setup.plan, sweep_dir, None)
    forget_unfinished(search_alg, book, unfinished)
    search_alg, stopper = budget.guarded(search_alg, None, book)
    watch.driver.use_marks_of(search_alg)
    tuner = _new_tuner(setup, trainable, watch, search_alg, scheduler, slots, stopper, remaining)
    return _fit(setup, tuner, trainable, watch, tracker, budget, started, resumed=True)


# ------------------------------------------------------------------ the steps


def _settle_ray_auth(address: str | None) -> None:
    """Ray settles its auth mode as it first loads, and the launch's modules load it (the
    trial's trainable): a client joining a cluster sets its mode first."""
    if not starts_own_cluster(address or LOCAL_CLUSTER):
        set_auth_mode_before_ray_loads()


def _set_up(spec: SweepSpec, address: str, console: Console, cache_root: Path) -> Setup:
    """Checks and set-up shared by start and resume: the tracking store answers, the data
    is tokenized, Ray is up at `address` (LOCAL_CLUSTER or a cluster to join; on a cluster
    joined, object storage probed from every node), `resources.gpus_per_worker: auto` is
    sized on the cluster's GPU (the Setup's spec then holds the number), the plan fits the
    cluster; first, the notify section's webhooks, their URLs read. Nothing is written yet."""
    from sweeper.cost import check_before_launch, cluster_accelerator_types, launch_card_gib, with_gpu_packing
    from sweeper.cost import priced_on_cluster
    from sweeper.notify import resolve_webhooks
    from sweeper.track import check_tracking_uri, check_tracking_writable, hardware_description, resolve_tracking_uri

    webhooks, notes = resolve_webhooks(spec.notify, os.environ)  # a variable missing: refused before anything starts
    for note in notes:
        console.print(note, highlight=False, soft_wrap=True)
    check_address(address)  # seconds, before the data is tokenized
    tracking_uri = resolve_tracking_uri(spec.tracking.uri)
    check_tracking_uri(tracking_uri)
    check_tracking_writable(tracking_uri)
    if storage.is_remote(spec.storage_uri):
        storage.check_writable(spec.storage_uri)
    inputs = prepare_inputs(spec, cache_root)
    travelling = storage.travelling_settings(spec.storage_uri, os.environ)  # endpoint and region; never credentials
    _, dashboard_url = start_ray(address, job_metadata(spec, tracking_uri), env_vars=travelling)
    if not starts_own_cluster(address):
        probed = storage.check_every_node_reaches(spec.storage_uri, travelling)
        if probed:
            console.print(probed, highlight=False, soft_wrap=True)
    # resources.gpus_per_worker: auto, sized on the cluster's GPU: every step from here on
    # (plan, budget, tracking, the trials) reads the number it came to.
    spec, packing = with_gpu_packing(spec, launch_card_gib(spec))
    if packing is not None:
        console.print(packing.describe(), highlight=False, soft_wrap=True)
    # Priced by the card the trials run on (the forecast, budget and tracking read it).
    spec, priced = priced_on_cluster(spec, cluster_accelerator_types())
    if priced is not None:
        console.print(priced, highlight=False, soft_wrap=True)
    cluster = ClusterResources.from_ray()
    plan = make_plan(spec, cluster)
    check_room_for(spec, plan.concurrent_trials)
    check_before_launch(spec, console)
    return Setup(spec, inputs, plan, tracking_uri, dashboard_url, hardware_description(cluster), webhooks)


def _print_sweep(setup: Setup, console: Console) -> None:
    """The sweep and its plan: trials, concurrency, the rungs and the training steps."""
    spec, plan = setup.spec, setup.plan
    console.print(
        f"Sweep {spec.name!r}: {trials_text(spec)}, {plan.concurrent_trials} at a time "
        f"({plan.trial_resources.workers} worker(s) per trial); {plan.step_budget()}",
        highlight=False, soft_wrap=True,
    )


def _open_tracker(setup: Setup):
    """The sweep's MLflow tracker, over a new, empty book."""
    from sweeper.track import MlflowTracker

    spec = setup.spec
    book = SweepBook(metric=spec.search.metric, goal=spec.search.goal, max_steps=spec.training.max_steps)
    return MlflowTracker(spec, book, setup.tracking_uri, setup.hardware)


def _watch(setup: Setup, tracker, budget: SweepBudget, console: Console, extra_callbacks: list) -> Watch:
    """Where to look, said; the live table; the driver callback, which keeps the book and
    tells MLflow tracking, the adapter janitor, the budget's live forecast, the notifier
    and the table; the watchdog, which says why a sweep stands still; `extra_callbacks`
    after them."""
    from sweeper.notify import Notifier
    from sweeper.run._driver import SweepDriver
    from sweeper.run._watchdog import StallWatchdog
    from sweeper.track import LiveTable

    spec, book = setup.spec, tracker.book
    _print_where_to_look(setup, console)
    table = LiveTable(book, searched_paths(spec), console)
    notifier = Notifier(spec.name, book, setup.webhooks, spec.notify, budget.cap_line)
    listeners = [tracker, AdapterJanitor(book, spec.search.keep_best_adapters), *budget.listeners(table), notifier, table]
    driver = SweepDriver(book, listeners)
    watchdog = StallWatchdog(table, spec.sweep_dir / DRIVER_LOG)
    return Watch(driver, table, [driver, watchdog, *extra_callbacks], notifier)


def _print_where_to_look(setup: Setup, console: Console) -> None:
    """Where the sweep can be watched: the dashboard, MLflow, the sweep's folder."""
    spec = setup.spec
    # Ray 2.60 clusters ask for a token (on by default for local ones).
    dashboard = f"{setup.dashboard_url} (log in with the token `ray get-auth-token` prints)" if setup.dashboard_url else "not available"
    for line in (
        f"Ray dashboard: {dashboard}",
        f"MLflow: {setup.tracking_uri} (experiment {spec.tracking.experiment!r}, run {spec.name!r})",
        f"Sweep folder: {spec.sweep_dir} (the libraries' own output: {DRIVER_LOG})",
    ):
        console.print(line, highlight=False, soft_wrap=True)


def _new_tuner(setup: Setup, trainable, watch: Watch, search_alg, scheduler, slots: int, stopper, num_samples: int):
    """A new Tune experiment in the sweep's storage; `num_samples` -1: until the budget's
    guard says no more."""
    from ray import tune

    from sweeper.run._trial import trial_name

    spec = setup.spec
    storage_filesystem, storage_path = storage.filesystem(spec.storage_uri)
    return tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(
            search_alg=search_alg, scheduler=scheduler, num_samples=num_samples, max_concurrent_trials=slots,
            # A one-worker trial's process runs the next trial, instead of a new process
            # importing torch per trial (sweeper/run/_trial.py); a several-worker trial's
            # process ends with it, and its Train run with it.
            reuse_actors=spec.resources.in_trial_process,
            trial_name_creator=functools.partial(trial_name, spec.name),
        ),
        run_config=tune.RunConfig(
            name="tune", storage_path=storage_path, storage_filesystem=storage_filesystem,
            callbacks=watch.callbacks, verbose=0, stop=stopper,
            # A failed trial is retried from its latest checkpoint (sweeper/run/_trial.py).
            failure_config=tune.FailureConfig(max_failures=spec.search.max_failures),
        ),
    )


# Ray Tune's documented switch between its new output engine and the legacy reporter.
TUNE_NEW_OUTPUT_ENV = "RAY_AIR_NEW_OUTPUT"


def _fit(setup: Setup, tuner, trainable, watch: Watch, tracker, budget: SweepBudget, started: float,
         resumed: bool) -> SweepRun:
    """`_tune` between the notifications (sweeper/notify): the sweep started (or resumed), then
    how it ended, or the error that broke it."""
    notifier = watch.notifier
    notifier.sweep_started(f"{trials_text(setup.spec)}, {setup.plan.concurrent_trials} at a time", resumed)
    try:
        run = _tune(setup, tuner, trainable, watch, tracker, budget, started)
    except BaseException as error:
        notifier.sweep_broke(error, watch.table.console)
        raise
    notifier.sweep_ended(run)
    return run


def _tune(setup: Setup, tuner, trainable, watch: Watch, tracker, budget: SweepBudget, started: float) -> SweepRun:
    """Run the tuner, then search.confirm's reruns of `trainable` (sweeper/confirm); close every MLflow run
    whatever happens (a stop, an error, Ctrl-C); then the forecast against actual and what the caps cut."""
    from sweeper.confirm import confirm_best
    from sweeper.run._driver import disk_full_said_once, sigterm_stops_like_sigint

    spec, plan, book, driver = setup.spec, setup.plan, tracker.book, watch.driver
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
            with watch.table, sigterm_stops_like_sigint(stop_signals), disk_full_said_once():
                tuner.fit()
        except Exception as exc:  # the driver's own write to the full disk (Tune's state, the Optuna study)
            if not storage.disk_full(exc):
                raise
            stopped_for = storage.disk_full_line(spec.sweep_dir, spec.name)
        if driver.stopped_for_disk_full:  # a trial's checkpoint
            stopped_for = storage.disk_full_line(spec.sweep_dir, spec.name)
        stopped_for = stopped_for or tracker.gave_up  # the tracking server away too long
        tracker.discard_trials(driver.lost_trials())
        if spec.search.confirm is not None and stopped_for is None:  # the best configs again, over new seeds
            with watch.table, sigterm_stops_like_sigint(stop_signals), disk_full_said_once():
                confirm_best(setup, trainable, watch, tracker, budget)
        # A stop (SIGINT) makes fit() return early, with trials unfinished or unstarted;
        # a budget cap that ended it is no interruption.
        interrupted = stopped_for is not None or (book.unfinished(plan.trials) and not budget.cut())
    finally:
        try:
            cost = tracker.finish_sweep(interrupted=interrupted)
        except Exception as exc:  # a SQLite MLflow store on the full disk
            if not storage.disk_full(exc):
                raise
            raise UserError(
                f"tracking.uri: the MLflow store {setup.tracking_uri} is on a full disk; the sweep stopped. Free "
                f"space there, then continue it with: sweep resume {spec.name}"
            ) from None
        finally:
            pid_file.unlink(missing_ok=True)
    run = SweepRun(
        spec, plan, book, setup.dashboard_url, time.time() - started, cost, setup.tracking_uri, interrupted,
        stop_signal=stop_signals[0] if stop_signals else signal.SIGINT, stopped_for=stopped_for,
    )
    budget.finish(tracker, run)
    run.notes.extend(tracker.outage_notes())
    return run


#END
