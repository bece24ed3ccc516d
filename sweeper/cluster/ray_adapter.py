"""The one place where sweeper uses private parts of Ray (MLflow's: sweeper/track/
_mlflow_adapter.py). Each entry says what it relies on, why no public API does it, and its
public fallback. The private paths are taken only on the Ray they were tested against
(`TESTED_RAY`) and unless `SWEEPER_RAY_PUBLIC_ONLY=1` (`uses_private_ray()`); the driver
hands that setting to its trials. tests/unit/test_ray_adapter.py runs the fallbacks,
tests/integration/test_ray_adapter.py the private paths against a real cluster. Nothing is
imported at module level.

Ray Train (a trial's TorchTrainer, sweeper/run/_trial.py):
- `TrialTrainer`: `StoppableTorchTrainer` runs Train's controller in the Tune trial's own
  actor (no public option does; Train's own starts an actor per run), leaves out Ray
  Data's per-run actor without Ray Datasets, shares one placement-group cleaner per trial
  actor, and `fit_until(stop)` aborts the run when `stop` is set without ending the actor
  Tune reuses (Train's `abort` ends its process). `worker_repr` names the run's Train
  workers in the dashboard: Train creates them from a private class with no option for
  a Repr. Fallback: `PublicTorchTrainer` (Train's `fit()`, no actor reuse, reports through
  Ray's `TuneReportCallback`); a stopped trial's workers then free their resources only
  once Tune has ended its actor, and the trial, not Train's controller, retries a run whose
  workers failed (sweeper/run/_trial.py says why).
- `workers_never_started(error)`: Train's `WorkerGroupStartupTimeoutError`, not exported;
  the trial names the resources it waited for. Fallback: False (Train's own message).
- `tune_trial_number`: a trial's number, from Tune's experiment tag ("<n>_<params>").
- `tune_stop_event`: the event Tune sets when it stops a function trial. Fallback: an
  event nobody sets.
Ray Tune (`sweep resume`; sweeper/run/_launch.py, sweeper/search/_asha.py, _tune_state.py):
- `restore_tuner`: `Tuner.restore` takes no callbacks and hands out neither scheduler,
  searcher nor stopper, whose state the caller rebuilds. Fallback: none; `sweep resume`
  says it needs the tested Ray.
- `save_tune_state`: Tune saves its state every 10 s or more; a scheduler saves it when a
  trial is added, so that a driver killed just after is resumable. Fallback: Tune's period.
- `hold_restored_trial`: a restored unfinished trial comes back PENDING and Tune starts
  every PENDING trial; a scheduler keeps it PAUSED until it picks it.
- `forget_running_averages`: Tune keeps each ended trial's last 5 and 10 values of every
  reported number, in the driver and in every experiment checkpoint.
Ray core: `NO_WORKER_EVENT_FILES` (RayConfig `event_log_reporter_enabled` in the job's
runtime env: no event file per worker process for the dashboard agent to re-read), and
`ON_THE_HEAD_NODE` (below). Ray client: `ray_address_file`, where `ray start` writes the
address `--address auto` joins, probed so that a dead head is refused in seconds.
Fallback: `<RAY_TMPDIR or the system temp folder>/ray/ray_current_cluster`.
"""

from __future__ import annotations

import functools
import os
import threading

__all__ = [
    "TESTED_RAY",
    "PUBLIC_ONLY_ENV",
    "uses_private_ray",
    "TrialTrainer",
    "reuse_trial_actors",
    "reports_in_trial_thread",
    "StoppableTorchTrainer",
    "PublicTorchTrainer",
    "workers_never_started",
    "tune_stop_event",
    "tune_trial_number",
    "restore_tuner",
    "save_tune_state",
    "hold_restored_trial",
    "ray_address_file",
    "ON_THE_HEAD_NODE",
]

# How often a stoppable run checks whether it was asked to stop.
STOP_POLL_SECONDS = 0.05

# The Ray whose private parts the entries below were written and tested against (major, minor).
TESTED_RAY = (2, 60)
# "1": take every public fallback, whatever the Ray (their test sets it).
PUBLIC_ONLY_ENV = "SWEEPER_RAY_PUBLIC_ONLY"


def uses_private_ray() -> bool:
    """Whether the private paths are taken: the installed Ray is TESTED_RAY and
    PUBLIC_ONLY_ENV is not "1". Read from the environment on each call; a trial's
    processes inherit it from the driver that started their local cluster."""
    if os.environ.get(PUBLIC_ONLY_ENV) == "1":
        return False
    from importlib.metadata import version

    major, minor, *_ = (version("ray").split(".") + ["0", "0"])
    return (int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)) == TESTED_RAY


def reuse_trial_actors() -> bool:
    """TuneConfig(reuse_actors=...): a trial's actor runs the next trial only where its
    Train run can be aborted in place (StoppableTorchTrainer); else Tune ends a stopped
    trial by ending its actor, and the Train controller and workers it owns with it."""
    return uses_private_ray()


def reports_in_trial_thread() -> bool:
    """Whether the trial's Train controller runs in the trial's own thread (a Train
    callback there may call `tune.report`); else it runs in an actor of its own and
    reports go through Ray's `TuneReportCallback`."""
    return uses_private_ray()


# ---------------------------------------------------------------- Ray Train


def __getattr__(name: str):
    if name == "StoppableTorchTrainer":
        return _stoppable_torch_trainer()
    if name == "PublicTorchTrainer":
        return _public_torch_trainer()
    if name == "TrialTrainer":
        return _stoppable_torch_trainer() if uses_private_ray() else _public_torch_trainer()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _public_torch_trainer() -> type:
    """Train's TorchTrainer with the `fit_until` of StoppableTorchTrainer, public API only."""
    from ray.train.torch import TorchTrainer

    class PublicTorchTrainer(TorchTrainer):
        """`fit()`, its controller an actor of its own; `stop` and `worker_repr` are not
        used (Tune ends a stopped trial's actor, and the controller with it)."""

        def fit_until(self, stop: threading.Event, worker_repr: str | None = None):
            return self.fit()

    PublicTorchTrainer.__module__, PublicTorchTrainer.__qualname__ = __name__, "PublicTorchTrainer"
    return PublicTorchTrainer


@functools.cache
def _stoppable_torch_trainer() -> type:
    """Built on first use, so that importing this module loads neither Ray nor torch."""
    import asyncio

    import ray
    from ray.train.torch import TorchTrainer
    from ray.train.v2._internal.callbacks import DatasetsCallback
    from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback
    from ray.train.v2._internal.execution.controller import TrainController

    class SharedPlacementGroupCleaner(PlacementGroupCleanerCallback):
        """Train's safety net, one per trial actor instead of one per run: a detached
        actor that watches the process running the controller and removes the placement
        group last registered with it should that process die without ending its run (a
        placement group outlives its creator actor until the job ends; Tune kills a
        trial actor at the end of a sweep, or when it cannot reuse it). It ends when
        that process dies. The trial actor runs one run at a time."""

        cleaner_of_this_process = None

        def after_controller_start(self, train_run_context) -> None:
            cleaner = SharedPlacementGroupCleaner.cleaner_of_this_process
            if cleaner is None:
                super().after_controller_start(train_run_context)
                SharedPlacementGroupCleaner.cleaner_of_this_process = self._cleaner
            else:
                self._cleaner = cleaner
                self._controller_actor_id = ray.get_runtime_context().get_actor_id()

        async def before_controller_shutdown(self) -> None:
            """Kept watching for the next run: the run removes its own placement group."""

        def before_controller_abort(self) -> None:
            """As above."""

    class StoppableTorchTrainer(TorchTrainer):
        """A TorchTrainer whose controller runs in the calling thread, and which aborts
        its run (workers killed, placement group removed) when `stop` is set."""

        _stop: threading.Event | None = None
        _worker_repr: str | None = None

        def fit_until(self, stop: threading.Event, worker_repr: str | None = None):
            """`fit()`, unless `stop` is set first: then the run is aborted and this
            returns its Result, with no error, instead of raising. `worker_repr`: what
            the dashboard shows as the Repr of the run's Train workers."""
            self._stop, self._worker_repr = stop, worker_repr
            return self.fit()

        def _create_default_callbacks(self):
            callbacks = []
            for callback in super()._create_default_callbacks():
                if isinstance(callback, DatasetsCallback) and not self.datasets:
                    continue
                if isinstance(callback, PlacementGroupCleanerCallback):
                    callback = SharedPlacementGroupCleaner()
                callbacks.append(callback)
            return callbacks

        def _initialize_and_run_controller(self, **controller_init_kwargs):
            controller = TrainController(**controller_init_kwargs)
            if self._worker_repr:
                controller.worker_group_cls = worker_group_with_repr(self._worker_repr)
            try:
                asyncio.run(self._run_until_stopped(controller))
            except BaseException:
                # Tune stopped the trial while a report was waiting for it (the session
                # ends the thread with SystemExit), or the loop itself failed.
                abort_controller(controller)
                raise
            return controller.get_result()

        async def _run_until_stopped(self, controller) -> None:
            run = asyncio.ensure_future(controller.run())
            while not run.done():
                if self._stop is not None and self._stop.is_set():
                    run.cancel()
                    try:
                        await run
                    except asyncio.CancelledError:
                        pass
                    abort_controller(controller)
                    return
                await asyncio.wait({run}, timeout=STOP_POLL_SECONDS)
            run.result()

    # Pickled by reference, found again through this module's __getattr__.
    StoppableTorchTrainer.__module__, StoppableTorchTrainer.__qualname__ = __name__, "StoppableTorchTrainer"
    return StoppableTorchTrainer


def worker_group_with_repr(worker_repr: str) -> type:
    """Train's WorkerGroup, creating its workers from a RayTrainWorker subclass whose
    `__repr__` is `worker_repr`: Ray reads an actor's Repr once, when it is created. A
    class per run; Ray gives every class it exports an id of its own, so classes of one
    name do not collide, and the Class column still says RayTrainWorker."""
    from ray.train.v2._internal.execution.worker_group import WorkerGroup
    from ray.train.v2._internal.execution.worker_group.worker import RayTrainWorker

    def __repr__(self) -> str:
        return worker_repr

    worker_class = type("RayTrainWorker", (RayTrainWorker,), {"__repr__": __repr__})
    return type("WorkerGroup", (WorkerGroup,), {"_worker_cls": worker_class})


def abort_controller(controller) -> None:
    """Train's `TrainController.abort` without its last step, which ends the process it
    runs in: abort callbacks, the worker group aborted (its placement group removed),
    the run's state ABORTED."""
    from ray.train.v2._internal.execution.controller.state import AbortedState

    if controller.get_state().is_terminal():
        return
    controller._controller_callback_manager.invoke_best_effort("before_controller_abort")
    worker_group = controller.get_worker_group()
    if worker_group is not None and worker_group.has_started():
        worker_group.abort()
    controller._set_state(AbortedState())


def workers_never_started(error: BaseException) -> bool:
    """Whether `error` (what a TorchTrainer's fit raised) says the run's workers could not
    be placed and started within Train's worker start timeout (False off the tested Ray)."""
    if not uses_private_ray():
        return False
    from ray.train.v2._internal.exceptions import WorkerGroupStartupTimeoutError

    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, WorkerGroupStartupTimeoutError):
            return True
        seen.add(id(error))
        error = getattr(error, "controller_failure", None) or error.__cause__
    return False


def tune_stop_event() -> threading.Event:
    """Set by Tune when it stops the calling function trial or hands its actor to the
    next trial: the function-trainable session's (off the tested Ray, an event nobody sets)."""
    if not uses_private_ray():
        return threading.Event()
    from ray.train._internal.session import get_session

    return get_session().stop_event


def tune_trial_number(trial) -> int:
    """The number of a Tune trial in its sweep: 1 for the first trial the search
    created, counting on through `sweep resume` (Tune saves its generator's counter).
    Tune's experiment tag starts with the counter: its search generator (a searched
    sweep) counts from 1 and appends the suggested values ("3_training.learning_rate=
    0.0003"); its basic variant generator (a sweep that searches nothing) counts from 0
    and appends nothing ("2")."""
    counter, _, values = trial.experiment_tag.partition("_")
    return int(counter) + (0 if values else 1)


# ---------------------------------------------------------------- Ray Tune


def restore_tuner(path: str, trainable, callbacks: list, storage_filesystem=None, resume_errored: bool = False):
    """`Tuner.restore(path, trainable, resume_unfinished=True)` with `callbacks` in place
    of the ones pickled by the first driver (`resume_errored`: errored trials continue
    from their last checkpoint too). Returns (tuner, scheduler, search_alg, stopper): the
    restored objects Tune will use, for the caller to rebuild their state. Off the tested
    Ray: a UserError (key NAME), as no public API hands these out."""
    from ray import tune

    if not uses_private_ray():
        from sweeper.errors import UserError

        raise UserError(
            f"NAME: sweep resume restores Tune's state through Ray {TESTED_RAY[0]}.{TESTED_RAY[1]} "
            f"internals; this is Ray {ray_version()} (or {PUBLIC_ONLY_ENV}=1); start the sweep again"
        )

    tuner = tune.Tuner.restore(
        path, trainable=trainable, resume_unfinished=True, resume_errored=resume_errored,
        storage_filesystem=storage_filesystem,
    )
    run_config = tuner._local_tuner.get_run_config()
    run_config.callbacks = callbacks
    tune_config = tuner._local_tuner._tune_config
    return tuner, tune_config.scheduler, tune_config.search_alg, run_config.stop


def save_tune_state(tune_controller) -> None:
    """Save Tune's experiment state (trials, searcher, callbacks) and sync it to storage
    now, whatever its period (off the tested Ray: nothing, Tune saves on its own period).
    `tune_controller`: what Tune hands a scheduler."""
    if not uses_private_ray():
        return
    controller = getattr(tune_controller, "_tune_controller", tune_controller)  # past its wrapper
    controller.checkpoint(force=True, wait=True)


def hold_restored_trial(trial) -> None:
    """Keep a restored PENDING trial from being started: called in a scheduler's
    `on_trial_add` (Tune files the trial under the status it has after that call), it
    waits PAUSED until the scheduler picks it in `choose_trial_to_run`, or stops it."""
    from ray.tune.experiment import Trial

    trial.set_status(Trial.PAUSED)


def forget_running_averages(trial) -> None:
    """Drop the recent values Tune keeps for an ended trial's running averages (its
    "last-5-avg" and "last-10-avg" figures stay, with min, max and last). Call it only
    once Tune has said the trial completed: another result would find no deque to append to."""
    trial.run_metadata.metric_n_steps = {}  # its setattr drops the cached JSON too


# Ray core's own setting (RayConfig `event_log_reporter_enabled`): see the docstring.
NO_WORKER_EVENT_FILES = {"RAY_event_log_reporter_enabled": "0"}

# Ray gives its head node this resource (`ray._common.constants.HEAD_NODE_RESOURCE_NAME`;
# Ray Train pins its state actor with it); no public option places an actor on the head.
# A trial's own actor asks for a sliver of it: that actor only waits on its TorchTrainer
# (whose workers hold the CPUs and GPUs), and on the head it does not die with a worker
# node, so Train's retry of a lost worker group can run (Tune does not retry the trial).
ON_THE_HEAD_NODE = {"node:__internal_head__": 0.001}

# ---------------------------------------------------------------- Ray client


def ray_address_file():
    """The file in which `ray start` records the address that `ray.init("auto")` joins."""
    import tempfile
    from pathlib import Path

    if not uses_private_ray():
        return Path(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()) / "ray" / "ray_current_cluster"
    from ray._common.utils import get_ray_address_file

    return Path(get_ray_address_file(None))


def ray_version() -> str:
    from importlib.metadata import version

    return version("ray")
